#!/usr/bin/env bash
# Every command against a secured store (scripts/servers/<store>.sh
# start-secure: TLS where the store has it, passwords, roles or ACLs), with
# the URI the fixture wrote — TLS files and a password file named in it, no
# password inside: exec (and a nested dlock in its command), status,
# leader, once, bench and chaos; and a wrong password is exit 77 in one line
# that does not hold it.
source "$(dirname "$0")/lib.sh"
URI=$(cat "${DLOCK_TEST_URI_FILE:?run through ctest: needs a <store>_secure fixture}")
export DLOCK_BACKEND=$URI
echo "store: ${URI%%://*}"

# exec, and a nested dlock reaching the same store through $DLOCK_BACKEND.
out=$("$DLOCK" exec secure/a --ttl 5s -- sh -c 'echo "token=$DLOCK_TOKEN"; "$0" status secure/' "$DLOCK" 2>&1)
rc=$?
[ "$rc" = 0 ] || fail "exec exited $rc: $out"
echo "$out" | grep -q '^token=[1-9]' || fail "exec: no token in: $out"
echo "$out" | grep -q 'secure/a' || fail "the nested status did not show the held key: $out"
echo "ok: exec and a nested status"

expect_exit 0 "" -- "$DLOCK" status
expect_exit 75 "no leader" -- "$DLOCK" leader secure/election
expect_exit 0 "" -- "$DLOCK" once secure/once-a --ttl 5s -- true
expect_exit 0 "" -- "$DLOCK" bench --iterations 50 --duration 1s --contenders 2 --clients 2 --leases 50

# Long enough for a few dozen operations at what one costs here now (a
# loaded cluster with TLS can take seconds to answer a first connect), and
# at most 90 s, which the test's time limit (300 s) holds with the rest:
# the faults come at a rate of their own, so a shorter run has as many
# operations around each.
cost=$(slowest_ms 3 "$DLOCK" exec secure/chaos-probe --ttl 5s -- true) || cost=1000
duration=$((cost * 20 > 5000 ? cost * 20 : 5000))
duration=$((duration > 90000 ? 90000 : duration))
out=$("$DLOCK" chaos --faults pause --duration "${duration}ms" --ttl 1s --seed 5 --json \
  --dir "$WORK" 2>&1)
rc=$?
[ "$rc" = 0 ] || fail "chaos exited $rc: $out"
"$PYTHON3" -c '
import json, sys
r = json.loads(sys.argv[1])
assert r["backend"].startswith(sys.argv[2]), r["backend"]
assert r["violations"] == 0 and r["operations"] >= 2 * r["faults_injected"] + 5, r
' "$out" "${URI%%://*}" || fail "chaos: $out"
echo "ok: chaos against the secured store"

# The user's real password file, swapped for one with a wrong password.
password_file=$(echo "$URI" | sed -n 's/.*password_file=\([^&]*\).*/\1/p')
[ -n "$password_file" ] || fail "the fixture's URI names no password_file: $URI"
echo "Wr0ng-pa55word" >"$WORK/wrong.password"
wrong=${URI/password_file=$password_file/password_file=$WORK/wrong.password}
DLOCK_BACKEND=$wrong expect_exit 77 "" -- "$DLOCK" exec secure/b --no-wait -- true
grep -q "Wr0ng" "$WORK/stderr" && fail "the wrong password was printed: $(cat "$WORK/stderr")"
[ "$(wc -l <"$WORK/stderr")" = 1 ] || fail "more than one line: $(cat "$WORK/stderr")"
finish
