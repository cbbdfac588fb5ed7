#!/usr/bin/env bash
# A plain `pip install .` (no extras) into a fresh venv must run an eager sweep: eager mode
# is a product feature, so everything it imports has to be a runtime dependency. The question
# sets ship with it, and bench/'s benchmarks do not.
# Uses pip's cache and the embedded index under QFARM_DATA_DIR (built if missing).
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
python="${PYTHON:-python3}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# Build from a copy of the tracked files: the build leaves nothing in the checkout.
(cd "$repo" && git ls-files -z | tar --null -cf - -T -) | tar -xf - -C "$tmp" --one-top-level=src
"$python" -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q --no-compile --disable-pip-version-check "$tmp/src"
printf 'What is photosynthesis?\nWho were the members of the Beatles?\n' > "$tmp/q.txt"
cd "$tmp"  # away from the checkout: only the installed package can be imported
env -u QFARM_INDEX_PATH -u QFARM_LLM_ENDPOINTS -u QFARM_RETRIEVER QFARM_RESULTS_DIR="$tmp/results" \
  "$tmp/venv/bin/qfarm" sweep q.txt --eager -n 1 --modes quote --quiet
rows=$(cat "$tmp"/results/*/rows.jsonl | wc -l)
if [ "$rows" -ne 2 ]; then
  echo "check-install: expected 2 rows from the eager sweep, got $rows" >&2
  exit 1
fi
echo "check-install: a no-extras install ran an eager sweep ($rows rows)"
# The question sets ship as package data: a shipped set is swept by name from a folder with
# no checkout, and its run lands in ./qfarm-runs there (the default results directory).
# bench/ (the benchmarks) is not installed.
if "$tmp/venv/bin/python" -c 'import bench' 2>/dev/null; then
  echo "check-install: the benchmarks (bench) were installed; they must not ship" >&2
  exit 1
fi
# Traces are the otel extra (docs/reports.md, 'Exports'): a plain install has neither the
# OpenTelemetry SDK nor an exporter (FastAPI brings the API alone; qfarm imports it only
# for a traced run).
if "$tmp/venv/bin/python" -c 'import opentelemetry.sdk' 2>/dev/null \
    || "$tmp/venv/bin/python" -c 'import opentelemetry.exporter.otlp' 2>/dev/null; then
  echo "check-install: a plain install pulled in the OpenTelemetry SDK; it belongs to the otel extra" >&2
  exit 1
fi
# One import name: the checkout's common/, worker/, producer/ and ops/ install under qfarm,
# never as top-level packages another distribution could also own.
for generic in common worker producer ops; do
  if "$tmp/venv/bin/python" -c "import $generic" 2>/dev/null; then
    echo "check-install: the install added a top-level '$generic' package; it belongs under qfarm" >&2
    exit 1
  fi
done
"$tmp/venv/bin/python" -c 'import qfarm.common.vocab, qfarm.worker.celery, qfarm.producer.api, qfarm.ops.sim'
"$tmp/venv/bin/qfarm" sets > "$tmp/sets.txt"
expected=$(awk '$1 == "smoke" {print $2}' "$tmp/sets.txt")
if [ -z "$expected" ]; then
  cat "$tmp/sets.txt" >&2
  echo "check-install: qfarm sets does not list the shipped set 'smoke'" >&2
  exit 1
fi
mkdir "$tmp/elsewhere"
(cd "$tmp/elsewhere" && env -u QFARM_INDEX_PATH -u QFARM_LLM_ENDPOINTS -u QFARM_RETRIEVER -u QFARM_RESULTS_DIR \
  "$tmp/venv/bin/qfarm" sweep smoke --eager -n 1 --modes quote --quiet)
rows=$(cat "$tmp"/elsewhere/qfarm-runs/*/rows.jsonl | wc -l)
if [ "$rows" -ne "$expected" ]; then
  echo "check-install: expected $expected rows in ./qfarm-runs from 'qfarm sweep smoke', got $rows" >&2
  exit 1
fi
echo "check-install: 'qfarm sweep smoke' ran the shipped set into ./qfarm-runs ($rows rows); bench is not installed; one import name (qfarm)"
# The Procfile's api line needs nothing more: qfarm serve answers /healthz.
port=$("$tmp/venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
env QFARM_RESULTS_DIR="$tmp/results" "$tmp/venv/bin/qfarm" serve --eager --port "$port" > "$tmp/serve.log" 2>&1 &
serve_pid=$!
if ! "$tmp/venv/bin/python" - "$port" <<'PY'
import sys, time, urllib.request
for _ in range(150):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/healthz", timeout=2) as r:
            sys.exit(0 if r.status == 200 else 1)
    except OSError:
        time.sleep(0.2)
sys.exit(1)
PY
then
  kill "$serve_pid"; cat "$tmp/serve.log" >&2
  echo "check-install: qfarm serve did not answer /healthz" >&2
  exit 1
fi
kill "$serve_pid"; wait "$serve_pid" 2>/dev/null || true
echo "check-install: a no-extras install serves the HTTP API"
