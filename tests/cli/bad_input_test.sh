#!/usr/bin/env bash
# Every bad input: one clear line on stderr, the documented exit code, and no
# lock left held.
source "$(dirname "$0")/lib.sh"

long_key=$(head -c 1025 /dev/zero | tr '\0' k)
expect_exit 64 "key is empty" -- "$DLOCK" exec "" -- true
expect_exit 64 "key is 1025 bytes: a key is at most 1024 bytes" -- "$DLOCK" exec "$long_key" -- true
expect_exit 64 "ttl 0ms is out of range: a ttl is 10ms to 24h" -- "$DLOCK" exec k --ttl 0s -- true
expect_exit 64 "ttl 25h is out of range" -- "$DLOCK" exec k --ttl 25h -- true
expect_exit 64 "invalid duration '-1s'" -- "$DLOCK" exec k --ttl=-1s -- true
expect_exit 64 "invalid duration '-5s' (negative)" -- "$DLOCK" exec k --wait=-5s -- true
expect_exit 64 "invalid duration '10x'" -- "$DLOCK" exec k --wait 10x -- true
expect_exit 64 "invalid duration '30'" -- "$DLOCK" exec k --ttl 30 -- true
expect_exit 64 "" -- "$DLOCK" exec k --wait 1s --no-wait -- true
expect_exit 64 "command" -- "$DLOCK" exec k
expect_exit 64 "" -- "$DLOCK" frobnicate
expect_exit 64 "" -- "$DLOCK" exec k --bogus -- true

# URIs: malformed, unknown scheme (the message lists the supported ones),
# and a password never printed.
expect_exit 64 "supported: sqlite:///path/locks.db" -- "$DLOCK" exec k --backend nonsense -- true
expect_exit 64 "unknown store 'mongo'" -- "$DLOCK" exec k --backend mongo://u:hunter2@h/db -- true
grep -q hunter2 "$WORK/stderr" && fail "password printed: $(cat "$WORK/stderr")"
expect_exit 64 "expected sqlite:///absolute/path" -- "$DLOCK" exec k --backend sqlite://relative.db -- true
expect_exit 64 "unknown parameter 'sync'" -- "$DLOCK" status --backend "sqlite:///$WORK/x.db?sync=off"
DLOCK_BACKEND=bogus://x expect_exit 64 "DLOCK_BACKEND" -- "$DLOCK" status

# Stores that cannot be opened.
expect_exit 69 "does not exist" -- "$DLOCK" exec k --backend "sqlite://$WORK/missing/dir/locks.db" -- true
touch "$WORK/file"
expect_exit 69 "" -- "$DLOCK" exec k --backend "sqlite://$WORK/file/locks.db" -- true
head -c 4096 /dev/urandom >"$WORK/garbage.db"
expect_exit 69 "is not a SQLite database" -- "$DLOCK" exec k --backend "sqlite://$WORK/garbage.db" -- true
if [ "$(id -u)" != 0 ]; then
  mkdir "$WORK/ro" && chmod 0500 "$WORK/ro"
  expect_exit 69 "not writable" -- "$DLOCK" exec k --backend "sqlite://$WORK/ro/locks.db" -- true
fi

# Nothing was left held by any of the above.
out=$("$DLOCK" status --json)
[ "$out" = "[]" ] || fail "a lock was left held: $out"
finish
