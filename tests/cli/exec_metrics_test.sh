#!/usr/bin/env bash
# dlock exec --metrics-file: the run's figures for node_exporter's textfile
# collector — what a successful, a failed and a refused run write, and bad
# paths refused before anything is locked or run.
source "$(dirname "$0")/lib.sh"
M="$WORK/textfile"
mkdir -p "$M"

# value FILE 'metric{labels}': the sample's value, or nothing.
value() { awk -v m="$2" '$1 == m { print $2 }' "$1"; }

# A run that holds the key a measured while: token, held time and outcome.
token=$("$DLOCK" exec nightly --metrics-file "$M/nightly.prom" -- \
  sh -c 'sleep 0.3; echo "$DLOCK_TOKEN"') || fail "exec failed"
f="$M/nightly.prom"
[ -f "$f" ] || fail "no metrics file written"
[ "$(value "$f" 'dlock_exec_outcome{key="nightly",outcome="ok"}')" = 1 ] ||
  fail "outcome ok missing: $(cat "$f")"
[ "$(value "$f" 'dlock_exec_token{key="nightly"}')" = "$token" ] ||
  fail "token is not the command's DLOCK_TOKEN $token: $(cat "$f")"
[ "$(value "$f" 'dlock_exec_exit_code{key="nightly"}')" = 0 ] || fail "exit code: $(cat "$f")"
held=$(value "$f" 'dlock_exec_held_seconds{key="nightly"}')
awk -v h="$held" 'BEGIN { exit !(h >= 0.3) }' || fail "held $held s, the command slept 0.3 s"
end=$(value "$f" 'dlock_exec_end_timestamp_seconds{key="nightly"}')
awk -v e="$end" -v now="$(date +%s)" 'BEGIN { exit !(e > now - 60 && e <= now + 1) }' ||
  fail "end timestamp $end is not now ($(date +%s))"
grep -q '^# TYPE dlock_exec_waited_seconds gauge$' "$f" || fail "no TYPE line: $(cat "$f")"
[ -z "$(find "$M" -name '.*')" ] || fail "a temporary file was left: $(ls -a "$M")"

# The command's failure is the outcome, and the exit status its own.
expect_exit 3 "" -- "$DLOCK" exec nightly --metrics-file "$f" -- sh -c 'exit 3'
[ "$(value "$f" 'dlock_exec_outcome{key="nightly",outcome="command_failed"}')" = 1 ] ||
  fail "a failed command: $(cat "$f")"
[ "$(value "$f" 'dlock_exec_exit_code{key="nightly"}')" = 3 ] || fail "exit 3: $(cat "$f")"

# Refused (held elsewhere): timed_out, nothing held, no token.
"$DLOCK" exec nightly --ttl 30s -- sleep 30 &
holder=$!
wait_for 20 sh -c "'$DLOCK' status nightly --json | grep -q '\"key\": \"nightly\"'" ||
  fail "the holder never held the key"
expect_exit 75 "" -- "$DLOCK" exec nightly --no-wait --metrics-file "$f" -- true
[ "$(value "$f" 'dlock_exec_outcome{key="nightly",outcome="timed_out"}')" = 1 ] ||
  fail "a refused run: $(cat "$f")"
[ "$(value "$f" 'dlock_exec_held_seconds{key="nightly"}')" = 0 ] || fail "held: $(cat "$f")"
grep -q dlock_exec_token "$f" && fail "a refused run has no token: $(cat "$f")"
kill -TERM "$holder"
wait "$holder"

# Bad paths: refused with one line and exit 64, before the lock or the
# command (the marker stays absent, and the key is free at once).
for bad in "$WORK/missing/run.prom" "$M" ""; do
  expect_exit 64 "--metrics-file" -- \
    "$DLOCK" exec nightly --metrics-file "$bad" -- touch "$WORK/ran"
done
[ -e "$WORK/ran" ] && fail "the command ran despite a bad --metrics-file"
expect_exit 0 "" -- "$DLOCK" exec nightly --no-wait -- true

# Prometheus's own linter reads the file as the collector would
# (scripts/install-deps.sh installs it).
promtool check metrics <"$f" >"$WORK/lint" 2>&1 || fail "promtool: $(cat "$WORK/lint")"
finish
