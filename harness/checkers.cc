#include "harness/checkers.h"

#include <algorithm>
#include <map>
#include <optional>

namespace dlock::harness {
namespace {

constexpr int kMaxListed = 20;  // violations listed per checker

bool IsFault(const Event& e) {
  return e.worker < 0 && (e.op == "pause" || e.op == "kill" || e.op == "clock-step" ||
                          e.op == "partition" || e.op == "delay" || e.op == "drop" ||
                          e.op == "store-down");
}

// The start of a fault inside the store (harness/member_faults.h).
bool IsMemberFaultEvent(const Event& e) {
  return e.worker < 0 && (e.op == "isolate" || e.op == "member-pause" || e.op == "member-kill" ||
                          e.op == "member-hold-back");
}

// The end of one: the member is back.
bool IsMemberFaultEnd(const Event& e) {
  return e.worker < 0 && (e.op == "rejoin" || e.op == "member-resume" || e.op == "member-restart");
}

bool IsStaleRejection(const Event& e) {
  return e.op == "write" && e.type == EventType::kFail &&
         e.error.find("stale token") != std::string::npos;
}

std::string Ms(std::int64_t ns) { return std::to_string(ns / 1'000'000) + " ms"; }

void Add(CheckResult& r, std::string v) {
  if (static_cast<int>(r.violations.size()) < kMaxListed) r.violations.push_back(std::move(v));
}

void Finish(CheckResult& r, int violations, bool decided, std::string pass_detail,
            std::string unknown_detail) {
  if (violations > 0) {
    r.verdict = Verdict::kFail;
    r.detail = std::to_string(violations) + " violation" + (violations == 1 ? "" : "s");
  } else if (decided) {
    r.verdict = Verdict::kPass;
    r.detail = std::move(pass_detail);
  } else {
    r.verdict = Verdict::kUnknown;
    r.detail = std::move(unknown_detail);
  }
}

std::vector<const LoggedOp*> Writes(const History& h) {
  std::vector<const LoggedOp*> w;
  for (const auto& op : h.log) {
    if (op.is_write) w.push_back(&op);
  }
  return w;
}

CheckResult CheckTokensMonotonic(const History& h) {
  CheckResult r{"a", "admitted write tokens never go backwards"};
  const auto writes = Writes(h);
  int bad = 0;
  FencingToken highest = 0;
  for (const LoggedOp* w : writes) {
    if (w->token < highest) {
      ++bad;
      Add(r, "write #" + std::to_string(w->seq) + " (worker " + std::to_string(w->worker) +
                 ") admitted token " + std::to_string(w->token) + " after token " +
                 std::to_string(highest));
    }
    highest = std::max(highest, w->token);
  }
  Finish(r, bad, writes.size() >= 2,
         std::to_string(writes.size()) + " admitted writes in token order",
         "fewer than two admitted writes");
  return r;
}

CheckResult CheckNoOverlap(const History& h) {
  CheckResult r{"b", "no two admitted writes from overlapping holds"};
  const auto writes = Writes(h);
  int bad = 0;
  std::int64_t current = 0;
  const LoggedOp* previous = nullptr;
  for (const LoggedOp* w : writes) {
    if (w->read_value != current) {
      ++bad;
      Add(r, "write #" + std::to_string(w->seq) + " (worker " + std::to_string(w->worker) +
                 ", token " + std::to_string(w->token) + ") had read " +
                 std::to_string(w->read_value) + " but the counter was " +
                 std::to_string(current) +
                 (previous ? " after write #" + std::to_string(previous->seq) + " (token " +
                                 std::to_string(previous->token) + ")"
                           : std::string()) +
                 ": the two critical sections overlapped");
    }
    current = w->value;
    previous = w;
  }
  Finish(r, bad, writes.size() >= 2, "every admitted write read its predecessor's value",
         "fewer than two admitted writes");
  return r;
}

CheckResult CheckStaleRejected(const History& h) {
  CheckResult r{"c", "every stale write was rejected"};
  int bad = 0;
  FencingToken seen = 0;
  for (const auto& op : h.log) {
    if (op.is_write && op.token < seen) {
      ++bad;
      Add(r, "write #" + std::to_string(op.seq) + " with token " + std::to_string(op.token) +
                 " (worker " + std::to_string(op.worker) +
                 ") was admitted after the resource had seen token " + std::to_string(seen));
    }
    seen = std::max(seen, op.token);
  }
  int rejected = 0;
  for (const auto& e : h.events) rejected += IsStaleRejection(e) ? 1 : 0;
  Finish(r, bad, rejected > 0, std::to_string(rejected) + " stale writes, all rejected",
         "no stale write was attempted, so nothing was tested");
  return r;
}

CheckResult CheckGrantOrder(const History& h) {
  CheckResult r{"d", "a grant that began after another completed has a larger token"};
  struct Grant {
    std::int64_t invoked, completed;
    FencingToken token;
    int worker;
  };
  std::vector<Grant> grants;
  std::map<std::pair<int, int>, std::int64_t> pending;  // (worker, inc) -> invoke time
  for (const auto& e : h.events) {
    if (e.op != "acquire" || e.worker < 0) continue;
    auto id = std::make_pair(e.worker, e.incarnation);
    if (e.type == EventType::kInvoke) {
      pending[id] = e.t_ns;
    } else if (e.type == EventType::kOk) {
      auto it = pending.find(id);
      if (it != pending.end()) {
        grants.push_back({it->second, e.t_ns, e.token, e.worker});
        pending.erase(it);
      }
    } else {
      pending.erase(id);
    }
  }
  std::sort(grants.begin(), grants.end(),
            [](const Grant& a, const Grant& b) { return a.completed < b.completed; });
  // For each grant, the largest token among grants completed before it
  // began: a prefix of the list sorted by completion, so a prefix maximum.
  std::vector<std::size_t> best_upto(grants.size());  // index of the max token in [0, i]
  for (std::size_t i = 0; i < grants.size(); ++i) {
    best_upto[i] = (i == 0 || grants[i].token > grants[best_upto[i - 1]].token) ? i
                                                                                : best_upto[i - 1];
  }
  int bad = 0, comparable = 0;
  for (const Grant& g : grants) {
    auto end = std::lower_bound(grants.begin(), grants.end(), g.invoked,
                                [](const Grant& a, std::int64_t t) { return a.completed < t; });
    if (end == grants.begin()) continue;
    ++comparable;
    const Grant& witness = grants[best_upto[static_cast<std::size_t>(end - grants.begin()) - 1]];
    if (g.token <= witness.token) {
      ++bad;
      Add(r, "worker " + std::to_string(g.worker) + " was granted token " +
                 std::to_string(g.token) + " after worker " + std::to_string(witness.worker) +
                 "'s grant of token " + std::to_string(witness.token) + " had completed");
    }
  }
  Finish(r, bad, comparable > 0, std::to_string(grants.size()) + " grants in token order",
         "no two grants were ordered in time");
  return r;
}

CheckResult CheckNoLostUpdate(const History& h) {
  CheckResult r{"e", "no lost update: final counter = admitted writes"};
  const auto admitted = static_cast<std::int64_t>(Writes(h).size());
  int bad = 0;
  if (h.final_counter != admitted) {
    ++bad;
    Add(r, "final counter " + std::to_string(h.final_counter) + " but " +
               std::to_string(admitted) + " writes were admitted: " +
               std::to_string(admitted - h.final_counter) + " updates lost");
  }
  Finish(r, bad, admitted > 0, "counter " + std::to_string(h.final_counter) + " = " +
                                   std::to_string(admitted) + " admitted writes",
         "no write was admitted");
  return r;
}

// When the next grant after `from` (index i onward) came, if any.
std::optional<std::int64_t> NextGrant(const History& h, std::size_t i, std::int64_t from) {
  for (std::size_t j = i; j < h.events.size(); ++j) {
    const Event& e = h.events[j];
    if (e.t_ns > from && e.op == "acquire" && e.type == EventType::kOk) return e.t_ns;
  }
  return std::nullopt;
}

// When the workers' last event came: the end of the workload, which faults
// and their ends (recorded while the run winds down) may outlast.
std::int64_t WorkloadEnd(const History& h) {
  for (auto e = h.events.rbegin(); e != h.events.rend(); ++e) {
    if (e->worker >= 0) return e->t_ns;
  }
  return 0;
}

// Recovery after one fault (checkers f, i): how long from `from` (event
// index i onward) to the next grant, against `bound_ns`. Without a grant,
// judged only if the workload went on for longer than the bound.
struct Recoveries {
  std::int64_t bound_ns = 0;
  int bad = 0, decided = 0;
  std::int64_t slowest_ns = 0;

  void Judge(const History& h, std::size_t i, std::int64_t from, const std::string& what,
             CheckResult& r) {
    const std::int64_t end = WorkloadEnd(h);
    if (const std::optional<std::int64_t> next = NextGrant(h, i, from)) {
      ++decided;
      slowest_ns = std::max(slowest_ns, *next - from);
      if (*next - from > bound_ns) {
        ++bad;
        Add(r, what + ": next grant after " + Ms(*next - from) + ", bound " + Ms(bound_ns));
      }
    } else if (end - from > bound_ns) {
      ++decided;
      ++bad;
      Add(r, what + ": no grant in the " + Ms(end - from) + " the workload went on");
    }
  }
};

CheckResult CheckRecovery(const History& h, const CheckOptions& o) {
  CheckResult r{"f", "the key is granted again within ttl + bound after each fault"};
  r.safety = false;
  Recoveries rec{(h.ttl_ms + o.recovery_bound.count()) * 1'000'000};
  for (std::size_t i = 0; i < h.events.size(); ++i) {
    const Event& f = h.events[i];
    if (!IsFault(f)) continue;
    std::int64_t from = f.t_ns;
    if (f.op == "store-down") {
      // Measured from the store's return.
      for (std::size_t j = i + 1; j < h.events.size(); ++j) {
        if (h.events[j].worker < 0 && h.events[j].op == "store-up") {
          from = h.events[j].t_ns;
          break;
        }
      }
    }
    rec.Judge(h, i + 1, from, f.op + " at +" + Ms(f.t_ns - h.events.front().t_ns), r);
  }
  Finish(r, rec.bad, rec.decided > 0,
         std::to_string(rec.decided) + " faults, each followed by a grant within ttl + " +
             std::to_string(o.recovery_bound.count()) + " ms",
         "no fault whose recovery could be observed");
  return r;
}

CheckResult CheckNoMinorityGrant(const History& h) {
  CheckResult r{"h", "no grant from a member cut off from the others"};
  std::map<int, int> member_of;               // worker -> member
  std::map<int, std::int64_t> isolated_since;  // member -> since
  std::map<int, std::int64_t> asked_at;        // worker -> its acquire's invoke
  int bad = 0, windows = 0;
  for (const Event& e : h.events) {
    if (e.worker >= 0 && e.op == "member") member_of[e.worker] = static_cast<int>(e.value);
    if (e.worker < 0 && e.op == "isolate") {
      isolated_since[static_cast<int>(e.value)] = e.t_ns;
      ++windows;
    }
    if (e.worker < 0 && e.op == "rejoin") isolated_since.erase(static_cast<int>(e.value));
    if (e.worker < 0 || e.op != "acquire") continue;
    if (e.type == EventType::kInvoke) asked_at[e.worker] = e.t_ns;
    if (e.type != EventType::kOk || !member_of.count(e.worker)) continue;
    const auto since = isolated_since.find(member_of[e.worker]);
    if (since != isolated_since.end() && asked_at[e.worker] > since->second) {
      ++bad;
      Add(r, "worker " + std::to_string(e.worker) + " was granted token " +
                 std::to_string(e.token) + " by member " + std::to_string(since->first) + ", " +
                 Ms(e.t_ns - since->second) + " into its isolation");
    }
  }
  Finish(r, bad, windows > 0 && !member_of.empty(),
         std::to_string(windows) + " isolations; no worker on the cut-off member was granted",
         "no member was isolated");
  return r;
}

CheckResult CheckMemberRecovery(const History& h, const CheckOptions& o) {
  CheckResult r{"i", "the key is granted again within ttl + bound after each member fault"};
  r.safety = false;
  Recoveries rec{(h.ttl_ms + o.member_recovery_bound.count()) * 1'000'000};
  for (std::size_t i = 0; i < h.events.size(); ++i) {
    const Event& f = h.events[i];
    if (!IsMemberFaultEnd(f)) continue;
    // Another member fault before the grant: that one's end is measured.
    const std::optional<std::int64_t> next = NextGrant(h, i + 1, f.t_ns);
    const auto again = std::find_if(h.events.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                                    h.events.end(), IsMemberFaultEvent);
    if (again != h.events.end() && (!next || again->t_ns < *next)) continue;
    rec.Judge(h, i + 1, f.t_ns,
              f.op + " of member " + std::to_string(f.value) + " at +" +
                  Ms(f.t_ns - h.events.front().t_ns),
              r);
  }
  Finish(r, rec.bad, rec.decided > 0,
         std::to_string(rec.decided) + " member faults, each followed by a grant within ttl + " +
             std::to_string(o.member_recovery_bound.count()) + " ms (slowest " +
             Ms(rec.slowest_ns) + ")",
         "no member fault whose recovery could be observed");
  return r;
}

CheckResult CheckPausesTested(const History& h) {
  CheckResult r{"g", "each pause produced a rejected stale write (or says it tested nothing)"};
  int bad = 0, tested = 0, untested = 0;
  for (std::size_t i = 0; i < h.events.size(); ++i) {
    const Event& p = h.events[i];
    // A holder partitioned from the store while it works is a pause as far as
    // the lock can tell.
    if (p.worker >= 0 || (p.op != "pause" && p.op != "partition")) continue;
    const int victim = static_cast<int>(p.value);
    // The victim's token and its first write after the pause, by the same
    // process: a victim that died while paused is restarted, and the new
    // process's writes, with tokens of their own, were never stale.
    FencingToken token = 0;
    int incarnation = -1;
    for (std::size_t j = i; j-- > 0;) {
      const Event& e = h.events[j];
      if (e.worker == victim && e.op == "acquire" && e.type == EventType::kOk) {
        token = e.token;
        incarnation = e.incarnation;
        break;
      }
    }
    const Event* write = nullptr;
    for (std::size_t j = i + 1; j < h.events.size(); ++j) {
      const Event& e = h.events[j];
      if (e.worker == victim && e.incarnation == incarnation && e.token == token &&
          e.op == "write" && e.type != EventType::kInvoke) {
        write = &e;
        break;
      }
    }
    // Superseded at the resource: another holder with a larger token read the
    // counter before the victim's write started.
    bool superseded = false;
    if (write) {
      for (std::size_t j = i + 1; j < h.events.size() && h.events[j].t_ns < write->t_ns; ++j) {
        const Event& e = h.events[j];
        if (e.worker != victim && e.op == "read" && e.type == EventType::kOk && e.token > token) {
          superseded = true;
          break;
        }
      }
    }
    const std::string what = p.op + " of worker " + std::to_string(victim) + " (token " +
                             std::to_string(token) + ", " + Ms(p.duration_ns) + ")";
    if (!write || !superseded) {
      ++untested;
      continue;
    }
    if (write->type == EventType::kOk) {
      ++bad;
      Add(r, what + ": its stale write was admitted after a larger token had read the counter");
    } else {
      ++tested;
    }
  }
  const std::string untested_note =
      untested ? "; " + std::to_string(untested) +
                     " pauses tested nothing (the lease outlived the pause, or no one "
                     "took over before the write)"
               : "";
  Finish(r, bad, tested > 0,
         std::to_string(tested) + " pauses ended in a rejected stale write" + untested_note,
         untested ? "no pause tested anything" + untested_note : "no pause was injected");
  return r;
}

}  // namespace

std::string_view VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kPass: return "pass";
    case Verdict::kFail: return "FAIL";
    case Verdict::kUnknown: return "unknown";
  }
  return "unknown";
}

std::vector<CheckResult> RunCheckers(const History& h, const CheckOptions& options) {
  return {CheckTokensMonotonic(h), CheckNoOverlap(h),        CheckStaleRejected(h),
          CheckGrantOrder(h),      CheckNoLostUpdate(h),     CheckRecovery(h, options),
          CheckPausesTested(h),    CheckNoMinorityGrant(h), CheckMemberRecovery(h, options)};
}

HistoryCounts Count(const History& h) {
  HistoryCounts c;
  std::map<std::string, int> by_kind;
  for (const auto& e : h.events) {
    if (e.op == "write" && e.type == EventType::kInvoke) ++c.operations;
    if (e.op == "acquire" && e.type == EventType::kOk) ++c.grants;
    if (IsStaleRejection(e)) ++c.stale_writes_rejected;
    if (IsFault(e) || IsMemberFaultEvent(e)) {
      ++c.faults;
      ++by_kind[e.op];
    }
  }
  c.writes_admitted = static_cast<int>(Writes(h).size());
  c.faults_by_kind.assign(by_kind.begin(), by_kind.end());
  return c;
}

}  // namespace dlock::harness
