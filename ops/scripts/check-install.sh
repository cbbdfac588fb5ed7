#!/usr/bin/env bash
# A plain `pip install .` (no extras) into a fresh venv must run an eager sweep: eager mode
# is a product feature, so everything it imports has to be a runtime dependency.
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
