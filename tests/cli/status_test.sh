#!/usr/bin/env bash
# dlock status: table and JSON with key, owner, token, ttl_remaining_ms.
source "$(dirname "$0")/lib.sh"

"$DLOCK" exec jobs/a --ttl 20s -- sleep 30 &
a=$!
"$DLOCK" exec other --ttl 20s -- sleep 30 &
b=$!
for _ in $(seq 1200); do [ "$("$DLOCK" status --json | grep -c '"key"')" = 2 ] && break; sleep 0.05; done

json=$("$DLOCK" status jobs/ --json)
"$PYTHON3" - "$json" <<'PY' || fail "status --json: $json"
import json, sys
rows = json.loads(sys.argv[1])
assert len(rows) == 1, rows
r = rows[0]
assert r["key"] == "jobs/a", r
assert len(r["owner"]) == 32 and int(r["owner"], 16) >= 0, r
assert isinstance(r["token"], int) and r["token"] >= 1, r
assert 0 < r["ttl_remaining_ms"] <= 20000, r
PY
table=$("$DLOCK" status)
echo "$table" | head -1 | grep -q "KEY.*OWNER.*TOKEN.*TTL LEFT" || fail "table header: $table"
echo "$table" | grep -q "^jobs/a " || fail "table row: $table"
kill -TERM $a $b
wait $a $b
out=$("$DLOCK" status)
echo "$out" | grep -q "no locks held" || fail "after release: $out"
finish
