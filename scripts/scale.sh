#!/usr/bin/env bash
# Run the studio at scale on one machine: two web processes (8001, 8002) and
# two Celery workers, on PostgreSQL and Redis. Ctrl-C stops them all.
#
#   DATABASE_URL=postgres://postgres@127.0.0.1:5432/studio \
#   REDIS_URL=redis://127.0.0.1:6379/0 DJANGO_SECRET_KEY=… scripts/scale.sh
set -euo pipefail
cd "$(dirname "$0")/.."
: "${DATABASE_URL:?set DATABASE_URL to a PostgreSQL database}"
: "${REDIS_URL:?set REDIS_URL}"
: "${DJANGO_SECRET_KEY:?set DJANGO_SECRET_KEY to a random key of 50 characters or more}"
make install services >/dev/null
.venv/bin/python manage.py migrate --noinput
.venv/bin/python manage.py collectstatic --noinput >/dev/null
# One metrics directory for all four, so a scrape of either web process sums
# them; emptied as they start (README, "Operating it").
export PROMETHEUS_MULTIPROC_DIR="${PROMETHEUS_MULTIPROC_DIR:-${TMPDIR:-/tmp}/studio-metrics}"
mkdir -p "$PROMETHEUS_MULTIPROC_DIR"
rm -f "$PROMETHEUS_MULTIPROC_DIR"/*.db

pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait' EXIT INT TERM
while IFS=: read -r name command; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  echo "starting $name:$command"
  bash -c "exec $command" 2>&1 | sed -u "s/^/[$name] /" &
  pids+=($!)
done < Procfile
wait
