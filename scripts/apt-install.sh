#!/usr/bin/env bash
# Install a Debian package unless it is there: scripts/apt-install.sh PACKAGE (as root, or through sudo).
set -euo pipefail
pkg="$1"
if dpkg -s "$pkg" >/dev/null 2>&1; then exit 0; fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then SUDO=sudo; else
    echo "$pkg is missing and this user cannot install it; install Debian's $pkg package" >&2
    exit 1
  fi
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$pkg" >/dev/null
