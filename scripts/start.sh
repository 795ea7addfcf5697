#!/usr/bin/env bash
# Run the studio's processes, the Procfile's, on a host without systemd (a
# container, a plain VM; with systemd, use the units in deploy/). It installs
# nothing, starts no database or Redis and runs no migration: those are steps
# of a release (docs/operating.md, "Deploying"). Settings come from .env or the
# environment.
#
# A process that exits is started again, after a pause that grows while it
# keeps failing; the others run on. SIGTERM or SIGINT (Ctrl-C) sends every
# process SIGTERM, and the script ends once they all have: give it as long
# to stop as the units give theirs (TimeoutStopSec in deploy/).
#
# It keeps, in $STUDIO_RUN_DIR (.run in the checkout when unset), its own
# pid (start.pid), each running process's (<name>.pid) and when each was
# started (<name>.starts, a line a start): scripts/studioctl reads them for
# `status`, `restart` and `rolling-restart`.
#
#   scripts/start.sh                      # the Procfile's processes
#   PROCFILE=/path/to/Procfile scripts/start.sh
set -euo pipefail
cd "$(dirname "$0")/.."
procfile=${PROCFILE:-Procfile}
rundir=${STUDIO_RUN_DIR:-.run}
mkdir -p "$rundir"
rm -f "$rundir"/*.pid "$rundir"/*.starts
echo $$ >"$rundir/start.pid"

# One metrics directory for all of them, emptied now that they all start;
# one that restarts on its own below leaves it alone (docs/operating.md, "Metrics").
# Read from this script's environment, not from .env.
export PROMETHEUS_MULTIPROC_DIR=${PROMETHEUS_MULTIPROC_DIR:-${TMPDIR:-/tmp}/studio-metrics}
mkdir -p "$PROMETHEUS_MULTIPROC_DIR"
rm -f "$PROMETHEUS_MULTIPROC_DIR"/*.db

# supervise NAME COMMAND: run COMMAND, its output's lines marked [NAME], and
# again whenever it exits, until this subshell is sent SIGTERM.
supervise() {
  local name=$1 command=$2 child="" stopping="" pause=1 started status
  trap 'stopping=1; [[ -z $child ]] || kill -TERM "$child" 2>/dev/null || true' TERM
  while [[ -z $stopping ]]; do
    started=$SECONDS
    bash -c "exec $command" > >(sed -u "s/^/[$name] /") 2>&1 &
    child=$!
    echo "$child" >"$rundir/$name.pid"
    date +%s >>"$rundir/$name.starts"
    status=0
    wait "$child" || status=$?
    # A wait the trap cut short: the process is still stopping.
    while kill -0 "$child" 2>/dev/null; do wait "$child" || status=$?; done
    child=""
    rm -f "$rundir/$name.pid"
    [[ -z $stopping ]] || break
    if ((SECONDS - started >= 60)); then pause=1; fi
    echo "[$name] exited with status $status; starting it again in ${pause}s" >&2
    sleep "$pause" &
    wait $! || true
    pause=$((pause * 2 > 60 ? 60 : pause * 2))
  done
}

supervisors=()
while IFS=: read -r name command; do
  [[ -z ${name// /} || $name == \#* ]] && continue
  echo "starting $name:$command"
  supervise "$name" "$command" &
  supervisors+=($!)
done <"$procfile"

trap 'kill -TERM "${supervisors[@]}" 2>/dev/null || true' TERM INT
# `wait` returns whenever a trap runs: wait on until every supervisor is done.
for supervisor in "${supervisors[@]}"; do
  while kill -0 "$supervisor" 2>/dev/null; do wait "$supervisor" || true; done
done
rm -f "$rundir/start.pid"
