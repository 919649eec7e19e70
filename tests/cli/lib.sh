# Helpers for the CLI tests. Each test script sources this with $1 = the
# dlock binary; it gets a private state directory that is removed on exit.
set -u
DLOCK=${1:?usage: test.sh path/to/dlock}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dlock-cli-test.XXXXXX")
export XDG_STATE_HOME="$WORK/state"
unset DLOCK_BACKEND DLOCK_KEY DLOCK_TOKEN
failures=0
cleanup() {
  # Leave nothing running behind.
  jobs -p | xargs -r kill -9 2>/dev/null
  rm -rf "$WORK"
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
