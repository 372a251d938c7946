#!/usr/bin/env bash
# Installs Debian's chromium for the HTML report test (tests/test_html_report.py).
# The test drives it with Playwright (pip install playwright) through
# executable_path=/usr/bin/chromium; never run `playwright install`, which downloads
# its own browser build.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  echo "chromium already installed: $(/usr/bin/chromium --version 2>/dev/null || true)"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends chromium
/usr/bin/chromium --version || true
