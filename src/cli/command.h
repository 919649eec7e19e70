// One `dlock` subcommand as main() sees it: the CLI11 app its flags are
// declared on, and what runs it once they are parsed. Each *_cmd.cc adds
// its own commands; main() only reads the command line and dispatches.
#ifndef DLOCK_SRC_CLI_COMMAND_H_
#define DLOCK_SRC_CLI_COMMAND_H_

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace dlock::cli {

struct Command {
  CLI::App* app = nullptr;
  // Runs it with the parsed flags; returns the exit code.
  std::function<int()> run;
  // exec and once: where main() puts the command to run (every word from
  // its first on; command_line.h). Null for the others.
  std::vector<std::string>* command_words = nullptr;
};

using Commands = std::vector<Command>;

void AddExecCommands(CLI::App& app, Commands& commands);    // exec, once
void AddAcquireCommands(CLI::App& app, Commands& commands); // acquire, release
void AddBreakCommand(CLI::App& app, Commands& commands);
void AddStatusCommands(CLI::App& app, Commands& commands);  // status, leader
void AddFenceCommands(CLI::App& app, Commands& commands);   // fence write
void AddDemoCommands(CLI::App& app, Commands& commands);    // demo, demo-worker
void AddPlanCommand(CLI::App& app, Commands& commands);
void AddBenchCommand(CLI::App& app, Commands& commands);
void AddChaosCommands(CLI::App& app, Commands& commands);   // chaos, chaos-worker
void AddServeCommand(CLI::App& app, Commands& commands);

// Help text shared by every --backend option.
inline constexpr const char* kBackendHelp =
    "store URI (default: $DLOCK_BACKEND, else the SQLite file "
    "$XDG_STATE_HOME/dlock/locks.db); a password may come from "
    "?password_file=PATH or ?password_env=NAME instead of the URI";

}  // namespace dlock::cli

#endif  // DLOCK_SRC_CLI_COMMAND_H_
