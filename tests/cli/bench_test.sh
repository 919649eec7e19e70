#!/usr/bin/env bash
# dlock bench smoke run (seconds): every figure present and sane, and the file
# it writes is what `dlock plan --from-bench` reads.
source "$(dirname "$0")/lib.sh"
backend=()
[ -n "${DLOCK_TEST_URI_FILE:-}" ] && backend=(--backend "$(cat "$DLOCK_TEST_URI_FILE")")

"$DLOCK" bench "${backend[@]}" --iterations 30 --duration 1s --leases 50 --json "$WORK/bench.json" \
  >"$WORK/out" 2>&1 || fail "bench exited $?: $(cat "$WORK/out")"
"$PYTHON3" - "$WORK/bench.json" <<'PY' || fail "bench JSON: $(cat "$WORK/bench.json")"
import json, math, sys
b = json.load(open(sys.argv[1]))
def positive(x, what):
    assert isinstance(x, (int, float)) and x > 0 and math.isfinite(x), (what, x)
positive(b["floor_rtt_us"], "floor_rtt_us")
for k in ("p50_us", "p99_us"):
    positive(b["floor"][k], "floor " + k)
    positive(b["cycle"][k], "cycle " + k)
    positive(b["cycle_unrecorded"][k], "cycle without metrics " + k)
positive(b["cycle_ratio_to_floor"], "cycle ratio")
positive(b["metrics_cost_ratio"], "metrics cost ratio")
if b["handoff"] is not None:
    positive(b["handoff"]["p50_us"], "handoff p50")
    positive(b["handoff_ratio_to_floor"], "handoff ratio")
positive(b["hot_key"]["ops_per_s"], "hot key")
positive(b["hot_key"]["ideal_ops_per_s"], "ideal")
positive(b["many_keys"]["ops_per_s"], "many keys")
positive(b["many_keys"]["ratio_to_floor"], "many keys ratio")
assert b["memory"]["leases"] == 50
assert b["memory"]["bytes_per_lease"] >= 0
PY
grep -q "cycle / two round trips" "$WORK/out" || fail "no ratio printed: $(cat "$WORK/out")"
grep -q "cycle / cycle recording nothing" "$WORK/out" ||
  fail "no metrics cost printed: $(cat "$WORK/out")"
"$DLOCK" plan --rate 10/s --hold 40ms --from-bench "$WORK/bench.json" >"$WORK/plan" ||
  fail "plan --from-bench rejected the bench file: $(cat "$WORK/plan")"
expect_exit 64 "--contenders" -- "$DLOCK" bench --contenders 1
expect_exit 64 "invalid duration" -- "$DLOCK" bench --hold fast
finish
