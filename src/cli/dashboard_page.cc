#include "cli/dashboard_page.h"

namespace dlock::cli {

namespace {

// Polls rather than streams: one look at the store per second is what a
// person watching needs, and a poll survives proxies and restarts unaided.
constexpr std::string_view kPage = R"html(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>dlock</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; margin: 0 0 .3em; } h2 { font-size: 1.05em; margin: 1.4em 0 .4em; }
#meta { color: #666; } #error { color: #b00; font-weight: bold; }
table { border-collapse: collapse; } td, th { padding: .25em .8em; text-align: left; }
th { border-bottom: 1px solid #999; } tr:nth-child(even) td { background: #f4f4f4; }
.stopped { color: #b00; font-weight: bold; } .cycle { color: #b00; font-weight: bold; }
svg text { font: 12px system-ui, sans-serif; }
</style></head><body>
<h1>dlock: <span id="store"></span></h1>
<div id="meta">prefix <input id="prefix" placeholder="(all keys)" size="24">
 · updated <span id="updated">never</span></div>
<div id="error"></div>
<h2>Holders (<span id="nholders">0</span>)</h2>
<table id="holders"><thead><tr><th>key</th><th>holder</th><th>token</th><th>mode</th>
<th>held for</th><th>time left</th><th>renewals</th></tr></thead><tbody></tbody></table>
<h2>Waiters (<span id="nwaiters">0</span>)</h2>
<table id="waiters"><thead><tr><th>key</th><th>waiter</th><th>waited</th><th>verdict</th>
<th>behind</th></tr></thead><tbody></tbody></table>
<h2>Who waits for whom <span id="cycles"></span></h2>
<svg id="graph" width="640" height="360"></svg>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const ms = (v) => v === undefined ? "-" : v < 1000 ? v + " ms" : (v / 1000).toFixed(1) + " s";
const party = (session, label) => (label ? label + " " : "") + "(" + session.slice(0, 8) + ")";
function cell(tr, text, cls) {
  const td = tr.insertCell(); td.textContent = text; if (cls) td.className = cls; return td;
}
function fillHolders(holders) {
  const body = $("holders").tBodies[0]; body.replaceChildren();
  for (const h of holders) {
    const tr = body.insertRow(); tr.dataset.key = h.key;
    cell(tr, h.key); cell(tr, party(h.session, h.label)); cell(tr, h.token); cell(tr, h.mode);
    cell(tr, ms(h.held_for_ms)); cell(tr, ms(h.ttl_remaining_ms));
    cell(tr, h.renewals_arriving ? "arriving" : "STOPPED", h.renewals_arriving ? "" : "stopped");
  }
  $("nholders").textContent = holders.length;
}
function fillWaiters(waiters) {
  const body = $("waiters").tBodies[0]; body.replaceChildren();
  for (const w of waiters) {
    const tr = body.insertRow(); tr.dataset.key = w.key; tr.dataset.verdict = w.verdict;
    cell(tr, w.key); cell(tr, party(w.session, w.label)); cell(tr, ms(w.waited_for_ms));
    cell(tr, w.verdict, w.verdict === "cycle" ? "cycle" : "");
    cell(tr, w.blocked_by.map((h) => party(h.session, h.label)).join(", "));
  }
  $("nwaiters").textContent = waiters.length;
}
function svg(name, attrs, parent) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", name);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  parent.appendChild(e); return e;
}
function drawGraph(waits) {
  const g = $("graph"); g.replaceChildren();
  const inCycle = new Set(), edges = [];
  for (const w of waits.waiters) {
    for (const h of w.blocked_by) {
      edges.push({ from: w.session, to: h.session, cycle: w.verdict === "cycle", key: w.key });
    }
  }
  for (const c of waits.cycles) for (const m of c.members) inCycle.add(m);
  const parties = waits.parties.filter((p) => p.waits.length || edges.some((e) => e.to === p.session));
  const at = {}, n = parties.length, cx = 320, cy = 180, r = n > 1 ? 130 : 0;
  parties.forEach((p, i) => {
    const a = 2 * Math.PI * i / Math.max(n, 1) - Math.PI / 2;
    at[p.session] = { x: cx + r * Math.cos(a), y: cy + r * Math.sin(a), label: party(p.session, p.label) };
  });
  const defs = svg("defs", {}, g);
  for (const [id, color] of [["arrow", "#555"], ["arrow-cycle", "#b00"]]) {
    const m = svg("marker", { id, viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7,
                              markerHeight: 7, orient: "auto-start-reverse" }, defs);
    svg("path", { d: "M0,0 L10,5 L0,10 z", fill: color }, m);
  }
  for (const e of edges) {
    const a = at[e.from], b = at[e.to]; if (!a || !b) continue;
    const dx = b.x - a.x, dy = b.y - a.y, len = Math.hypot(dx, dy) || 1, k = 34 / len;
    // Each direction a little to its side, so that a -> b and b -> a are two arrows.
    const ox = -dy / len * 6, oy = dx / len * 6;
    svg("line", { x1: a.x + dx * k + ox, y1: a.y + dy * k + oy,
                  x2: b.x - dx * k + ox, y2: b.y - dy * k + oy,
                  stroke: e.cycle ? "#b00" : "#555", "stroke-width": e.cycle ? 2.5 : 1.5,
                  "marker-end": e.cycle ? "url(#arrow-cycle)" : "url(#arrow)",
                  class: e.cycle ? "edge cycle-edge" : "edge" }, g);
  }
  for (const p of parties) {
    const c = at[p.session], cyc = inCycle.has(p.session);
    svg("circle", { cx: c.x, cy: c.y, r: 30, fill: cyc ? "#fdd" : "#eef", stroke: cyc ? "#b00" : "#557",
                    class: cyc ? "node cycle-node" : "node" }, g);
    svg("text", { x: c.x, y: c.y + 46, "text-anchor": "middle" }, g).textContent = c.label;
  }
  $("cycles").textContent = waits.cycles.length
    ? "— DEADLOCK: " + waits.cycles.length + " cycle(s)" : "";
  $("cycles").className = waits.cycles.length ? "cycle" : "";
}
async function refresh() {
  const prefix = $("prefix").value;
  try {
    const r = await fetch("api/state?prefix=" + encodeURIComponent(prefix));
    const s = await r.json();
    $("store").textContent = s.store || "";
    $("error").textContent = s.error ? "cannot read the store: " + s.error : "";
    if (!s.error) {
      fillHolders(s.holders);
      const waits = s.waits || { parties: [], cycles: [], waiters: [] };
      fillWaiters(waits.waiters); drawGraph(waits);
    }
    $("updated").textContent = new Date(s.at_ms).toLocaleTimeString();
  } catch (e) {
    $("error").textContent = "dlock serve does not answer: " + e;
  }
}
$("prefix").value = new URLSearchParams(location.search).get("prefix") || "";
$("prefix").addEventListener("change", () => {
  history.replaceState(null, "", "?prefix=" + encodeURIComponent($("prefix").value)); refresh();
});
refresh(); setInterval(refresh, 1000);
</script></body></html>
)html";

}  // namespace

std::string_view DashboardPage() { return kPage; }

}  // namespace dlock::cli
