#!/usr/bin/env bash
# Issue #10, lock-delay end to end: `dlock exec --lock-delay D` killed with
# SIGKILL (no release) keeps its key from everybody until D after the loss;
# a clean exit releases it with no delay. Against a server store when run
# with its fixture ($DLOCK_TEST_URI_FILE), else the SQLite default.
#
# The one duration asserted is a lower bound the store must guarantee: the
# lease cannot end before the kill, so no grant comes before kill + D (the
# backend tests check the same against each store's own clock). Without a
# lock-delay the next holder gets the key after the ttl, well under D.
source "$(dirname "$0")/lib.sh"
use_fixture_store
K="lock-delay-$$-$RANDOM"
now_ms() { date +%s%3N; }

# A clean exit leaves no delay behind.
expect_exit 0 "" -- "$DLOCK" exec --ttl 2s --lock-delay 60s "$K/clean" -- true
expect_exit 0 "" -- "$DLOCK" exec --no-wait "$K/clean" -- true

# A holder killed with SIGKILL: its child dies with it (PDEATHSIG), its
# lease is never released.
"$DLOCK" exec --ttl 1s --lock-delay 3s "$K/killed" -- \
  sh -c 'touch "$0"; exec sleep 60' "$WORK/in" &
holder=$!
for ((i = 0; i < 600; i++)); do [ -e "$WORK/in" ] && break; sleep 0.05; done
[ -e "$WORK/in" ] || fail "the holder never started"
kill -9 "$holder"
killed=$(now_ms)
wait "$holder" 2>/dev/null
expect_exit 0 "" -- "$DLOCK" exec --wait 30s "$K/killed" -- true
waited=$(( $(now_ms) - killed ))
echo "granted ${waited} ms after the kill (ttl 1s, lock-delay 3s)"
[ "$waited" -ge 2950 ] || fail "granted ${waited} ms after the kill, inside the 3 s lock-delay"
# Served: the key is free again, with no delay left.
expect_exit 0 "" -- "$DLOCK" exec --no-wait "$K/killed" -- true

# Bad values: one line, exit 64, nothing held.
expect_exit 64 "--lock-delay" -- "$DLOCK" exec --lock-delay soon "$K/bad" -- true
expect_exit 64 "out of range" -- "$DLOCK" exec --lock-delay 25h "$K/bad" -- true
expect_exit 0 "" -- "$DLOCK" exec --no-wait "$K/bad" -- true
finish
