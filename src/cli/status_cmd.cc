#include "cli/status_cmd.h"

#include <cstdio>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/common.h"
#include "cli/text.h"
#include "core/duration.h"
#include "dlock/waits.h"

namespace dlock::cli {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

std::string SessionHex(std::uint64_t session) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(session));
  return hex;
}

std::string Mode(std::uint32_t limit) {
  if (limit == 1) return "exclusive";
  if (limit == kSharedLimit) return "shared";
  return "permits " + std::to_string(limit);
}

std::string Dur(milliseconds d) { return internal::FormatDuration(d); }

// Keys are bytes; replace invalid UTF-8 rather than fail.
void PrintJson(const json& j) {
  std::cout << j.dump(2, ' ', false, json::error_handler_t::replace) << '\n';
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

int RunWaits(Store& store, const StatusFlags& flags) {
  auto holders = store.client->List(flags.prefix);
  if (!holders.ok()) return Fail(holders.status());
  auto waiters = store.client->Waiters(flags.prefix);
  if (!waiters.ok()) return Fail(waiters.status());
  const WaitReport report = AnalyzeWaits(*holders, *waiters);
  const int code = report.cycles.empty() ? kExitOk : kExitDeadlock;

  if (flags.json) {
    json parties = json::array(), cycles = json::array(), verdicts = json::array();
    for (const WaitParty& p : report.parties) {
      json holds = json::array(), waits = json::array();
      for (const auto& h : p.holds) holds.push_back(HolderJson(h));
      for (const auto& w : p.waits) waits.push_back(WaiterJson(w));
      parties.push_back({{"session", SessionHex(p.session)},
                         {"label", p.label},
                         {"holds", holds},
                         {"waits", waits}});
    }
    for (const auto& c : report.cycles) {
      json members = json::array();
      for (std::uint64_t s : c) members.push_back(SessionHex(s));
      cycles.push_back({{"members", members}});
    }
    for (const WaitVerdict& v : report.verdicts) {
      json j = WaiterJson(v.waiter);
      j["verdict"] = v.kind == WaitVerdict::Kind::kInCycle        ? "cycle"
                     : v.kind == WaitVerdict::Kind::kBehindHolder ? "behind-holder"
                                                                  : "queued";
      if (v.kind == WaitVerdict::Kind::kInCycle) j["cycle"] = v.cycle;
      json by = json::array();
      for (const auto& h : v.blocked_by) by.push_back(HolderJson(h));
      j["blocked_by"] = by;
      verdicts.push_back(j);
    }
    PrintJson({{"store", store.client->Describe()},
               {"parties", parties},
               {"cycles", cycles},
               {"waiters", verdicts}});
    return code;
  }

  if (report.verdicts.empty()) {
    std::cout << "nobody is waiting" << (flags.prefix.empty() ? "" : " under '" + Printable(flags.prefix) + "'")
              << " in " << store.client->Describe() << " (" << holders->size()
              << " lock(s) held)\n";
    return code;
  }
  for (std::size_t i = 0; i < report.cycles.size(); ++i) {
    std::cout << "DEADLOCK: " << report.cycles[i].size()
              << " parties wait for each other in a cycle; none can go on until one of "
                 "these leases is released or expires:\n";
    for (const WaitVerdict& v : report.verdicts) {
      if (v.kind != WaitVerdict::Kind::kInCycle || v.cycle != i) continue;
      std::cout << "  " << Party(v.waiter.owner.session(), v.waiter.label) << " waits"
                << WaitedText(v.waiter) << " for '" << Printable(v.waiter.key) << "', held by\n";
      for (const auto& h : v.blocked_by) std::cout << "      " << HolderText(h) << '\n';
    }
  }
  bool header = false;
  for (const WaitVerdict& v : report.verdicts) {
    if (v.kind == WaitVerdict::Kind::kInCycle) continue;
    if (!header) {
      std::cout << (report.cycles.empty() ? "" : "\n") << "waiting, not deadlocked:\n";
      header = true;
    }
    std::cout << "  " << Party(v.waiter.owner.session(), v.waiter.label) << " waits"
              << WaitedText(v.waiter) << " for '" << Printable(v.waiter.key) << "' ("
              << Mode(v.waiter.limit) << ")";
    if (v.kind == WaitVerdict::Kind::kBehindQueue) {
      std::cout << ": nobody holds it now; it is queued behind earlier waiters\n";
      continue;
    }
    std::cout << ", behind a holder:\n";
    for (const auto& h : v.blocked_by) std::cout << "      " << HolderText(h) << '\n';
  }
  return code;
}

}  // namespace

int RunStatus(const StatusFlags& flags) {
  auto store = OpenStore(flags.backend);
  if (!store.ok()) return Fail(store.status());
  if (flags.waits) return RunWaits(*store, flags);
  auto holders = store->client->List(flags.prefix);
  if (!holders.ok()) return Fail(holders.status());

  if (flags.json) {
    json out = json::array();
    for (const HolderInfo& h : *holders) out.push_back(HolderJson(h));
    PrintJson(out);
    return kExitOk;
  }
  if (holders->empty()) {
    std::cout << "no locks held" << (flags.prefix.empty() ? "" : " under '" + Printable(flags.prefix) + "'")
              << " in " << store->client->Describe() << '\n';
    return kExitOk;
  }
  std::size_t key_width = 3;
  for (const auto& h : *holders) key_width = std::max(key_width, Printable(h.key).size());
  key_width = std::min<std::size_t>(key_width, 60);
  std::cout << std::left << std::setw(static_cast<int>(key_width)) << "KEY" << "  "
            << std::setw(32) << "OWNER" << "  " << std::right << std::setw(10) << "TOKEN"
            << "  " << std::left << std::setw(11) << "MODE" << "  " << std::setw(9)
            << "TTL LEFT" << "  " << std::setw(9) << "HELD" << "  LABEL" << '\n';
  for (const auto& h : *holders) {
    std::cout << std::left << std::setw(static_cast<int>(key_width)) << Printable(h.key) << "  "
              << h.owner.ToString() << "  " << std::right << std::setw(10) << h.token << "  "
              << std::left << std::setw(11) << Mode(h.limit) << "  " << std::setw(9)
              << Dur(h.ttl_remaining) << "  " << std::setw(9)
              << (h.held_for ? Dur(*h.held_for) : "-") << "  " << Printable(h.label) << '\n';
  }
  return kExitOk;
}

int RunLeader(const LeaderFlags& flags) {
  auto wait = internal::ParseDuration(flags.wait);
  if (!wait.ok()) return Fail(wait.status().WithContext("--wait"));
  if (Status k = ValidateKey(flags.key); !k.ok()) return Fail(k);
  auto store = OpenStore(flags.backend);
  if (!store.ok()) return Fail(store.status());
  auto leader = flags.after > 0
                    ? store->client->AwaitLeader(flags.key, flags.after, *wait)
                    : store->client->CurrentLeader(flags.key);
  if (!leader.ok()) return Fail(leader.status());
  const bool fresh = leader->has_value() && (*leader)->term > flags.after;
  if (flags.json) {
    json j = nullptr;
    if (leader->has_value()) {
      const Leader& l = **leader;
      j = {{"key", flags.key},
           {"term", l.term},
           {"owner", l.owner.ToString()},
           {"label", l.label},
           {"ttl_remaining_ms", l.ttl_remaining.count()}};
      if (l.held_for) j["held_for_ms"] = l.held_for->count();
    }
    PrintJson(j);
  } else if (leader->has_value()) {
    const Leader& l = **leader;
    std::cout << "leader of '" << Printable(flags.key) << "': "
              << (l.label.empty() ? "(no label)" : Printable(l.label))
              << ", term " << l.term << ", owner " << l.owner.ToString();
    if (l.held_for) std::cout << ", in office for " << Dur(*l.held_for);
    std::cout << '\n';
  }
  if (fresh) return kExitOk;
  if (!flags.json) {
    Fail(0, leader->has_value() ? "no leader newer than term " + std::to_string(flags.after) +
                                      " within " + flags.wait
                                : "no leader of '" + flags.key + "'");
  }
  return kExitTimedOut;
}

void AddStatusCommands(CLI::App& app, Commands& commands) {
  auto status = std::make_shared<StatusFlags>();
  CLI::App* cmd = app.add_subcommand("status", "List held locks: key, owner, token, time left");
  cmd->add_option("prefix", status->prefix, "only keys starting with this");
  cmd->add_flag("--json", status->json,
                "print JSON: an array of holders, or with --waits the wait-for graph");
  cmd->add_flag("--waits", status->waits,
                "show who waits for whom, name any deadlock cycle, and tell it from waiting "
                "behind a slow holder (exit 3 if there is a cycle)");
  cmd->add_option("--backend", status->backend, kBackendHelp);
  commands.push_back({cmd, [status] { return RunStatus(*status); }});

  auto leader = std::make_shared<LeaderFlags>();
  cmd = app.add_subcommand(
      "leader", "Leader election on KEY: show the leader (term = its fencing token, and its "
                "label), or wait for a new one; campaign with 'dlock exec KEY --label VALUE'");
  cmd->add_option("key", leader->key, "election key")->required();
  cmd->add_option("--after", leader->after,
                  "wait for a leader whose term is above this one (0: any leader)");
  cmd->add_option("--wait", leader->wait, "how long --after waits")->capture_default_str();
  cmd->add_flag("--json", leader->json, "print {term, owner, label, ttl_remaining_ms}");
  cmd->add_option("--backend", leader->backend, kBackendHelp);
  cmd->footer(
      "Exit status: 0 a leader is shown; 75 no leader (or none newer than --after when --wait "
      "ran out); 64 usage; 69 store unavailable; 77 credentials refused.");
  commands.push_back({cmd, [leader] { return RunLeader(*leader); }});
}

}  // namespace dlock::cli
