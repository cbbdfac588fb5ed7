#!/usr/bin/env bash
# The fault suite runs a worker on a host whose clock is wrong, through Debian's libfaketime
# (LD_PRELOAD; nothing downloaded at run time). Installs it once; a no-op when present.
set -euo pipefail
[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] && exit 0
bash "$(dirname "$0")/apt-install.sh" faketime
