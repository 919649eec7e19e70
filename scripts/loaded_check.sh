#!/usr/bin/env bash
# The suite on a machine doing other work, as a user's often is: RUNS times
# in a row (default 3), each from a fresh clone of HEAD, the README's test
# command (.ci/run) beside a CPU hog that keeps one core busy for the whole
# run. Stops at the first red run. Logs and a summary line per run in
# OUT (default /tmp/dlock-loaded-<time>). Every run checks out the commit
# that was HEAD when the script started.
#
#   scripts/loaded_check.sh [RUNS] [OUT]
#
# Outside CI: about an hour per run on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
out=${2:-/tmp/dlock-loaded-$(date +%Y%m%d-%H%M)}
mkdir -p "$out"
head=$(git rev-parse --short HEAD)
hog=""
stop_hog() { [ -z "$hog" ] || kill "$hog" 2>/dev/null || true; }
trap stop_hog EXIT
for ((i = 1; i <= runs; i++)); do
  tree="$out/tree-$i"
  rm -rf "$tree"
  git clone -q "$PWD" "$tree"
  git -C "$tree" checkout -q "$head"  # commits made meanwhile wait their turn
  bash -c 'while :; do :; done' &
  hog=$!
  start=$(date +%s)
  set +e
  (cd "$tree" && .ci/run) >"$out/run-$i.log" 2>&1
  code=$?
  set -e
  stop_hog
  hog=""
  echo "run $i of $runs, $head: exit $code after $(($(date +%s) - start)) s, load $(cut -d' ' -f1-3 /proc/loadavg)" |
    tee -a "$out/summary"
  [ "$code" = 0 ] || { echo "loaded_check: run $i failed; see $out/run-$i.log" >&2; exit 1; }
  rm -rf "$tree"
done
echo "loaded_check: $runs runs in a row passed on $head" | tee -a "$out/summary"
