#!/usr/bin/env bash
# The whole test suite in two pytest sessions side by side (`make test` runs this).
#
# tests/faults starts its own redis-servers (free ports, its own data dirs), simulators
# and Celery workers, and spends most of its minutes waiting on them, so it runs beside
# the rest instead of after it (a 2-core CI host idles through most of either alone).
# The benchmarks' quick modes and the distributed sweeps (also mostly waiting on the
# processes they start) run in that second session too, which evens the two out. The
# sessions share only the Redis on 6379, each in a database of its own
# (QFARM_TEST_REDIS_DB: tests flush theirs; the benchmarks' scripts use an 11th).
# The second session's output is printed when both are done.
set -u
cd "$(dirname "$0")/../.."
bin=.venv/bin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
beside=(tests/faults tests/bench tests/producer/test_distributed.py)
QFARM_TEST_REDIS_DB=8 "$bin/pytest" "${beside[@]}" --basetemp "$tmp/basetemp" "$@" >"$tmp/faults.log" 2>&1 &
faults=$!
"$bin/pytest" "${beside[@]/#/--ignore=}" "$@"
rest=$?
wait "$faults"
fault_status=$?
echo "---------------------------------------- ${beside[*]} (ran beside the above)"
cat "$tmp/faults.log"
if [ "$rest" -ne 0 ]; then exit "$rest"; fi
exit "$fault_status"
