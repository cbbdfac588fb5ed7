#!/usr/bin/env bash
# Start a throwaway Redis on 127.0.0.1:6379 unless one already answers.
set -euo pipefail
if redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  exit 0
fi
if ! command -v redis-server >/dev/null 2>&1; then
  echo "redis-server not found; install it (apt-get install redis-server)" >&2
  exit 1
fi
redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
for _ in $(seq 1 50); do
  redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && exit 0
  sleep 0.1
done
echo "redis-server did not answer on 127.0.0.1:6379" >&2
exit 1
