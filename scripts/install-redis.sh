#!/usr/bin/env bash
# Install Debian's redis-server (the second memory backend; tests start their own servers).
set -euo pipefail
command -v redis-server >/dev/null || exec "$(dirname "$0")/apt-install.sh" redis-server
