#!/usr/bin/env bash
# Install Debian's PostgreSQL server programs (the team tracking server's backend; dkilab tracking-server
# and its slow test start their own server in their own data dir, never the system cluster).
set -euo pipefail
if command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then exit 0; fi
exec "$(dirname "$0")/apt-install.sh" postgresql
