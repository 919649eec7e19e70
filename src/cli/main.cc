// The `dlock` command: reads the command line (command_line.h), hands
// postgres:// and etcd:// stores to dlock-full, and dispatches to the
// subcommand's own file (each *_cmd.cc declares its flags).
#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/command.h"
#include "cli/command_line.h"
#include "cli/common.h"
#include "cli/descriptors.h"
#include "cli/hide_secrets.h"
#include "cli/process_exit.h"
#include "cli/serve_cmd.h"
#include "core/registry.h"
#include "core/uri.h"
#include "dlock/version.h"
#include "harness/child_process.h"

extern char** environ;

namespace dlock::cli {
namespace {

// The store the command line names: --backend, else $DLOCK_BACKEND; empty
// for the default SQLite file. Also removes --backend from `words`.
std::string TakeNamedStore(std::vector<std::string>& words) {
  std::string named;
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (words[i] == "--backend" && i + 1 < words.size()) {
      named = words[i + 1];
      words.erase(words.begin() + static_cast<long>(i), words.begin() + static_cast<long>(i) + 2);
      --i;
    } else if (words[i].starts_with("--backend=")) {
      named = words[i].substr(10);
      words.erase(words.begin() + static_cast<long>(i--));
    }
  }
  if (!named.empty()) return named;
  const char* env = std::getenv("DLOCK_BACKEND");
  return env ? env : "";
}

// PostgreSQL and etcd are served by dlock-full (core/registry.cc), and so is
// `dlock serve` (serve_cmd.h): hand it the whole command before anything has
// happened; `what` names it in the error if dlock-full cannot be run. The store's URI goes in
// its environment (private to this user), not on its argv (which `ps`
// shows everyone). Returns only if dlock-full cannot be started.
int RunInFullBinary(SplitCommandLine split, const std::string& what) {
  const std::string store = TakeNamedStore(split.dlock_words);
  char self[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  std::string path = n > 0 ? std::string(self, static_cast<std::size_t>(n)) : "";
  path = path.substr(0, path.rfind('/') + 1) + "dlock-full";
  std::vector<std::string> args = {path};
  args.insert(args.end(), split.dlock_words.begin(), split.dlock_words.end());
  if (split.command) {
    args.push_back("--");
    args.insert(args.end(), split.command->begin(), split.command->end());
  }
  std::vector<std::string> env = harness::EnvironmentWithStore(store);
  ::execve(path.c_str(), harness::NullEnded(args).data(), harness::NullEnded(env).data());
  return Fail(kExitUnavailable,
              what + " is served by " + path + ", which cannot be run: " + std::strerror(errno));
}

Commands AddCommands(CLI::App& app) {
  Commands commands;
  AddExecCommands(app, commands);
  AddAcquireCommands(app, commands);
  AddBreakCommand(app, commands);
  AddStatusCommands(app, commands);
  AddFenceCommands(app, commands);
  AddDemoCommands(app, commands);
  AddPlanCommand(app, commands);
  AddBenchCommand(app, commands);
  AddChaosCommands(app, commands);
  AddServeCommand(app, commands);
  return commands;
}

// CLI11 parses dlock's own words; exec and once get the command as split.
int ParseAndRun(CLI::App& app, Commands& commands, SplitCommandLine& split) {
  try {
    std::vector<std::string> reversed(split.dlock_words.rbegin(), split.dlock_words.rend());
    app.parse(std::move(reversed));
  } catch (const CLI::CallForHelp&) {
    std::cout << (split.subcommand ? split.subcommand : &app)->help();
    return kExitOk;
  } catch (const CLI::CallForAllHelp&) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    return kExitOk;
  } catch (const CLI::CallForVersion&) {
    std::cout << "dlock " << dlock::Version() << "\n";
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    return Fail(kExitUsage, std::string(e.what()) + " (see 'dlock --help')");
  }
  for (Command& c : commands) {
    if (!c.app->parsed()) continue;
    if (c.command_words && split.command) *c.command_words = std::move(*split.command);
    return c.run();
  }
  return Fail(kExitUsage, "no command given (see 'dlock --help')");
}

int Main(int argc, char** argv) {
  RememberInheritedDescriptors();  // before anything opens a file
  CLI::App app{"dlock: distributed locks with fencing tokens", "dlock"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "dlock " + std::string(dlock::Version()));
  app.footer("Stores: " + dlock::internal::SupportedSchemes() +
             "\nExit codes: 64 usage, 65 stale token, 69 store unavailable, 74 damaged local "
             "state, 75 gave up waiting, 77 credentials or permission refused, 79 lease "
             "lost.\nSee docs/cli.md.");
  Commands commands = AddCommands(app);
  std::vector<const CLI::App*> runs_command;
  for (const Command& c : commands) {
    if (c.command_words) runs_command.push_back(c.app);
  }
  const std::vector<std::string> words(argv + 1, argv + argc);
  auto split = Split(app, words, runs_command);
  if (!split.ok()) return Fail(split.status());
  std::vector<std::string> probe = split->dlock_words;
  if (auto uri = dlock::internal::ParseUri(TakeNamedStore(probe));
      uri.ok() && dlock::internal::ServedByFullBinary(uri->scheme)) {
    return RunInFullBinary(*split, "the " + uri->scheme + " store");
  }
  if (split->subcommand != nullptr && split->subcommand->get_name() == "serve" &&
      WhereServeRuns() == ServeWhere::kInFullBinary) {
    return RunInFullBinary(*split, "dlock serve");
  }
  HideBackendSecretsInArgv(static_cast<int>(split->dlock_end) + 1, argv);
  return ParseAndRun(app, commands, *split);
}

}  // namespace
}  // namespace dlock::cli

int main(int argc, char** argv) {
  // Main's objects (clients, leases, files) are gone when it returns; the
  // libraries' exit handlers are skipped (process_exit.h says why).
  dlock::cli::ExitSkippingLibraryCleanUp(dlock::cli::Main(argc, argv));
}
