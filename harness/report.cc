// The report is one HTML file with nothing external: inline CSS and SVG.
//
// Its timeline follows the classic fencing diagram: one lane per worker with
// its lease bars (grant to release), pauses shaded over the paused lane, each
// write marked admitted (green) or rejected (grey) with its token, writes
// that should have been rejected in red, and a "resource" lane with the
// admitted writes in the order the resource saw them. A run has thousands of
// operations, so the report draws a window around each fault (up to eight),
// plus an overview strip of the whole run.
#include "harness/report.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace dlock::harness {
namespace {

constexpr int kMaxWindows = 8;
constexpr double kWidth = 1000;   // px of the time axis
constexpr double kLeft = 110;     // px for lane labels
constexpr double kLane = 34;      // px per lane

std::string Escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

struct LeaseBar {
  int worker;
  std::int64_t from, to;
  FencingToken token;
};

struct WriteMark {
  int worker;
  std::int64_t t;
  FencingToken token;
  bool admitted;
  bool violation;  // admitted although a larger token had already read
};

struct Pause {
  int worker;
  std::int64_t from, to;
  bool partition;  // cut off from the store rather than stopped
};

struct Model {
  std::int64_t start = 0, end = 0;
  int workers = 0;
  std::vector<LeaseBar> leases;
  std::vector<WriteMark> writes;
  std::vector<Pause> pauses;
  std::vector<const Event*> faults;
};

Model Build(const History& h) {
  Model m;
  if (h.events.empty()) return m;
  m.start = h.events.front().t_ns;
  m.end = h.events.back().t_ns;
  std::map<int, std::pair<std::int64_t, FencingToken>> open;  // worker -> grant
  std::map<int, std::int64_t> paused;
  FencingToken highest_read = 0;
  std::map<int, FencingToken> read_token_by_worker;
  for (const Event& e : h.events) {
    m.workers = std::max(m.workers, e.worker + 1);
    if (e.worker < 0) {
      const int target = static_cast<int>(e.value);
      if (e.op == "pause" || e.op == "partition") paused[target] = e.t_ns;
      if ((e.op == "resume" || e.op == "heal") && paused.count(target)) {
        m.pauses.push_back({target, paused[target], e.t_ns, e.op == "heal"});
        paused.erase(target);
      }
      if (e.op == "kill" && open.count(target)) {
        m.leases.push_back({target, open[target].first, e.t_ns, open[target].second});
        open.erase(target);
      }
      if (e.op == "pause" || e.op == "kill" || e.op == "clock-step" || e.op == "partition" ||
          e.op == "delay" || e.op == "drop" || e.op == "store-down") {
        m.faults.push_back(&e);
      }
      continue;
    }
    if (e.op == "acquire" && e.type == EventType::kOk) open[e.worker] = {e.t_ns, e.token};
    if (e.op == "release" && e.type != EventType::kInvoke && open.count(e.worker)) {
      m.leases.push_back({e.worker, open[e.worker].first, e.t_ns, open[e.worker].second});
      open.erase(e.worker);
    }
    if (e.op == "read" && e.type == EventType::kOk) highest_read = std::max(highest_read, e.token);
    if (e.op == "write" && (e.type == EventType::kOk || e.type == EventType::kFail)) {
      const bool admitted = e.type == EventType::kOk;
      m.writes.push_back({e.worker, e.t_ns, e.token, admitted, admitted && e.token < highest_read});
    }
  }
  for (const auto& [w, g] : open) m.leases.push_back({w, g.first, m.end, g.second});
  for (const auto& [w, t] : paused) m.pauses.push_back({w, t, m.end, false});
  return m;
}

class Svg {
 public:
  Svg(std::int64_t from, std::int64_t to, int lanes, std::string id)
      : from_(from), to_(std::max(to, from + 1)), lanes_(lanes) {
    const double height = (lanes + 1) * kLane + 30;
    out_ << "<svg class=timeline id=\"" << id << "\" xmlns=\"http://www.w3.org/2000/svg\" width=\""
         << kLeft + kWidth + 60 << "\" height=\"" << height << "\">";
  }
  double X(std::int64_t t) const {
    const double f = static_cast<double>(std::clamp(t, from_, to_) - from_) /
                     static_cast<double>(to_ - from_);
    return kLeft + f * kWidth;
  }
  double Y(int lane) const { return 10 + lane * kLane; }
  Svg& Raw(const std::string& s) {
    out_ << s;
    return *this;
  }
  bool Visible(std::int64_t a, std::int64_t b) const { return b >= from_ && a <= to_; }
  void Axis() {
    const double y = Y(lanes_) + 8;
    out_ << "<line x1=\"" << kLeft << "\" y1=\"" << y << "\" x2=\"" << kLeft + kWidth
         << "\" y2=\"" << y << "\" class=axis />";
    for (int i = 0; i <= 5; ++i) {
      const std::int64_t t = from_ + (to_ - from_) * i / 5;
      out_ << "<text x=\"" << Num(X(t)) << "\" y=\"" << y + 16 << "\" class=tick>+"
           << (t - origin_) / 1'000'000 << " ms</text>";
    }
  }
  void set_origin(std::int64_t o) { origin_ = o; }
  std::string Done() {
    out_ << "</svg>";
    return out_.str();
  }

 private:
  std::int64_t from_, to_;
  int lanes_;
  std::int64_t origin_ = 0;
  std::ostringstream out_;
};

std::string Window(const Model& m, std::int64_t from, std::int64_t to, const std::string& id,
                   const std::string& caption) {
  const int resource_lane = m.workers;
  Svg svg(from, to, m.workers + 1, id);
  svg.set_origin(m.start);
  std::ostringstream s;
  for (int w = 0; w < m.workers; ++w) {
    s << "<text x=\"4\" y=\"" << svg.Y(w) + 20 << "\" class=lane>worker " << w << "</text>";
  }
  s << "<text x=\"4\" y=\"" << svg.Y(resource_lane) + 20 << "\" class=lane>resource</text>";
  for (const Pause& p : m.pauses) {
    if (!svg.Visible(p.from, p.to)) continue;
    s << "<rect class=" << (p.partition ? "partition" : "pause") << " x=\"" << Num(svg.X(p.from))
      << "\" y=\"" << svg.Y(p.worker) << "\" width=\""
      << Num(std::max(1.0, svg.X(p.to) - svg.X(p.from))) << "\" height=\"" << kLane - 2
      << "\"><title>" << (p.partition ? "partitioned from the store " : "paused (SIGSTOP) ")
      << (p.to - p.from) / 1'000'000 << " ms</title></rect>";
  }
  for (const LeaseBar& l : m.leases) {
    if (!svg.Visible(l.from, l.to)) continue;
    const double x = svg.X(l.from), w = std::max(1.5, svg.X(l.to) - x);
    s << "<rect class=lease x=\"" << Num(x) << "\" y=\"" << svg.Y(l.worker) + 8 << "\" width=\""
      << Num(w) << "\" height=\"14\"><title>lease, token " << l.token << "</title></rect>";
    if (w > 28) {
      s << "<text class=tok x=\"" << Num(x + 3) << "\" y=\"" << svg.Y(l.worker) + 19 << "\">"
        << l.token << "</text>";
    }
  }
  for (const WriteMark& wm : m.writes) {
    if (!svg.Visible(wm.t, wm.t)) continue;
    const std::string cls = wm.violation ? "violation" : wm.admitted ? "admitted" : "rejected";
    const double x = svg.X(wm.t);
    const double y = svg.Y(wm.worker) + 15;
    s << "<circle class=\"w " << cls << "\" cx=\"" << Num(x) << "\" cy=\"" << y
      << "\" r=\"5\"><title>write with token " << wm.token << ": "
      << (wm.violation ? "admitted although stale (violation)"
                       : wm.admitted ? "admitted" : "rejected: stale token")
      << "</title></circle>";
    if (!wm.admitted || wm.violation) {
      s << "<text class=\"wl " << cls << "\" x=\"" << Num(x + 7) << "\" y=\"" << y - 6 << "\">"
        << (wm.admitted ? "! " : "x ") << wm.token << "</text>";
    }
    if (wm.admitted) {
      s << "<circle class=\"w " << cls << "\" cx=\"" << Num(x) << "\" cy=\""
        << svg.Y(resource_lane) + 15 << "\" r=\"4\"><title>resource admitted token "
        << wm.token << "</title></circle>";
    }
  }
  svg.Raw(s.str());
  svg.Axis();
  return "<figure><figcaption>" + Escape(caption) + "</figcaption>" + svg.Done() + "</figure>";
}

std::string Overview(const Model& m) {
  Svg svg(m.start, m.end, 1, "overview");
  svg.set_origin(m.start);
  std::ostringstream s;
  s << "<text x=\"4\" y=\"" << svg.Y(0) + 20 << "\" class=lane>faults</text>";
  for (const Event* f : m.faults) {
    s << "<line class=\"fault " << f->op << "\" x1=\"" << Num(svg.X(f->t_ns)) << "\" x2=\""
      << Num(svg.X(f->t_ns)) << "\" y1=\"" << svg.Y(0) + 4 << "\" y2=\"" << svg.Y(0) + 28
      << "\"><title>" << Escape(f->op) << " worker " << f->value << "</title></line>";
  }
  for (const WriteMark& w : m.writes) {
    if (!w.admitted || w.violation) {
      s << "<circle class=\"w " << (w.violation ? "violation" : "rejected") << "\" cx=\""
        << Num(svg.X(w.t)) << "\" cy=\"" << svg.Y(0) + 16 << "\" r=\"3\" />";
    }
  }
  svg.Raw(s.str());
  svg.Axis();
  return "<figure><figcaption>The whole run: faults (lines) and stale writes (dots)"
         "</figcaption>" + svg.Done() + "</figure>";
}

// The document's head, with the style every part below relies on.
std::string Head(const std::string& title) {
  return "<!doctype html><html lang=en><head><meta charset=utf-8><title>" + Escape(title) +
         "</title><style>"
         "body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222}"
         "h1{font-size:20px}figure{margin:18px 0}figcaption{font-weight:600;margin-bottom:4px}"
         ".lane,.tick,.tok{font:11px monospace;fill:#333}.tok{fill:#0b3d91}"
         ".axis{stroke:#888}.lease{fill:#cfe0ff;stroke:#6f95d8}"
         ".pause{fill:#bbb;fill-opacity:.45}.partition{fill:#f5b041;fill-opacity:.35}"
         ".w.admitted{fill:#2e9d4a}.w.rejected{fill:#777}.w.violation{fill:#d22;stroke:#900;stroke-width:2}"
         ".wl{font:bold 11px monospace}.wl.rejected{fill:#555}.wl.violation{fill:#d22}"
         ".fault{stroke-width:2}.fault.pause{stroke:#888}.fault.kill{stroke:#000}"
         ".fault.clock-step{stroke:#c80}"
         "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;"
         "vertical-align:top;text-align:left}.pass{color:#1a7f37;font-weight:600}"
         ".FAIL{color:#d22;font-weight:700}.unknown{color:#9a6700;font-weight:600}"
         "ul{margin:2px 0;padding-left:18px}"
         "</style></head><body>";
}

// The title, what was run, and how to read the lanes.
std::string Summary(const RunResult& run, const ReportContext& ctx) {
  const History& h = run.history;
  std::ostringstream html;
  html << "<h1>" << Escape(ctx.title) << "</h1><p>store " << Escape(ctx.backend) << " &middot; "
       << (h.fenced ? "fenced" : "unfenced (positive control)") << " &middot; ttl " << h.ttl_ms
       << " ms &middot; seed " << ctx.seed << " &middot; " << run.counts.operations
       << " operations, " << run.counts.faults << " faults, " << run.counts.stale_writes_rejected
       << " stale writes rejected, <b>" << run.violations << " violations</b></p>";
  html << "<p>Lanes: blue bars are leases (token inside), grey shading a pause, green dots "
          "admitted writes, grey x rejected stale writes, red ! writes admitted although a "
          "larger token had already read the resource.</p>";
  return html.str();
}

std::string ChecksTable(const std::vector<CheckResult>& checks) {
  std::ostringstream html;
  html << "<h2>Checks</h2><table id=checks><tr><th>id</th><th>checker</th><th>verdict</th>"
          "<th>detail</th></tr>";
  for (const auto& c : checks) {
    html << "<tr><td>" << c.id << "</td><td>" << Escape(c.name) << "</td><td class="
         << VerdictName(c.verdict) << ">" << VerdictName(c.verdict) << "</td><td>"
         << Escape(c.detail);
    if (!c.violations.empty()) {
      html << "<ul>";
      for (const auto& v : c.violations) html << "<li>" << Escape(v) << "</li>";
      html << "</ul>";
    }
    html << "</td></tr>";
  }
  html << "</table>";
  return html.str();
}

// The overview, then one window around each of the first kMaxWindows faults
// (or the run's first moments when there were none).
std::string Timeline(const Model& m, std::int64_t ttl_ns) {
  std::ostringstream html;
  html << "<h2>Timeline</h2>";
  if (m.workers > 0) html << Overview(m);
  int windows = 0;
  for (const Event* f : m.faults) {
    if (windows >= kMaxWindows) break;
    std::int64_t from = std::max(m.start, f->t_ns - ttl_ns * 3 / 2), to = f->t_ns + ttl_ns * 2;
    if (f->op == "pause" || f->op == "partition" || f->op == "delay") {
      to = f->t_ns + f->duration_ns + ttl_ns * 2;
    }
    std::ostringstream caption;
    caption << f->op << " of worker " << f->value << " at +" << (f->t_ns - m.start) / 1'000'000
            << " ms";
    if (f->duration_ns > 0 && f->op != "clock-step") {
      caption << " for " << f->duration_ns / 1'000'000 << " ms";
    }
    html << Window(m, from, to, windows == 0 ? "timeline" : "timeline-" + std::to_string(windows),
                   caption.str());
    ++windows;
  }
  if (windows == 0 && m.workers > 0) {
    html << Window(m, m.start, std::min(m.end, m.start + ttl_ns * 4), "timeline",
                   "The first moments of the run (no faults were injected)");
  }
  return html.str();
}

}  // namespace

std::string RenderReport(const RunResult& run, const ReportContext& ctx) {
  const Model m = Build(run.history);
  return Head(ctx.title) + Summary(run, ctx) + ChecksTable(run.checks) +
         Timeline(m, run.history.ttl_ms * 1'000'000) + "</body></html>\n";
}

Status WriteReport(const std::string& path, const RunResult& run, const ReportContext& ctx) {
  std::ofstream out(path, std::ios::trunc);
  out << RenderReport(run, ctx);
  out.close();
  if (!out) return UnavailableError("cannot write report " + path);
  return Status::Ok();
}

}  // namespace dlock::harness
