#!/usr/bin/env bash
# The chaos report renders in a real browser: headless Chromium loads it, the
# timeline and the checker table are in the rendered DOM, and a screenshot is
# saved as a test artifact (build/test-artifacts/chaos-report.png).
source "$(dirname "$0")/lib.sh"
ARTIFACTS=${DLOCK_TEST_ARTIFACTS:-$(dirname "$DLOCK")/test-artifacts}
mkdir -p "$ARTIFACTS"
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
[ -n "$CHROMIUM" ] || { fail "chromium is not installed (scripts/install-deps.sh installs it)"; finish; }

# A report with a violation to draw. An unfenced run shows one only if a
# pause lands on a holder and another worker writes before it wakes, which a
# loaded machine may not give in 3 s: up to 5 runs, until one exits 3 (the
# checkers found a violation).
report="$WORK/report.html"
status=0
for seed in 3 4 5 6 7; do
  status=0
  "$DLOCK" chaos --workload unfenced --faults pause --duration 3s --ttl 200ms --seed $seed \
    --report "$report" --dir "$WORK" >/dev/null || status=$?
  [ "$status" = 3 ] && break
done
[ "$status" = 3 ] || fail "5 unfenced runs found no violation (last exit $status)"
[ -s "$report" ] || fail "no report written"

chrome=("$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run
        --disable-background-networking --disable-component-update --disable-sync
        --user-data-dir="$WORK/chrome-profile")
dom=$(timeout 60 "${chrome[@]}" --dump-dom "file://$report" 2>/dev/null)
echo "$dom" | grep -q '<svg class="timeline" id="timeline"' || fail "rendered DOM has no timeline"
echo "$dom" | grep -q '<table id="checks"' || fail "rendered DOM has no checker table"
echo "$dom" | grep -q 'class="w violation"' || fail "the unfenced run shows no violation in red"
echo "$dom" | grep -q '<td class="FAIL">FAIL</td>' || fail "the checker table shows no failing check"
timeout 60 "${chrome[@]}" --window-size=1200,1400 --screenshot="$ARTIFACTS/chaos-report.png" \
  "file://$report" >/dev/null 2>&1
[ -s "$ARTIFACTS/chaos-report.png" ] || fail "no screenshot"
echo "screenshot: $ARTIFACTS/chaos-report.png"
finish
