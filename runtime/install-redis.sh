#!/usr/bin/env bash
# Installs Debian's redis-server for the store/redis tests, which start
# their own redis-server on a loopback port (nothing runs globally; the
# package's own service is not needed). Idempotent: it asks apt only when
# the package is missing. Needs root to install.
set -euo pipefail

if command -v redis-server >/dev/null 2>&1; then
  echo "install-redis: $(redis-server --version | cut -d' ' -f1-3)"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "install-redis: redis-server is missing; run as root (apt-get install redis-server)" >&2
  exit 1
fi
echo "install-redis: apt-get install redis-server"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null
redis-server --version
