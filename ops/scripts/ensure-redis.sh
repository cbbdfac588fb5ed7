#!/usr/bin/env bash
# Start a throwaway Redis on 127.0.0.1:6379 (no persistence) unless one already answers.
# A machine may come without Redis at all: as root, Debian's redis-server is installed
# with apt-get (as ensure-chromium.sh does for Chromium). Only the package is taken:
# the service Debian's package would start is stopped again, since it persists to disk
# and the farm's tests want a Redis that forgets.
set -euo pipefail
if command -v redis-cli >/dev/null 2>&1 && redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  exit 0
fi
if ! command -v redis-server >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    echo "redis-server is missing: install it (apt-get install redis-server), then run this again" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  # policy-rc.d answering 101 keeps the package's own service from starting during install.
  policy=/usr/sbin/policy-rc.d
  had_policy=0
  [ -e "$policy" ] && had_policy=1
  if [ "$had_policy" -eq 0 ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod +x "$policy"
  fi
  apt-get install -y -q --no-install-recommends redis-server redis-tools
  if [ "$had_policy" -eq 0 ]; then rm -f "$policy"; fi
  if redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
    redis-cli -h 127.0.0.1 -p 6379 shutdown nosave >/dev/null 2>&1 || true
  fi
fi
redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
for _ in $(seq 1 50); do
  redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && exit 0
  sleep 0.1
done
echo "redis-server did not answer on 127.0.0.1:6379" >&2
exit 1
