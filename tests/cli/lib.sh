# Helpers for the CLI tests. Each test script sources this with $1 = the
# dlock binary; it gets a private state directory that is removed on exit.
set -u
DLOCK=${1:?usage: test.sh path/to/dlock}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dlock-cli-test.XXXXXX")
export XDG_STATE_HOME="$WORK/state"
unset DLOCK_BACKEND DLOCK_KEY DLOCK_TOKEN
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/python3.sh"  # PYTHON3
failures=0
cleanup() {
  # Leave nothing running behind.
  jobs -p | xargs -r kill -9 2>/dev/null
  [ "$failures" = 0 ] || show_work_logs
  rm -rf "$WORK"
}

# The end of each log the failed test's commands left in $WORK (a server
# script's, a chaos run's), before $WORK goes: CI keeps only what is printed.
show_work_logs() {
  local log
  while IFS= read -r log; do
    echo "--- the end of ${log#"$WORK"/}:" >&2
    tail -20 "$log" >&2
  done < <(find "$WORK" -maxdepth 3 -name '*.log' -type f 2>/dev/null | sort | head -20)
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# expect_exit CODE 'substring of stderr' -- command...
expect_exit() {
  local want=$1 msg=$2
  shift 3
  local err="$WORK/stderr"
  "$@" >"$WORK/stdout" 2>"$err"
  local got=$?
  if [ "$got" != "$want" ]; then
    fail "'$*' exited $got, want $want; stderr: $(cat "$err")"
  elif [ -n "$msg" ] && ! grep -qF -- "$msg" "$err"; then
    fail "'$*' stderr lacks '$msg': $(cat "$err")"
  elif [ -n "$msg" ] && [ "$(wc -l <"$err")" != 1 ]; then
    fail "'$*' printed more than one line on stderr: $(cat "$err")"
  else
    echo "ok: exit $got: $*"
  fi
}

# With a server fixture ($DLOCK_TEST_URI_FILE, written by tests/servers/),
# run against that store instead of the default SQLite file.
use_fixture_store() {
  if [ -n "${DLOCK_TEST_URI_FILE:-}" ]; then
    export DLOCK_BACKEND=$(cat "$DLOCK_TEST_URI_FILE")
    echo "store: ${DLOCK_BACKEND%%://*}"
  fi
}

finish() {
  if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed" >&2
    exit 1
  fi
  echo "all checks passed"
}

# wait_for SECONDS command...: until the command succeeds; 1 if it never
# does within SECONDS (a bound for a loaded machine, not a measurement).
wait_for() {
  local seconds=$1 end
  shift
  end=$((SECONDS + seconds))
  until "$@"; do
    [ "$SECONDS" -ge "$end" ] && return 1
    sleep 0.05
  done
}

# slowest_ms N command...: runs the command N times and prints the slowest
# run in milliseconds: what one run costs on this machine now, for bounds
# that follow a loaded machine or a sanitizer build. 1 if a run fails.
slowest_ms() {
  local n=$1 i start took slowest=0
  shift
  for ((i = 0; i < n; i++)); do
    start=$(date +%s%3N)
    "$@" >/dev/null 2>&1 || return 1
    took=$(($(date +%s%3N) - start))
    [ "$took" -gt "$slowest" ] && slowest=$took
  done
  echo "$slowest"
}

# renewable_ttl_ms MIN [MAX]: a lease TTL, in ms, whose renewals get through
# on this machine now: ten times the slowest of three whole `dlock exec`
# runs, at least MIN and at most MAX. Says what it measured on stderr.
renewable_ttl_ms() {
  local min=$1 max=${2:-} probe ttl
  probe=$(slowest_ms 3 "$DLOCK" exec probe -- true) || return 1
  ttl=$((probe * 10 > min ? probe * 10 : min))
  [ -z "$max" ] || ttl=$((ttl < max ? ttl : max))
  echo "ttl ${ttl}ms (slowest exec ${probe}ms)" >&2
  echo "$ttl"
}

# repeats N: how many times a test repeats a run. N for a plain build; for a
# sanitized dlock (AddressSanitizer or ThreadSanitizer, seen in the libraries
# it loads) a tenth, at least 4. Repeats are for races and interleavings, which
# the plain build looks for at full count; a sanitizer finds a memory or
# threading fault on a path the first times through it, and each sanitized
# run costs ten times a plain one (0.2 s of start-up alone).
repeats() {
  if ldd "$DLOCK" 2>/dev/null | grep -qE 'lib[at]san\.so'; then
    echo $(($1 / 10 > 4 ? $1 / 10 : 4))
  else
    echo "$1"
  fi
}

# The state letter of process PID (R, S, T, Z...), or nothing if it is gone.
proc_state() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1; }
proc_parent() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f2; }
is_stopped() { [ "$(proc_state "$1")" = T ]; }
is_running() { local s; s=$(proc_state "$1"); [ -n "$s" ] && [ "$s" != T ] && [ "$s" != Z ]; }
is_gone() { local s; s=$(proc_state "$1"); [ -z "$s" ] || [ "$s" = Z ]; }

# A terminal for tests that need one: an interactive bash in a private tmux
# server, with this test's environment.
tmux_start() {
  TMUX_SOCKET="$WORK/tmux.sock"
  tmux -S "$TMUX_SOCKET" new-session -d -s t -x 200 -y 50 \
    "env -i PATH='$PATH' HOME='$WORK' XDG_STATE_HOME='$XDG_STATE_HOME' TERM=xterm PS1='$ ' bash --norc --noprofile -i"
  trap 'tmux -S "$TMUX_SOCKET" kill-server 2>/dev/null; cleanup' EXIT
}
# tmux_type 'text': types it and Enter; tmux_keys KEY...: raw keys (C-z).
tmux_type() { tmux -S "$TMUX_SOCKET" send-keys -t t -l "$1" && tmux -S "$TMUX_SOCKET" send-keys -t t Enter; }
tmux_keys() { tmux -S "$TMUX_SOCKET" send-keys -t t "$@"; }
tmux_screen() { tmux -S "$TMUX_SOCKET" capture-pane -p -t t; }
