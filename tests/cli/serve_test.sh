#!/usr/bin/env bash
# dlock serve: /metrics scraped by a real Prometheus (Debian's) during a
# contended run, the values read back through PromQL; a deadlock cycle seen
# as one; loopback by default, a bearer token when asked for; bad flags
# refused.
source "$(dirname "$0")/lib.sh"
M="$WORK/marks"
mkdir -p "$M"

expect_exit 64 "want HOST:PORT" -- "$DLOCK" serve --listen nonsense
expect_exit 64 "the port must be a number from 0 to 65535" -- "$DLOCK" serve --listen 127.0.0.1:99999
expect_exit 64 "not a loopback address" -- "$DLOCK" serve --listen 0.0.0.0:0
expect_exit 64 "must be an IP address" -- "$DLOCK" serve --listen example.com:80
expect_exit 64 "--token-file $WORK/none" -- "$DLOCK" serve --listen 127.0.0.1:0 --token-file "$WORK/none"
: >"$WORK/empty"
expect_exit 64 "is empty" -- "$DLOCK" serve --listen 127.0.0.1:0 --token-file "$WORK/empty"

# get URL [TOKEN]: prints "STATUS BODY".
get() {
  "$PYTHON3" - "$@" <<'PY'
import sys, urllib.request, urllib.error
req = urllib.request.Request(sys.argv[1])
if len(sys.argv) > 2:
    req.add_header("Authorization", "Bearer " + sys.argv[2])
try:
    with urllib.request.urlopen(req, timeout=10) as r:
        print(r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
PY
}
serve() { exec "$DLOCK" serve --listen 127.0.0.1:0 "$@"; }
# serve_url FILE: the metrics URL a server printed into FILE.
serve_url() { grep -o 'http://[^ ]*/metrics' "$1"; }

serve >"$WORK/serve.out" 2>&1 & s1=$!
wait_for 30 grep -q http "$WORK/serve.out" || fail "serve printed no address: $(cat "$WORK/serve.out")"
url=$(serve_url "$WORK/serve.out")
get "$url" >"$WORK/page"
grep -q '^200 ' "$WORK/page" || fail "GET /metrics: $(head -3 "$WORK/page")"
grep -q '^dlock_store_up 1$' "$WORK/page" || fail "store not up: $(cat "$WORK/page")"
grep -q '^dlock_store_keys_held 0$' "$WORK/page" || fail "keys held: $(cat "$WORK/page")"
grep -q '^process_resident_memory_bytes ' "$WORK/page" || fail "no process figures"
sed '1s/^200 //' "$WORK/page" | promtool check metrics >"$WORK/lint" 2>&1 ||
  fail "promtool: $(cat "$WORK/lint")"

# A token: refused without it, served with it.
printf 'sesame-%s\n' "$RANDOM$RANDOM" >"$WORK/token"
chmod 600 "$WORK/token"
serve --token-file "$WORK/token" >"$WORK/serve2.out" 2>&1 & s2=$!
wait_for 30 grep -q http "$WORK/serve2.out" || fail "serve with a token printed no address"
url2=$(serve_url "$WORK/serve2.out")
get "$url2" >"$WORK/r1"
grep -q '^401 ' "$WORK/r1" || fail "no token was not refused: $(head -1 "$WORK/r1")"
get "$url2" wrong >"$WORK/r2"
grep -q '^401 ' "$WORK/r2" || fail "a wrong token was not refused: $(head -1 "$WORK/r2")"
get "$url2" "$(head -1 "$WORK/token")" >"$WORK/r3"
grep -q '^200 ' "$WORK/r3" || fail "the right token was refused: $(head -1 "$WORK/r3")"
grep -q sesame "$WORK/serve2.out" && fail "the token reached serve's output"
kill -TERM "$s2"
wait "$s2" || fail "serve exited $? on SIGTERM, want 0"

# A real Prometheus scrapes it every second.
free_port() { "$PYTHON3" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pport=$(free_port)
target=${url#http://}
target=${target%/metrics}
cat >"$WORK/prometheus.yml" <<YML
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: dlock
    static_configs: [{targets: ['$target']}]
YML
prom() {
  exec prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
    --web.listen-address="127.0.0.1:$pport" --log.level=warn
}
prom >"$WORK/prometheus.log" 2>&1 & p1=$!
# query PROMQL: the first result's value, or nothing.
query() {
  "$PYTHON3" - "http://127.0.0.1:$pport/api/v1/query" "$1" <<'PY'
import json, sys, urllib.parse, urllib.request
try:
    url = sys.argv[1] + "?" + urllib.parse.urlencode({"query": sys.argv[2]})
    r = json.load(urllib.request.urlopen(url, timeout=5))
    print(r["data"]["result"][0]["value"][1])
except Exception:
    pass
PY
}
is() { [ "$(query "$1")" = "$2" ]; }
wait_for 90 is 'up{job="dlock"}' 1 || fail "Prometheus never scraped serve: $(tail -5 "$WORK/prometheus.log")"

# Contended: a holder and a waiter on orders/1.
"$DLOCK" exec orders/1 --ttl 5s -- sh -c "touch $M/held; sleep 60" & h1=$!
wait_for 30 test -e "$M/held" || fail "the holder never started"
"$DLOCK" exec orders/1 --wait 60s -- true & w1=$!
wait_for 60 is dlock_store_keys_held 1 || fail "PromQL keys held: $(query dlock_store_keys_held)"
wait_for 60 is dlock_store_waiters 1 || fail "PromQL waiters: $(query dlock_store_waiters)"
is 'dlock_store_holders_by_prefix{prefix="orders/"}' 1 ||
  fail "PromQL per prefix: $(query 'dlock_store_holders_by_prefix{prefix="orders/"}')"
is 'dlock_store_waiters_by_prefix{prefix="orders/"}' 1 ||
  fail "PromQL waiters per prefix: $(query 'dlock_store_waiters_by_prefix{prefix="orders/"}')"
is dlock_store_deadlock_cycles 0 || fail "a cycle where there is none"

# A deadlock cycle: each party holds one key and, inside, waits for the other's.
cross() {
  exec "$DLOCK" exec "$2" --ttl 3s --wait 60s -- \
    sh -c 'touch "$0.in"; i=0; while [ ! -e "$3.in" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
           exec "$1" exec "$2" --wait 60s -- true' "$M/$1" "$DLOCK" "$3" "$M/$4"
}
cross alpha cycle/a cycle/b beta & x1=$!
cross beta cycle/b cycle/a alpha & x2=$!
wait_for 60 is dlock_store_deadlock_cycles 1 || fail "PromQL cycles: $(query dlock_store_deadlock_cycles)"
is dlock_store_keys_held 3 || fail "PromQL keys held with the cycle: $(query dlock_store_keys_held)"

# The dashboard, loaded in headless Chromium: the holder, the waiter behind
# it, and the cycle, drawn (DOM checked after its scripts ran).
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
[ -n "$CHROMIUM" ] || fail "chromium is not installed (scripts/install-deps.sh installs it)"
chrome=("$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run
        --disable-background-networking --disable-component-update --disable-sync
        --user-data-dir="$WORK/chrome-profile" --virtual-time-budget=5000)
dashboard=${url%/metrics}/
dom=$(timeout 90 "${chrome[@]}" --dump-dom "$dashboard" 2>/dev/null)
echo "$dom" >"$WORK/dom.html"
grep -q '<tr data-key="orders/1">' "$WORK/dom.html" || fail "no holder row: $(head -c 600 "$WORK/dom.html")"
grep -q 'data-key="orders/1" data-verdict="behind-holder"' "$WORK/dom.html" ||
  fail "no waiter behind the holder in the DOM"
[ "$(grep -o 'data-verdict="cycle"' "$WORK/dom.html" | wc -l)" = 2 ] ||
  fail "the cycle's two waiters are not marked"
[ "$(grep -o 'class="node cycle-node"' "$WORK/dom.html" | wc -l)" = 2 ] ||
  fail "the graph does not mark the cycle's two parties"
grep -q 'DEADLOCK: 1 cycle' "$WORK/dom.html" || fail "no deadlock headline"
# Filtered by prefix: only orders/.
timeout 90 "${chrome[@]}" --dump-dom "${dashboard}?prefix=orders/" 2>/dev/null >"$WORK/dom2.html"
grep -q '<tr data-key="orders/1">' "$WORK/dom2.html" || fail "prefix view lost orders/1"
grep -q 'data-key="cycle/' "$WORK/dom2.html" && fail "prefix orders/ still shows cycle/ keys"

kill "$x1" "$x2" "$h1" "$w1" 2>/dev/null
kill -TERM "$s1"
wait "$s1" || fail "serve exited $? on SIGTERM, want 0"
kill "$p1" 2>/dev/null
wait 2>/dev/null
finish
