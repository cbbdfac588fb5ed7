#!/usr/bin/env bash
# Install Debian packages for the tests (the ensure-*.sh scripts call it when what they need
# is missing): as root with apt-get, else one line naming the packages and exit 1.
set -euo pipefail
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "missing: install $* (apt-get install $*)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "$@"
