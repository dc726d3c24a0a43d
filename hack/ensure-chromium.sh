#!/usr/bin/env bash
# The console's browser tests drive Debian's Chromium (/usr/bin/chromium),
# never a browser a test tool downloads. This installs it with apt-get when
# it is missing (CAPSTAN_CHROMIUM names another one instead).
set -euo pipefail
if [ -n "${CAPSTAN_CHROMIUM:-}" ] || command -v chromium >/dev/null 2>&1; then
	exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
	sudo="sudo"
fi
echo "installing Debian's chromium for the console's browser tests" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null
chromium --version
