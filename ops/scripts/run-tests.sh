#!/usr/bin/env bash
# The whole test suite in three pytest sessions side by side (`make test` runs this).
#
# Most of the slow tests wait on the processes they start: tests/faults on its own
# redis-servers (free ports, its own data dirs), simulators and Celery workers; the
# benchmarks' quick modes and the distributed sweeps on theirs. One session after
# another left a 2-core host idle through most of the run (the suite took 19 minutes in
# one session, 12 in two), so the fault suite runs in a session of its own, the
# benchmarks, distributed sweeps and command-line tests (each a fresh process) in
# another, beside the rest. The sessions share only
# the Redis on 6379, each in a database of its own (QFARM_TEST_REDIS_DB: tests flush
# theirs; the benchmarks' scripts use a 12th). The other sessions' output is printed
# when all are done; the exit status is the first failing session's.
set -u
cd "$(dirname "$0")/../.."
bin=.venv/bin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
faults=(tests/faults)
farm=(tests/bench tests/producer/runs/test_distributed.py tests/qfarm)
QFARM_TEST_REDIS_DB=8 "$bin/pytest" "${faults[@]}" --basetemp "$tmp/faults" "$@" \
  >"$tmp/faults.log" 2>&1 &
faults_pid=$!
QFARM_TEST_REDIS_DB=7 "$bin/pytest" "${farm[@]}" --basetemp "$tmp/farm" "$@" \
  >"$tmp/farm.log" 2>&1 &
farm_pid=$!
"$bin/pytest" "${faults[@]/#/--ignore=}" "${farm[@]/#/--ignore=}" "$@"
rest=$?
wait "$faults_pid"
faults_status=$?
wait "$farm_pid"
farm_status=$?
echo "---------------------------------------- ${faults[*]} (ran beside the above)"
cat "$tmp/faults.log"
echo "---------------------------------------- ${farm[*]} (ran beside the above)"
cat "$tmp/farm.log"
for status in "$rest" "$faults_status" "$farm_status"; do
  if [ "$status" -ne 0 ]; then exit "$status"; fi
done
exit 0
