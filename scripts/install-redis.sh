#!/usr/bin/env bash
# Install Debian's redis-server (the second memory backend; tests start their own servers).
set -euo pipefail
if command -v redis-server >/dev/null; then exit 0; fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then SUDO=sudo; else
    echo "redis-server is missing and this user cannot install it; install Debian's redis-server package" >&2
    exit 1
  fi
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server >/dev/null
