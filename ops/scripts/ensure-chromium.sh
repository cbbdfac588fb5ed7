#!/usr/bin/env bash
# The viewer's browser test drives Debian's headless Chromium through its own chromedriver
# (never a browser downloaded at run time). Installs both once; a no-op when present.
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
  exit 0
fi
bash "$(dirname "$0")/apt-install.sh" chromium chromium-driver
