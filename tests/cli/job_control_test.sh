#!/usr/bin/env bash
# dlock exec under job control (issue 17): Ctrl-Z stops the command and
# dlock together; on `fg` dlock confirms its lease with the store before it
# continues the command, and kills it instead if the lease lapsed; an
# interactive command can read the terminal, in the foreground and after a
# stop for terminal input (SIGTTIN) in the background. Every wait is for a
# condition, bounded generously for a loaded machine.
source "$(dirname "$0")/lib.sh"
command -v tmux >/dev/null || { echo "tmux is missing (apt-get install tmux)"; exit 1; }
tmux_start
W=$WORK

# script NAME 'command under the lock': $W/NAME.sh runs it as a script would
# (the script's shell is in dlock's job and stops with it) and then writes
# dlock's exit status to $W/NAME.rc. The command finds its files in $W.
script() {
  cat >"$W/$1.sh" <<SH
cd '$W'
'$DLOCK' $2
echo rc=\$? >'$W/$1.rc'
SH
}
section_ok() { [ "$failures" = "$1" ] && echo "ok: $2"; }

# A lease short enough to lapse soon once its holder stops, long enough for
# its renewals to get through while it runs: at least 1 s and at most 10 s
# (the waits for a lapse below allow 30 s).
ttl_ms=$(renewable_ttl_ms 1000 10000) || fail "exec probe failed"

# --- A: Ctrl-Z, the lease lapses while stopped, another holder runs, fg.
before=$failures
script a "exec k --ttl ${ttl_ms}ms -- sh -c 'echo \$\$ >a.pid; while :; do echo tick >>a; sleep 0.1; done'"
tmux_type "sh $W/a.sh"
wait_for 30 test -s "$W/a" || fail "A: the command never ran"
cmd=$(cat "$W/a.pid")
dl=$(proc_parent "$cmd")
tmux_keys C-z
wait_for 30 is_stopped "$cmd" || fail "A: Ctrl-Z did not stop the command (state $(proc_state "$cmd"))"
wait_for 30 is_stopped "$dl" || fail "A: Ctrl-Z did not stop dlock with its command"
# The first holder is stopped, renewing nothing: once its lease lapsed the
# store gives the key to a second holder, and that is safe: the first
# command cannot run.
wait_for 30 "$DLOCK" exec k --no-wait -- true 2>/dev/null ||
  fail "A: nobody got the key after the stopped holder's lease lapsed"
is_stopped "$cmd" || fail "A: the first command ran while another holder had the key"
ticks=$(wc -l <"$W/a")
tmux_type fg
wait_for 30 test -s "$W/a.rc" || fail "A: dlock did not end after fg"
[ "$(cat "$W/a.rc")" = rc=79 ] || fail "A: after fg with a lapsed lease, $(cat "$W/a.rc"), want rc=79"
is_gone "$cmd" || fail "A: the command outlived its dlock"
[ "$(wc -l <"$W/a")" = "$ticks" ] || fail "A: the command was continued without a lease"
tmux_screen | grep -q "could not be confirmed after dlock was stopped" ||
  fail "A: no message says why: $(tmux_screen | tail -5)"
section_ok "$before" "Ctrl-Z stops command and dlock; fg with a lapsed lease kills it, never continues it"

# --- B: Ctrl-Z and fg within the lease: the command goes on and finishes.
before=$failures
# The command waits for b.go before its last 19 lines, so that it is still
# running when Ctrl-Z comes, however slow the machine.
script b "exec k2 --ttl 30s -- sh -c 'echo \$\$ >b.pid; echo 1 >>b; until [ -e b.go ]; do sleep 0.05; done; for i in \$(seq 2 20); do echo \$i >>b; sleep 0.01; done'"
tmux_type "sh $W/b.sh"
wait_for 30 test -s "$W/b" || fail "B: the command never ran"
cmd=$(cat "$W/b.pid")
tmux_keys C-z
wait_for 30 is_stopped "$cmd" || fail "B: Ctrl-Z did not stop the command (state $(proc_state "$cmd"))"
"$DLOCK" status k2 | grep -q k2 || fail "B: the stopped holder's lease is gone within its ttl"
touch "$W/b.go"
tmux_type fg
wait_for 60 test -s "$W/b.rc" || fail "B: the command did not finish after fg"
[ "$(cat "$W/b.rc")" = rc=0 ] || fail "B: $(cat "$W/b.rc"), want rc=0"
[ "$(wc -l <"$W/b")" = 20 ] || fail "B: the command wrote $(wc -l <"$W/b") of 20 lines"
section_ok "$before" "Ctrl-Z then fg inside the lease continues the command"

# --- C: an interactive command reads the terminal while it holds the lock.
before=$failures
script c "exec k3 -- sh -c 'printf \"continue? [y/N] \"; read a; echo \"answer=\$a\" >c'"
tmux_type "sh $W/c.sh"
wait_for 30 sh -c "tmux -S '$TMUX_SOCKET' capture-pane -p -t t | grep -qF 'continue? [y/N]'" ||
  fail "C: no prompt: $(tmux_screen | tail -3)"
tmux_type y
wait_for 30 test -s "$W/c.rc" || fail "C: the command hung reading the terminal"
[ "$(cat "$W/c" 2>/dev/null)" = answer=y ] || fail "C: the command read '$(cat "$W/c" 2>/dev/null)'"
[ "$(cat "$W/c.rc")" = rc=0 ] || fail "C: $(cat "$W/c.rc")"
section_ok "$before" "an interactive command reads the terminal"

# --- D: started in the background, the command reads the terminal: its job
# stops (SIGTTIN) with dlock; fg gives it the terminal and it reads.
before=$failures
script d "exec k4 -- sh -c 'echo \$\$ >d.pid; read a; echo \"got=\$a\" >d'"
tmux_type "sh $W/d.sh &"
wait_for 30 test -s "$W/d.pid" || fail "D: the command never ran"
cmd=$(cat "$W/d.pid")
dl=$(proc_parent "$cmd")
wait_for 30 is_stopped "$cmd" || fail "D: reading in the background did not stop the command"
wait_for 30 is_stopped "$dl" || fail "D: dlock did not stop with its command"
tmux_type fg
wait_for 30 is_running "$cmd" || fail "D: fg did not continue the command"
tmux_type z
wait_for 30 test -s "$W/d.rc" || fail "D: the command did not read the terminal after fg"
[ "$(cat "$W/d" 2>/dev/null)" = got=z ] || fail "D: read '$(cat "$W/d" 2>/dev/null)'"
section_ok "$before" "a background read stops the job; fg hands the terminal over"

# --- E: no terminal: kill -TSTP of dlock (the reproduction in issue 17).
# Only dlock and its command stop, not this script in dlock's group. dlock
# runs in a session of its own, so its process group is orphaned, as a
# script's under cron is: there the kernel discards SIGTSTP.
before=$failures
setsid "$DLOCK" exec k5 --ttl ${ttl_ms}ms -- sh -c "echo \$\$ >$W/e.pid; while :; do echo tick >>$W/e; sleep 0.1; done" \
  </dev/null 2>"$W/e.err" &
dl=$!
wait_for 30 test -s "$W/e" || fail "E: the command never ran"
cmd=$(cat "$W/e.pid")
kill -TSTP "$dl"
wait_for 30 is_stopped "$cmd" || fail "E: SIGTSTP to dlock did not stop its command"
wait_for 30 is_stopped "$dl" || fail "E: dlock did not stop with its command"
wait_for 30 "$DLOCK" exec k5 --no-wait -- true 2>/dev/null || fail "E: nobody got the key"
ticks=$(wc -l <"$W/e")
kill -CONT "$dl"
wait_for 30 is_gone "$dl" || { fail "E: dlock still runs after SIGCONT"; kill -KILL "$dl"; }
wait "$dl"
rc=$?
[ "$rc" = 79 ] || fail "E: dlock exited $rc after SIGCONT with a lapsed lease, want 79"
is_gone "$cmd" || fail "E: the command outlived its dlock"
[ "$(wc -l <"$W/e")" = "$ticks" ] || fail "E: the command ran again without a lease"
section_ok "$before" "kill -TSTP of dlock stops both; SIGCONT with a lapsed lease ends in 79"
finish
