#!/usr/bin/env bash
# dlock break: an operator evicts a holder, safely by construction — asked
# first (a yes at a terminal, or --force), the holder's command terminated
# (79), a token above the holder's that a fence then holds against it, and
# only the owners named broken.
source "$(dirname "$0")/lib.sh"
use_fixture_store
export XDG_RUNTIME_DIR="$WORK/run"
mkdir -m 700 "$XDG_RUNTIME_DIR"

field() { sed -n "s/.*\"$1\": \"\{0,1\}\([^\",]*\)\"\{0,1\},\{0,1\}$/\1/p" | head -1; }
is_held() { "$DLOCK" status "$1" --json 2>/dev/null | grep -q "\"key\": \"$1\""; }
# at_terminal ANSWER command...: the command with a terminal for input, as an
# operator would run it, typing ANSWER at its prompt.
at_terminal() {
  local answer=$1
  shift
  printf '%s\n' "$answer" | script -qec "$(printf '%q ' "$@")" /dev/null
}

# A holder whose command runs long, on a short TTL so that it learns of a
# break within a second or so, yet long enough for its renewals to get
# through on this machine now: at least 3 s.
ttl_ms=$(renewable_ttl_ms 3000) || fail "exec probe failed"
"$DLOCK" exec job --ttl "${ttl_ms}ms" -- sleep 120 >"$WORK/job.out" 2>"$WORK/job.err" &
job=$!
wait_for 20 is_held job || fail "the job never held its key"
token=$("$DLOCK" status job --json | field token)
job_owner=$("$DLOCK" status job --json | field owner)

# Asked first: no terminal and no --force is refused; "no" at a terminal
# breaks nothing (1); either way the holder keeps the key.
expect_exit 64 "needs --force" -- "$DLOCK" break job </dev/null
at_terminal n "$DLOCK" break job >"$WORK/no.out" 2>&1
code=$?
[ "$code" = 1 ] || fail "answering no exited $code, want 1: $(cat "$WORK/no.out")"
grep -q "Break 1 holding of 'job'?" "$WORK/no.out" || fail "no prompt: $(cat "$WORK/no.out")"
is_held job && kill -0 "$job" || fail "the job lost its key without a yes"

# A yes breaks it: the job's command is terminated and dlock exits 79; the
# break's token is above the job's, and a fence that saw it refuses the job.
at_terminal y "$DLOCK" break job --json >"$WORK/yes.out" 2>&1
code=$?
[ "$code" = 0 ] || fail "answering yes exited $code: $(cat "$WORK/yes.out")"
grep -q "\"owner\"" "$WORK/yes.out" || fail "the break did not say whom it evicted: $(cat "$WORK/yes.out")"
broke=$(tr -d '\r' <"$WORK/yes.out" | sed -n 's/^  "token": \([0-9]*\)$/\1/p')
wait "$job"
code=$?
[ "$code" = 79 ] || fail "the broken job exited $code, want 79: $(cat "$WORK/job.err")"
if [[ "${DLOCK_BACKEND:-}" != redlock* ]]; then
  [ -n "$broke" ] && [ "$broke" -gt "$token" ] || fail "break token '$broke' is not above $token"
  mkdir "$WORK/fenced"
  echo new | "$DLOCK" fence write --dir "$WORK/fenced" out --token "$broke" --key job ||
    fail "the break's token was refused"
  expect_exit 65 "stale" -- sh -c "echo old | '$DLOCK' fence write --dir '$WORK/fenced' out --token $token --key job"
fi
expect_exit 0 "nothing to break" -- "$DLOCK" break job --force

# The store keeps a record of the eviction for another process to read:
# when, by whom, the evicted owner and its token, and the break's token.
if [[ "${DLOCK_BACKEND:-}" != redlock* ]]; then
  grep -q '"recorded": true' "$WORK/yes.out" || fail "the break was not recorded: $(cat "$WORK/yes.out")"
  "$DLOCK" status --breaks job --json >"$WORK/breaks.json" || fail "status --breaks failed"
  grep -q "\"owner\": \"$job_owner\"" "$WORK/breaks.json" &&
    grep -Eq "\"token\": $token,?\$" "$WORK/breaks.json" &&
    grep -Eq "\"break_token\": $broke,?\$" "$WORK/breaks.json" &&
    grep -q '"by": "dlock break by ' "$WORK/breaks.json" ||
    fail "the record does not say whom the break evicted: $(cat "$WORK/breaks.json")"
  "$DLOCK" status --breaks >"$WORK/breaks.txt" || fail "status --breaks (text) failed"
  grep -q "'job' broken by dlock break by .*: evicted owner $job_owner (token $token[,)]" "$WORK/breaks.txt" ||
    fail "the text lacks the record: $(cat "$WORK/breaks.txt")"
  expect_exit 0 "" -- "$DLOCK" status --breaks never-broken
  grep -q "^no breaks recorded under 'never-broken'" "$WORK/stdout" || fail "$(cat "$WORK/stdout")"
fi

# A detached holder: broken with --force; its handle then reports the loss.
h=$("$DLOCK" acquire detached --ttl "${ttl_ms}ms") || fail "acquire failed"
expect_exit 0 "" -- "$DLOCK" break detached --force
grep -q "^broke 'detached': owner " "$WORK/stdout" || fail "no report: $(cat "$WORK/stdout")"
expect_exit 79 "" -- "$DLOCK" release "$h"

# Shared holders: --owner breaks that reader alone.
"$DLOCK" exec shared --shared --ttl "${ttl_ms}ms" -- sleep 120 2>/dev/null &
first=$!
"$DLOCK" exec shared --shared --ttl "${ttl_ms}ms" -- sleep 120 2>/dev/null &
second=$!
wait_for 20 sh -c "[ \$('$DLOCK' status shared --json | grep -c '\"owner\"') = 2 ]" ||
  fail "the two readers never held 'shared' together"
owner=$("$DLOCK" status shared --json | field owner)
expect_exit 0 "" -- "$DLOCK" break shared --owner "$owner" --force
wait_for 20 sh -c "[ \$('$DLOCK' status shared --json | grep -c '\"owner\"') = 1 ]" ||
  fail "breaking one reader did not leave exactly the other"
"$DLOCK" status shared --json | grep -q "$owner" && fail "the broken reader still holds"
kill -TERM "$first" "$second" 2>/dev/null
wait "$first" "$second" 2>/dev/null

# Bad input: one line, exit 64, nothing broken.
expect_exit 64 "not an owner id" -- "$DLOCK" break job --owner nothex --force
expect_exit 64 "" -- "$DLOCK" break "" --force
expect_exit 64 "" -- "$DLOCK" break
expect_exit 64 "--keep 0s: at least 1s" -- "$DLOCK" break job --force --keep 0s
expect_exit 64 "" -- "$DLOCK" status --breaks --waits
finish
