#!/usr/bin/env bash
# Build the OpenTelemetry Collector that the live-traces test runs (ops/otelcol: the core
# collector's OTLP receiver and debug exporter, v0.165.0) into .venv/bin/qfarm-otelcol, with
# Go and the modules of ops/otelcol/go.sum from the Go module proxy (`make otelcol`, part of
# `make install-test`; docs/reports.md, 'Exports'). The first build takes minutes of this
# machine's two cores; a no-op when the binary is newer than its sources. .venv/ is
# git-ignored, so the binary is too.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=.venv/bin/qfarm-otelcol
src=(ops/otelcol/main.go ops/otelcol/go.mod ops/otelcol/go.sum)
if [ -x "$out" ]; then
  stale=0
  for f in "${src[@]}"; do
    [ "$f" -nt "$out" ] && stale=1
  done
  if [ "$stale" = 0 ]; then
    echo "otelcol: $out is up to date"
    exit 0
  fi
fi
# Debian's image puts Go outside PATH; its golang package is older than go.mod asks.
go=$(command -v go || true)
[ -z "$go" ] && [ -x /usr/local/go/bin/go ] && go=/usr/local/go/bin/go
if [ -z "$go" ]; then
  echo "otelcol: Go is not installed (go.mod in ops/otelcol names the version it needs)" >&2
  exit 1
fi
mkdir -p "$(dirname "$out")"
# -trimpath: the binary does not depend on where the checkout is; go.sum pins every module.
(cd ops/otelcol && "$go" build -trimpath -o "../../$out.tmp" .)
mv "$out.tmp" "$out"
echo "otelcol: built $out"
