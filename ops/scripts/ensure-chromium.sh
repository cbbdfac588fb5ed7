#!/usr/bin/env bash
# The viewer's browser test drives Debian's headless Chromium through its own chromedriver
# (never a browser downloaded at run time). Installs both once; a no-op when present.
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "chromium and chromium-driver are missing: install them (apt-get install chromium chromium-driver)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends chromium chromium-driver
