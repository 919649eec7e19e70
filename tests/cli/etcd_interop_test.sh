#!/usr/bin/env bash
# dlock and etcd's own lock exclude each other on one name: two shells run
# `etcdctl lock NAME -- CMD` (etcd's concurrency.Mutex, Debian etcd-client)
# and two run `dlock exec NAME -- CMD`, concurrently. Every CMD appends a
# start and an end line to one log; no two may overlap, and dlock's tokens
# must increase. Needs the etcd fixture ($DLOCK_TEST_URI_FILE).
source "$(dirname "$0")/lib.sh"
export DLOCK_BACKEND=$(cat "${DLOCK_TEST_URI_FILE:?needs the etcd fixture}")
command -v etcdctl >/dev/null || { echo "etcdctl not found: apt-get install etcd-client" >&2; exit 1; }
endpoints=${DLOCK_BACKEND#etcd://}
name="interop-$$-$RANDOM"
LOG="$WORK/log"
: >"$LOG"
RUNS=${RUNS:-10}

# $0 is the log, $1 who is writing.
critical='echo "start $1 ${DLOCK_TOKEN:-0}" >>"$0"; sleep 0.1; echo "end $1 ${DLOCK_TOKEN:-0}" >>"$0"'

dlock_shell() {
  local i
  for ((i = 0; i < RUNS; i++)); do
    "$DLOCK" exec "$name" --ttl 5s --wait 60s -- sh -c "$critical" "$LOG" dlock ||
      { echo "dlock run $i exited $?" >&2; return 1; }
  done
}
# etcdctl starts once a dlock holds the lock: a dlock exec takes longer to
# start than an etcdctl run (much longer under a sanitizer on a busy
# machine), and the etcdctl shells could otherwise finish every run before
# the first dlock asked, and hand nothing over.
etcdctl_shell() {
  local i
  wait_for 120 grep -q "^start dlock" "$LOG" || { echo "no dlock run started" >&2; return 1; }
  for ((i = 0; i < RUNS; i++)); do
    ETCDCTL_API=3 etcdctl --endpoints "$endpoints" lock "$name" -- sh -c "$critical" "$LOG" etcdctl \
      >/dev/null || { echo "etcdctl run $i exited $?" >&2; return 1; }
  done
}

pids=()
dlock_shell & pids+=($!)
etcdctl_shell & pids+=($!)
dlock_shell & pids+=($!)
etcdctl_shell & pids+=($!)
for p in "${pids[@]}"; do wait "$p" || fail "a shell failed"; done

lines=$(wc -l <"$LOG")
[ "$lines" -eq $((8 * RUNS)) ] || fail "log has $lines lines, want $((8 * RUNS))"
grep -q "^start etcdctl" "$LOG" || fail "etcdctl never ran"
grep -q "^start dlock" "$LOG" || fail "dlock never ran"
awk '
  $1 == "start" { if (open) { print "overlap at line " NR ": " $0 " inside " who; bad = 1 }
                  open = 1; who = $2
                  if ($2 == "dlock") { if ($3 + 0 <= last) { print "token " $3 " not above " last; bad = 1 }
                                       last = $3 + 0 } }
  $1 == "end"   { if (!open || $2 != who) { print "unmatched end at line " NR ": " $0; bad = 1 }
                  open = 0 }
  END { exit bad }' "$LOG" || fail "dlock and etcdctl critical sections overlapped"
# Hand-overs between the two kinds, both ways, happened.
awk '$1 == "start" { if (prev != "" && prev != $2) switches++; prev = $2 } END { exit !(switches >= 2) }' \
  "$LOG" || fail "dlock and etcdctl never handed the lock to each other"
echo "checked $((4 * RUNS)) runs: 2 shells of etcdctl lock, 2 of dlock exec"
finish
