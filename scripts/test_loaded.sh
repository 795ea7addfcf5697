#!/usr/bin/env bash
# `make test` with a CPU hog beside it on every core (`make test-loaded`):
# the suite must pass on a loaded machine, so nothing in it may lean on
# how fast this one is. The hog is stress-ng's CPU workers (from Debian,
# installed when missing), or busy shell loops where it cannot be had; it
# is stopped however the run ends (a failure, Ctrl-C, a kill), and its
# own timeout ends it should this script be killed outright.
# Usage: scripts/test_loaded.sh [make arguments...]; HOG_CPUS=N for another
# number of hogs than this machine's cores.
set -uo pipefail

cpus=${HOG_CPUS:-$(nproc)}
hogs=()

stop_hogs() {
  if [ ${#hogs[@]} -gt 0 ]; then
    kill "${hogs[@]}" 2>/dev/null
    wait "${hogs[@]}" 2>/dev/null
    hogs=()
  fi
}
trap stop_hogs EXIT
trap 'stop_hogs; exit 130' INT TERM

if ! command -v stress-ng >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  echo "installing stress-ng"
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq stress-ng; } >/dev/null 2>&1 || true
fi

if command -v stress-ng >/dev/null 2>&1; then
  echo "CPU hog: stress-ng --cpu $cpus, beside make test"
  stress-ng --cpu "$cpus" --timeout 3h --quiet &
  hogs+=($!)
else
  echo "CPU hog: $cpus busy shell loops (no stress-ng), beside make test"
  for _ in $(seq "$cpus"); do
    timeout 3h sh -c 'while :; do :; done' &
    hogs+=($!)
  done
fi

started=$SECONDS
make test "$@"
status=$?
echo "make test beside a CPU hog on $cpus core(s): $([ $status = 0 ] && echo passed || echo failed), $((SECONDS - started)) s"
exit $status
