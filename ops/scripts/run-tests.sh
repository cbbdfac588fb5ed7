#!/usr/bin/env bash
# The whole test suite in two pytest sessions side by side (`make test` runs this).
#
# tests/faults starts its own redis-servers (free ports, its own data dirs), simulators
# and Celery workers, and spends most of its five minutes waiting on them; the rest of
# the suite uses the shared Redis on 6379. Nothing is shared between the two, so the
# fault suite runs beside the rest instead of after it (a 2-core CI host idles through
# most of either alone). Its output is printed when both are done.
set -u
cd "$(dirname "$0")/../.."
bin=.venv/bin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin/pytest" tests/faults --basetemp "$tmp/basetemp" "$@" >"$tmp/faults.log" 2>&1 &
faults=$!
"$bin/pytest" --ignore=tests/faults "$@"
rest=$?
wait "$faults"
fault_status=$?
echo "---------------------------------------- tests/faults (ran beside the above)"
cat "$tmp/faults.log"
if [ "$rest" -ne 0 ]; then exit "$rest"; fi
exit "$fault_status"
