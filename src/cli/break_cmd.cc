// `dlock break KEY`: an operator evicts a lock's holder. Shown first, and
// broken only with --force or a yes at a terminal; ordered after the
// evicted holders by a fencing token (Client::Break).
#include <pwd.h>
#include <unistd.h>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/common.h"
#include "cli/lock_flags.h"
#include "cli/status_view.h"
#include "cli/text.h"

namespace dlock::cli {
namespace {

using nlohmann::json;

// Exit status when the operator answers no at the prompt.
constexpr int kExitNotConfirmed = 1;

struct BreakFlags {
  std::string key;
  std::vector<std::string> owners;
  bool force = false;
  bool json = false;
  std::string keep = "30d";  // the break records' retention: kDefaultBreakRetention
  static_assert(kDefaultBreakRetention == std::chrono::hours(24 * 30), "--keep's default");
  std::string backend;
};

// Who breaks, as the break's grant shows it: the user and the host.
std::string BreakerLabel() {
  const passwd* user = ::getpwuid(::getuid());
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  std::string label = "dlock break by " + std::string(user ? user->pw_name : "uid " +
                                                          std::to_string(::getuid())) +
                      "@" + host;
  return ValidateLabel(label).ok() ? label : "dlock break";
}

Result<std::vector<OwnerId>> ParseOwners(const std::vector<std::string>& texts) {
  std::vector<OwnerId> owners;
  for (const std::string& t : texts) {
    auto owner = OwnerId::Parse(t);
    if (!owner.ok()) {
      return InvalidArgumentError("--owner '" + Printable(t.substr(0, 40)) +
                                  "' is not an owner id: 32 hex digits, as dlock status shows");
    }
    owners.push_back(*owner);
  }
  return owners;
}

// The holders a break of `flags` would evict, as the store shows them now.
Result<std::vector<HolderInfo>> Targets(Client& client, const BreakFlags& flags,
                                        const std::vector<OwnerId>& owners) {
  DLOCK_ASSIGN_OR_RETURN(std::vector<HolderInfo> holders, client.List(flags.key));
  std::erase_if(holders, [&](const HolderInfo& h) {
    return h.key != flags.key ||
           (!owners.empty() && std::find(owners.begin(), owners.end(), h.owner) == owners.end());
  });
  return holders;
}

// A yes typed at the terminal (RunBreak has made sure there is one).
Status Confirmed(const BreakFlags& flags, std::size_t holders) {
  std::cerr << "Break " << holders << " holding" << (holders == 1 ? "" : "s") << " of '"
            << Printable(flags.key) << "'? Their commands are terminated. [y/N] " << std::flush;
  std::string answer;
  std::getline(std::cin, answer);
  if (answer == "y" || answer == "Y" || answer == "yes") return Status::Ok();
  return CancelledError("not confirmed: nothing broken");
}

void Print(const BreakFlags& flags, const BreakReport& report) {
  if (flags.json) {
    json j{{"key", flags.key},
           {"evicted", HoldersJson(report.evicted)},
           {"token", report.token}};
    if (!report.evicted.empty()) j["recorded"] = report.recorded.ok();
    if (!report.recorded.ok()) j["record_error"] = report.recorded.message();
    std::cout << JsonText(j, 2) << '\n';
    return;
  }
  for (const HolderInfo& h : report.evicted) {
    std::cout << "broke '" << Printable(flags.key) << "': owner " << h.owner.ToString()
              << ", token " << h.token << ", label " << Printable(h.label) << '\n';
  }
  if (report.token != 0) {
    std::cout << "the break's token is " << report.token
              << ": a fence that has seen it refuses the evicted holders' writes\n";
  }
  if (report.evicted.empty()) return;
  if (report.recorded.ok()) {
    std::cout << "recorded in the store (kept " << flags.keep << "): dlock status --breaks '"
              << Printable(flags.key) << "' shows it\n";
  } else {
    // The break stands; only its audit trail is missing.
    std::cerr << "dlock: the break was not recorded: " << report.recorded.message() << '\n';
  }
}

int RunBreak(const BreakFlags& flags) {
  if (Status k = ValidateKey(flags.key); !k.ok()) return Fail(k);
  // A pipe is never taken for a yes.
  if (!flags.force && ::isatty(STDIN_FILENO) == 0) {
    return Fail(kExitUsage, "dlock break needs --force when its input is not a terminal");
  }
  auto owners = ParseOwners(flags.owners);
  if (!owners.ok()) return Fail(owners.status());
  auto keep = KeepFlag(flags.keep);
  if (!keep.ok()) return Fail(keep.status());
  auto store = OpenStore(flags.backend);
  if (!store.ok()) return Fail(store.status());
  auto targets = Targets(*store->client, flags, *owners);
  if (!targets.ok()) return Fail(targets.status());
  if (targets->empty()) {
    std::cerr << "dlock: nothing to break: nobody" << (owners->empty() ? "" : " named")
              << " holds '" << Printable(flags.key) << "'\n";
    return kExitOk;
  }
  if (!flags.force) {
    WriteHolders(std::cerr, *targets, flags.key, store->client->Describe());
    if (Status yes = Confirmed(flags, targets->size()); !yes.ok()) {
      return Fail(kExitNotConfirmed, yes.message());
    }
  }
  BreakOptions options;
  for (const HolderInfo& h : *targets) options.owners.push_back(h.owner);  // only those shown
  options.label = BreakerLabel();
  options.keep_record = *keep;
  auto report = store->client->Break(flags.key, options);
  if (!report.ok()) return Fail(report.status());
  if (report->evicted.empty()) {
    std::cerr << "dlock: nothing broken: the holders shown were gone before the break\n";
  }
  Print(flags, *report);
  return kExitOk;
}

}  // namespace

void AddBreakCommand(CLI::App& app, Commands& commands) {
  auto flags = std::make_shared<BreakFlags>();
  CLI::App* cmd = app.add_subcommand(
      "break", "Evict the holders of KEY (an operator's forced release): their leases are "
               "lost, their commands terminated, and a later fencing token refuses their "
               "writes");
  cmd->add_option("key", flags->key, "the lock key")->required();
  cmd->add_option("--owner", flags->owners,
                  "only this holder (an owner id from dlock status; repeatable); default: "
                  "every holder of KEY")
      ->allow_extra_args(false);
  cmd->add_flag("--force", flags->force,
                "break without asking (required when input is not a terminal)");
  cmd->add_flag("--json", flags->json, "print what was broken as JSON");
  cmd->add_option("--keep", flags->keep,
                  "keep the store's record of each eviction this long (e.g. 90d), or "
                  "'forever'; dlock status --breaks shows them")
      ->capture_default_str();
  cmd->add_option("--backend", flags->backend, kBackendHelp);
  cmd->footer(
      "Shows the holders, asks at a terminal (or takes --force), evicts exactly those shown, "
      "and prints each one broken and the break's token. The store keeps a record of each "
      "eviction (who, when, owner, token) for --keep, where it can.\nExit status: 0 broken "
      "(recorded or not: a record that could not be kept is said on stderr), or nothing to "
      "break; 1 not confirmed; 64 usage (or no terminal and no --force); 69 store "
      "unavailable; 77 credentials refused.");
  commands.push_back({cmd, [flags] { return RunBreak(*flags); }});
}

}  // namespace dlock::cli
