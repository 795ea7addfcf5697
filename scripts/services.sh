#!/usr/bin/env bash
# Start what the tests need when it is not running: PostgreSQL and Redis on
# this machine; install Chromium's headless shell and nginx when missing.
# Safe to run again.
set -euo pipefail

if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
  echo "starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start
  for _ in $(seq 50); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.2; done
fi

if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  echo "starting Redis"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  for _ in $(seq 50); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.2; done
fi

# Chromium's headless shell for the browser tests, from Debian (Playwright
# cannot download its own here).
if ! command -v chromium-headless-shell >/dev/null 2>&1; then
  echo "installing chromium-headless-shell"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq chromium-headless-shell >/dev/null
fi

# Debian's nginx, for the test that runs deploy/nginx.conf in front of the
# studio (tests/studio/test_nginx.py starts one of its own, on free ports).
if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
  echo "installing nginx"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends nginx >/dev/null
fi
