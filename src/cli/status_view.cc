#include "cli/status_view.h"

#include <cstdio>
#include <iomanip>
#include <sstream>

#include "cli/text.h"
#include "core/duration.h"

namespace dlock::cli {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

std::string Mode(std::uint32_t limit) {
  if (limit == 1) return "exclusive";
  if (limit == kSharedLimit) return "shared";
  return "permits " + std::to_string(limit);
}

std::string Dur(milliseconds d) { return internal::FormatDuration(d); }

json WaiterJson(const WaiterInfo& w) {
  json j = {{"key", w.key},
            {"owner", w.owner.ToString()},
            {"session", SessionHex(w.owner.session())},
            {"mode", Mode(w.limit)},
            {"label", w.label}};
  if (w.waited_for) j["waited_for_ms"] = w.waited_for->count();
  return j;
}

std::string Party(std::uint64_t session, const std::string& label) {
  return "party " + SessionHex(session) + (label.empty() ? "" : " (" + Printable(label) + ")");
}

std::string HolderText(const HolderInfo& h) {
  std::ostringstream out;
  out << Party(h.owner.session(), h.label) << ", token " << h.token;
  if (h.held_for) out << ", held for " << Dur(*h.held_for);
  if (h.ttl > milliseconds(0)) {
    const milliseconds ago = h.ttl - h.ttl_remaining;
    if (RenewalsArriving(h)) {
      out << ", renewals arriving (last " << Dur(ago) << " ago)";
    } else {
      out << ", renewals STOPPED (last " << Dur(ago) << " ago; expires in "
          << Dur(h.ttl_remaining) << ")";
    }
  } else if (h.ttl_remaining > milliseconds(0)) {
    out << ", " << Dur(h.ttl_remaining) << " left";
  } else {
    // ZooKeeper, another client's node: it exists only while that client's
    // session does, so its being listed is the sign of life.
    out << ", alive while its store session is (no lease time reported)";
  }
  return out.str();
}

std::string WaitedText(const WaiterInfo& w) {
  return w.waited_for ? " for " + Dur(*w.waited_for) : "";
}

std::string Under(const std::string& prefix) {
  return prefix.empty() ? "" : " under '" + Printable(prefix) + "'";
}

json VerdictJson(const WaitVerdict& v) {
  json j = WaiterJson(v.waiter);
  j["verdict"] = v.kind == WaitVerdict::Kind::kInCycle        ? "cycle"
                 : v.kind == WaitVerdict::Kind::kBehindHolder ? "behind-holder"
                                                              : "queued";
  if (v.kind == WaitVerdict::Kind::kInCycle) j["cycle"] = v.cycle;
  j["blocked_by"] = HoldersJson(v.blocked_by);
  return j;
}

void WriteCycles(std::ostream& out, const WaitReport& report) {
  for (std::size_t i = 0; i < report.cycles.size(); ++i) {
    out << "DEADLOCK: " << report.cycles[i].size()
        << " parties wait for each other in a cycle; none can go on until one of "
           "these leases is released or expires:\n";
    for (const WaitVerdict& v : report.verdicts) {
      if (v.kind != WaitVerdict::Kind::kInCycle || v.cycle != i) continue;
      out << "  " << Party(v.waiter.owner.session(), v.waiter.label) << " waits"
          << WaitedText(v.waiter) << " for '" << Printable(v.waiter.key) << "', held by\n";
      for (const auto& h : v.blocked_by) out << "      " << HolderText(h) << '\n';
    }
  }
}

}  // namespace

std::string SessionHex(std::uint64_t session) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(session));
  return hex;
}

json HolderJson(const HolderInfo& h) {
  json j = {{"key", h.key},
            {"owner", h.owner.ToString()},
            {"session", SessionHex(h.owner.session())},
            {"token", h.token},
            {"mode", Mode(h.limit)},
            {"label", h.label},
            {"ttl_remaining_ms", h.ttl_remaining.count()}};
  if (h.ttl > milliseconds(0)) {
    j["ttl_ms"] = h.ttl.count();
    j["renewed_ms_ago"] = (h.ttl - h.ttl_remaining).count();
  }
  if (h.held_for) j["held_for_ms"] = h.held_for->count();
  j["renewals_arriving"] = RenewalsArriving(h);
  return j;
}

json HoldersJson(const std::vector<HolderInfo>& holders) {
  json out = json::array();
  for (const HolderInfo& h : holders) out.push_back(HolderJson(h));
  return out;
}

json WaitsJson(const WaitReport& report, const std::string& store) {
  json parties = json::array(), cycles = json::array(), verdicts = json::array();
  for (const WaitParty& p : report.parties) {
    json waits = json::array();
    for (const auto& w : p.waits) waits.push_back(WaiterJson(w));
    parties.push_back({{"session", SessionHex(p.session)},
                       {"label", p.label},
                       {"holds", HoldersJson(p.holds)},
                       {"waits", waits}});
  }
  for (const auto& c : report.cycles) {
    json members = json::array();
    for (std::uint64_t s : c) members.push_back(SessionHex(s));
    cycles.push_back({{"members", members}});
  }
  for (const WaitVerdict& v : report.verdicts) verdicts.push_back(VerdictJson(v));
  return {{"store", store}, {"parties", parties}, {"cycles", cycles}, {"waiters", verdicts}};
}

void WriteHolders(std::ostream& out, const std::vector<HolderInfo>& holders,
                  const std::string& prefix, const std::string& store) {
  if (holders.empty()) {
    out << "no locks held" << Under(prefix) << " in " << store << '\n';
    return;
  }
  std::size_t key_width = 3;
  for (const auto& h : holders) key_width = std::max(key_width, Printable(h.key).size());
  const int kw = static_cast<int>(std::min<std::size_t>(key_width, 60));
  out << std::left << std::setw(kw) << "KEY" << "  " << std::setw(32) << "OWNER" << "  "
      << std::right << std::setw(10) << "TOKEN" << "  " << std::left << std::setw(11) << "MODE"
      << "  " << std::setw(9) << "TTL LEFT" << "  " << std::setw(9) << "HELD" << "  LABEL"
      << '\n';
  for (const auto& h : holders) {
    out << std::left << std::setw(kw) << Printable(h.key) << "  " << h.owner.ToString() << "  "
        << std::right << std::setw(10) << h.token << "  " << std::left << std::setw(11)
        << Mode(h.limit) << "  " << std::setw(9) << Dur(h.ttl_remaining) << "  "
        << std::setw(9) << (h.held_for ? Dur(*h.held_for) : "-") << "  " << Printable(h.label)
        << '\n';
  }
}

void WriteWaits(std::ostream& out, const WaitReport& report, std::size_t held,
                const std::string& prefix, const std::string& store) {
  if (report.verdicts.empty()) {
    out << "nobody is waiting" << Under(prefix) << " in " << store << " (" << held
        << " lock(s) held)\n";
    return;
  }
  WriteCycles(out, report);
  bool header = false;
  for (const WaitVerdict& v : report.verdicts) {
    if (v.kind == WaitVerdict::Kind::kInCycle) continue;
    if (!header) {
      out << (report.cycles.empty() ? "" : "\n") << "waiting, not deadlocked:\n";
      header = true;
    }
    out << "  " << Party(v.waiter.owner.session(), v.waiter.label) << " waits"
        << WaitedText(v.waiter) << " for '" << Printable(v.waiter.key) << "' ("
        << Mode(v.waiter.limit) << ")";
    if (v.kind == WaitVerdict::Kind::kBehindQueue) {
      out << ": nobody holds it now; it is queued behind earlier waiters\n";
      continue;
    }
    out << ", behind a holder:\n";
    for (const auto& h : v.blocked_by) out << "      " << HolderText(h) << '\n';
  }
}

json LookJson(Client& client, const std::string& prefix, bool with_waits) {
  json j = {{"at_ms", std::chrono::duration_cast<milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count()},
            {"store", client.Describe()}};
  auto holders = client.List(prefix);
  Status failed = holders.status();
  if (holders.ok()) {
    j["holders"] = HoldersJson(*holders);
    if (with_waits) {
      auto waiters = client.Waiters(prefix);
      // A store that keeps no waiter records has no graph, and no error.
      if (waiters.status().code() != StatusCode::kFailedPrecondition) failed = waiters.status();
      if (waiters.ok()) j["waits"] = WaitsJson(AnalyzeWaits(*holders, *waiters), client.Describe());
    }
  }
  if (!failed.ok()) {
    j["error"] = failed.message();
    j["code"] = std::string(StatusCodeName(failed.code()));
  }
  return j;
}

std::string JsonText(const json& j, int indent) {
  return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

}  // namespace dlock::cli
