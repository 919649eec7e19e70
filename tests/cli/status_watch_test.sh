#!/usr/bin/env bash
# dlock status --watch: a live view in a terminal (tmux), redrawn in place
# with a holder, a waiter and a deadlock cycle built here, q and Ctrl-C to
# quit and Ctrl-Z to stop, the terminal put back each time; a JSON line
# per look for scripts; bad flags refused.
source "$(dirname "$0")/lib.sh"
M="$WORK/marks"
mkdir -p "$M"

# Bad input: one line, exit 64.
expect_exit 64 "out of range: 100ms to 1h" -- "$DLOCK" status --watch --interval 10ms
expect_exit 64 "--interval" -- "$DLOCK" status --watch --interval fast
expect_exit 64 "--count -1 is out of range" -- "$DLOCK" status --watch --count -1
expect_exit 64 "--watch" -- "$DLOCK" status --interval 1s

# A holder for the looks below; its process is dlock's (exec).
hold() { exec "$DLOCK" exec "$1" --label "$2" --ttl 3s -- sh -c 'touch "$0"; sleep 60' "$M/$2"; }
hold watched/key holder & h1=$!
wait_for 30 test -e "$M/holder" || fail "the holder never started"

# For scripts: exactly --count lines, each one JSON object, later ones later.
"$DLOCK" status --watch --json --count 3 --interval 100ms watched/ >"$WORK/stream" ||
  fail "status --watch --json exited $?"
"$PYTHON3" - "$WORK/stream" <<'PY' || fail "JSON stream: $(cat "$WORK/stream")"
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 3, lines
looks = [json.loads(l) for l in lines]
assert all(l["holders"][0]["key"] == "watched/key" for l in looks), looks
assert looks[0]["at_ms"] < looks[1]["at_ms"] < looks[2]["at_ms"], looks
PY
# Piped text: frames one after another, no terminal codes.
"$DLOCK" status --watch --count 2 --interval 100ms >"$WORK/frames" || fail "piped --watch exited $?"
[ "$(grep -c '^dlock status --watch:' "$WORK/frames")" = 2 ] || fail "two frames: $(cat "$WORK/frames")"
grep -q $'\x1b' "$WORK/frames" && fail "escape codes in piped output"

# The terminal: the live view follows the store.
tmux_start
screen_has() { tmux -S "$TMUX_SOCKET" capture-pane -p -t t | grep -qF -- "$1"; }
tmux_type "stty -g > $WORK/stty.before"
tmux_type "$DLOCK status --watch --interval 200ms"
wait_for 30 screen_has "watched/key" || fail "the view never showed the holder: $(tmux_screen)"
screen_has "nobody is waiting" || fail "no waiters line: $(tmux_screen)"
"$DLOCK" exec watched/key --label waiter --wait 60s -- true & w1=$!
wait_for 30 screen_has "(waiter) waits" || fail "the waiter never showed: $(tmux_screen)"

# A deadlock: each party holds one key and, inside, waits for the other's.
cross() {
  exec "$DLOCK" exec "$2" --label "$1" --ttl 3s --wait 60s -- \
    sh -c 'touch "$0.in"; i=0; while [ ! -e "$3.in" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
           exec "$1" exec "$2" --wait 60s -- true' "$M/$1" "$DLOCK" "$3" "$M/$4"
}
cross alpha cycle/a cycle/b beta & x1=$!
cross beta cycle/b cycle/a alpha & x2=$!
wait_for 60 screen_has "DEADLOCK: 2 parties" || fail "the cycle never showed: $(tmux_screen)"

# Ctrl-Z stops it with the terminal given back; fg brings the view again.
tmux_keys C-z
wait_for 20 screen_has "Stopped" || fail "Ctrl-Z did not stop the view: $(tmux_screen)"
screen_has "dlock status --watch:" && fail "the stopped view still covers the screen"
tmux_type fg
wait_for 20 screen_has "dlock status --watch:" || fail "fg did not bring the view back: $(tmux_screen)"

# q quits, and the terminal is as it was.
tmux_keys q
# (The marker is computed, so that the typed line itself does not match.)
tmux_type "stty -g > $WORK/stty.after; echo quit-\$((1 + 1))-done"
wait_for 20 screen_has "quit-2-done" || fail "q did not quit: $(tmux_screen)"
screen_has "dlock status --watch:" && fail "the view's screen was left behind: $(tmux_screen)"
cmp -s "$WORK/stty.before" "$WORK/stty.after" ||
  fail "terminal settings changed after q: $(cat "$WORK/stty.before") -> $(cat "$WORK/stty.after")"

# Ctrl-C too.
tmux_type "$DLOCK status --watch --interval 200ms; echo exit=\$?"
wait_for 30 screen_has "dlock status --watch:" || fail "the view did not start again: $(tmux_screen)"
tmux_keys C-c
wait_for 20 screen_has "exit=0" || fail "Ctrl-C did not end it with 0: $(tmux_screen)"
tmux_type "stty -g > $WORK/stty.after2"
wait_for 20 test -s "$WORK/stty.after2" || fail "no stty after Ctrl-C"
cmp -s "$WORK/stty.before" "$WORK/stty.after2" || fail "terminal settings changed after Ctrl-C"

kill "$h1" "$x1" "$x2" "$w1" 2>/dev/null
wait 2>/dev/null
finish
