#!/usr/bin/env bash
# Try the studio at scale on this machine — for development and benchmarks,
# not a production host (there: scripts/start.sh, or the units in deploy/).
# It installs the virtualenv, starts PostgreSQL and Redis when they are down
# (scripts/services.sh, which also installs what the tests use), migrates,
# collects static files, then runs the Procfile's two web processes (8001,
# 8002) and two Celery workers with scripts/start.sh. Ctrl-C stops them all.
#
#   DATABASE_URL=postgres://postgres@127.0.0.1:5432/studio \
#   REDIS_URL=redis://127.0.0.1:6379/0 DJANGO_SECRET_KEY=… scripts/scale.sh
#
# (or the same settings in .env).
set -euo pipefail
cd "$(dirname "$0")/.."
make install services >/dev/null
.venv/bin/python manage.py migrate --noinput
.venv/bin/python manage.py collectstatic --noinput >/dev/null
exec scripts/start.sh
