#!/usr/bin/env bash
# The `dlock exec` to `dlock exec` gap (issue 25): how long after one
# command's end the next command, waiting on the same key, starts, less what
# starting that command costs without dlock, measured in the same run.
#
#   scripts/exec_gap.sh STORE [ROUNDS]
#
# STORE: sqlite postgres mariadb redis etcd zookeeper. Starts a fresh server
# with scripts/servers/STORE.sh in a temporary directory (and stops it), or
# uses $DLOCK_BACKEND when it is set. ROUNDS: default 30.
#
# Each round runs, on one key,
#   A: dlock exec KEY -- sh -c ': >HELD; until [ -e GO ]; do sleep 0.01; done;
#                               exec NOW >A'
#   B: dlock exec KEY -- sh -c 'exec NOW >B'        (started once HELD exists)
# and creates GO once `dlock status KEY --waits` shows B queued behind A.
# NOW is a tiny C helper printing CLOCK_MONOTONIC in ns: A's stamp is the
# last thing A does, B's the first thing B does, so B - A is A's exit, the
# release, B's wake-up and grant, and B's start. The same two `sh -c`
# commands run back to back by this shell, without dlock, give the start
# cost (an exit and a start) in the same round; the gap is B - A less the
# median start cost. Prints the median and p90 of each, and in how many
# rounds B was not seen queued within EXEC_GAP_QUEUE_WAIT_S (default 10 s;
# those rounds count all the same).
#
# Environment: DLOCK (the dlock binary; default build/dlock),
# EXEC_GAP_QUEUE_WAIT_S, CC.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
store=${1:?usage: scripts/exec_gap.sh STORE [ROUNDS]}
rounds=${2:-30}
queue_wait_s=${EXEC_GAP_QUEUE_WAIT_S:-10}
dlock=${DLOCK:-$repo/build/dlock}
[ -x "$dlock" ] || { echo "exec_gap.sh: $dlock is missing; build first" >&2; exit 69; }
case $store in
  sqlite | postgres | mariadb | redis | etcd | zookeeper) ;;
  *) echo "exec_gap.sh: unknown store '$store'" >&2; exit 64 ;;
esac
work=$(mktemp -d /tmp/dlock-exec-gap.XXXXXX)
server=""
unqueued=0

cleanup() {
  if [ -n "$server" ]; then
    bash "$repo/scripts/servers/$store.sh" stop "$server" >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# NOW: prints CLOCK_MONOTONIC in nanoseconds.
build_clock() {
  "${CC:-cc}" -O2 -x c -o "$work/now" - <<'EOF'
#include <stdio.h>
#include <time.h>
int main(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  printf("%lld\n", (long long)t.tv_sec * 1000000000LL + t.tv_nsec);
  return 0;
}
EOF
}

# The store's URI in DLOCK_BACKEND (never on argv: a server's password is in it).
open_store() {
  if [ -n "${DLOCK_BACKEND:-}" ]; then
    return
  elif [ "$store" = sqlite ]; then
    DLOCK_BACKEND="sqlite://$work/locks.db"
  else
    server=$work/server
    bash "$repo/scripts/servers/$store.sh" start "$server" >/dev/null
    DLOCK_BACKEND=$(cat "$server/uri")
  fi
  export DLOCK_BACKEND
}

# The two commands; $1 is where their stamps go.
first_cmd() {
  echo ": >'$1/held'; until [ -e '$1/go' ]; do sleep 0.01; done; exec '$work/now' >'$1/a'"
}
second_cmd() { echo "exec '$work/now' >'$1/b'"; }

wait_for_file() {
  local i
  for ((i = 0; i < 6000; i++)); do
    [ -e "$1" ] && return 0
    sleep 0.005
  done
  echo "exec_gap.sh: $1 never appeared" >&2
  return 1
}

# Until `dlock status` shows a waiter for KEY; false after queue_wait_s.
wait_for_waiter() {
  local i
  for ((i = 0; i < queue_wait_s * 10; i++)); do
    "$dlock" status "$1" --waits --json 2>/dev/null | grep -q '"verdict"' && return 0
    sleep 0.1
  done
  return 1
}

# Without dlock: the same two commands, one after the other.
start_cost_round() {
  local d=$work/plain.$1
  mkdir "$d"
  : >"$d/go"
  sh -c "$(first_cmd "$d")"
  sh -c "$(second_cmd "$d")"
  echo $(($(cat "$d/b") - $(cat "$d/a"))) >>"$work/plain"
}

# Under dlock: A ends once B is queued behind it.
exec_round() {
  local d=$work/exec.$1 key="exec-gap/$$" a b
  mkdir "$d"
  "$dlock" exec "$key" --wait 60s -- sh -c "$(first_cmd "$d")" &
  a=$!
  wait_for_file "$d/held"
  "$dlock" exec "$key" --wait 60s -- sh -c "$(second_cmd "$d")" &
  b=$!
  wait_for_waiter "$key" || unqueued=$((unqueued + 1))
  : >"$d/go"
  wait "$a"
  wait "$b"
  echo $(($(cat "$d/b") - $(cat "$d/a"))) >>"$work/exec"
}

# FILE: "median p90" in ms (nearest rank), from ns, one a line.
percentiles() {
  sort -n "$1" | awk '{ v[NR] = $1 }
    END { m = v[int((NR + 1) / 2)]; p = v[int(NR * 0.9 + 0.999)]
          printf "%.2f %.2f\n", m / 1e6, p / 1e6 }'
}

report() {
  local cost exec_ms cost_med gap_med gap_p90
  cost=$(percentiles "$work/plain")
  exec_ms=$(percentiles "$work/exec")
  cost_med=${cost%% *}
  gap_med=$(awk -v e="${exec_ms%% *}" -v c="$cost_med" 'BEGIN { printf "%.2f", e - c }')
  gap_p90=$(awk -v e="${exec_ms##* }" -v c="$cost_med" 'BEGIN { printf "%.2f", e - c }')
  echo "store $store, $rounds rounds, $dlock"
  echo "  start cost (sh -c, back to back, no dlock): median ${cost_med} ms, p90 ${cost##* } ms"
  echo "  exec -> exec end-to-start:                  median ${exec_ms%% *} ms, p90 ${exec_ms##* } ms"
  echo "  gap (less the median start cost):           median $gap_med ms, p90 $gap_p90 ms"
  echo "  rounds where B was not seen queued before A ended: $unqueued"
}

main() {
  build_clock
  open_store
  local i
  # One round of each first, not counted: caches, the store's tables.
  exec_round warm
  start_cost_round warm
  unqueued=0
  : >"$work/exec"
  : >"$work/plain"
  for ((i = 1; i <= rounds; i++)); do
    exec_round "$i"
    start_cost_round "$i"
  done
  report
}

main
