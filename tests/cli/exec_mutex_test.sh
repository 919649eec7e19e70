#!/usr/bin/env bash
# Mutual exclusion across processes: 4 shells run `dlock exec` 50 times each
# on one key; every child appends start/end markers and its token to one log.
# No two children may overlap, and tokens must strictly increase in log order.
# Against a server store when run with its fixture ($DLOCK_TEST_URI_FILE).
source "$(dirname "$0")/lib.sh"
use_fixture_store
LOG="$WORK/log"
: >"$LOG"
RUNS_PER_SHELL=${RUNS_PER_SHELL:-$(repeats 50)}

shell() {
  local id=$1 i
  for ((i = 0; i < RUNS_PER_SHELL; i++)); do
    "$DLOCK" exec shared-key --ttl 5s --wait 60s -- \
      sh -c 'echo "start $DLOCK_TOKEN $0" >>"$1"; echo "end $DLOCK_TOKEN $0" >>"$1"' "$id" "$LOG" ||
      { echo "shell $id run $i exited $?" >&2; return 1; }
  done
}
pids=()
for s in 1 2 3 4; do shell "$s" & pids+=($!); done
for p in "${pids[@]}"; do wait "$p" || fail "a shell failed"; done

lines=$(wc -l <"$LOG")
[ "$lines" -eq $((8 * RUNS_PER_SHELL)) ] || fail "log has $lines lines, want $((8 * RUNS_PER_SHELL))"
awk '
  $1 == "start" { if (open) { print "overlap at line " NR ": " $0; bad = 1 }
                  open = 1; if ($2 + 0 <= last) { print "token " $2 " not above " last " at line " NR; bad = 1 }
                  last = $2 + 0; tok = $2 }
  $1 == "end"   { if (!open || $2 != tok) { print "unmatched end at line " NR ": " $0; bad = 1 }
                  open = 0 }
  END { exit bad }' "$LOG" || fail "critical sections overlapped or tokens went backwards"
echo "checked $((4 * RUNS_PER_SHELL)) runs from 4 shells"
finish
