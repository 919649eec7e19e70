#include "cli/status_cmd.h"

#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/break_view.h"
#include "cli/command.h"
#include "cli/common.h"
#include "cli/status_view.h"
#include "cli/text.h"
#include "core/duration.h"
#include "dlock/waits.h"

namespace dlock::cli {
namespace {

using nlohmann::json;

int RunWaits(Store& store, const StatusFlags& flags) {
  auto holders = store.client->List(flags.prefix);
  if (!holders.ok()) return Fail(holders.status());
  auto waiters = store.client->Waiters(flags.prefix);
  if (!waiters.ok()) return Fail(waiters.status());
  const WaitReport report = AnalyzeWaits(*holders, *waiters);
  if (flags.json) {
    std::cout << JsonText(WaitsJson(report, store.client->Describe()), 2) << '\n';
  } else {
    WriteWaits(std::cout, report, holders->size(), flags.prefix, store.client->Describe());
  }
  return report.cycles.empty() ? kExitOk : kExitDeadlock;
}

int RunBreaks(Store& store, const StatusFlags& flags) {
  auto records = store.client->Breaks(flags.prefix);
  if (!records.ok()) return Fail(records.status());
  if (flags.json) {
    std::cout << JsonText(BreaksJson(*records), 2) << '\n';
  } else {
    WriteBreaks(std::cout, *records, flags.prefix, store.client->Describe());
  }
  return kExitOk;
}

}  // namespace

int RunStatus(const StatusFlags& flags) {
  if (flags.watch) return RunWatch(flags);
  auto store = OpenStore(flags.backend);
  if (!store.ok()) return Fail(store.status());
  if (flags.waits) return RunWaits(*store, flags);
  if (flags.breaks) return RunBreaks(*store, flags);
  auto holders = store->client->List(flags.prefix);
  if (!holders.ok()) return Fail(holders.status());
  if (flags.json) {
    std::cout << JsonText(HoldersJson(*holders), 2) << '\n';
  } else {
    WriteHolders(std::cout, *holders, flags.prefix, store->client->Describe());
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
    std::cout << JsonText(j, 2) << '\n';
  } else if (leader->has_value()) {
    const Leader& l = **leader;
    std::cout << "leader of '" << Printable(flags.key) << "': "
              << (l.label.empty() ? "(no label)" : Printable(l.label))
              << ", term " << l.term << ", owner " << l.owner.ToString();
    if (l.held_for) std::cout << ", in office for " << internal::FormatDuration(*l.held_for);
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
  auto* waits = cmd->add_flag("--waits", status->waits,
                "show who waits for whom, name any deadlock cycle, and tell it from waiting "
                "behind a slow holder (exit 3 if there is a cycle)");
  auto* breaks = cmd->add_flag("--breaks", status->breaks,
                "show the store's records of dlock break: when, by whom, the evicted owner "
                "and token, the break's token (kept for the break's --keep)")
      ->excludes(waits);
  cmd->add_option("--backend", status->backend, kBackendHelp);
  auto* watch = cmd->add_flag("--watch", status->watch,
                "a live view: holders and waiters (deadlocks marked) redrawn in place like "
                "top, q or Ctrl-C to quit; with --json, one JSON object per line per look");
  watch->excludes(breaks);
  cmd->add_option("--interval", status->interval, "--watch: time between looks (100ms..1h)")
      ->capture_default_str()
      ->needs(watch);
  cmd->add_option("--count", status->count, "--watch: stop after this many looks (0: never)")
      ->capture_default_str()
      ->needs(watch);
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
