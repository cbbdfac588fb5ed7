#!/usr/bin/env bash
# The fault suite runs a worker on a host whose clock is wrong, through Debian's libfaketime
# (LD_PRELOAD; nothing downloaded at run time). Installs it once as root; a no-op when present.
set -euo pipefail
lib=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1
if [ -e "$lib" ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "libfaketime is missing: install it (apt-get install faketime)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends faketime
