// How a `dlock` command line is read before CLI11 sees it:
//
//  - The subcommand path (exec, fence write, ...) must name a command; an
//    unknown word or option is named, with the nearest known one.
//  - For the commands that run a command (exec, once) everything from the
//    command's first word on belongs to it, with or without `--`, as with
//    sudo, env, timeout or flock: in `dlock exec k echo --ttl 5s` the
//    `--ttl 5s` is echo's. The first word is KEY; with `--`, KEY may be left
//    out when --key names the keys.
#ifndef DLOCK_SRC_CLI_COMMAND_LINE_H_
#define DLOCK_SRC_CLI_COMMAND_LINE_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "dlock/status.h"

namespace dlock::cli {

struct SplitCommandLine {
  std::vector<std::string> dlock_words;  // for CLI11: subcommands, options, KEY
  std::optional<std::vector<std::string>> command;  // exec/once: the command
  CLI::App* subcommand = nullptr;  // the innermost one named (nullptr: none)
  // How many of the words are dlock's: the command (and a `--` before it)
  // starts there.
  std::size_t dlock_end = 0;
};

// `words` is argv without argv[0]. `runs_command` says which subcommands
// take a command. kInvalidArgument names the word not understood.
Result<SplitCommandLine> Split(CLI::App& app, const std::vector<std::string>& words,
                               const std::vector<const CLI::App*>& runs_command);

// The known name closest to `word` (a typo, a prefix), or "" when none is
// close enough to suggest.
std::string NearestName(std::string_view word, const std::vector<std::string>& names);

}  // namespace dlock::cli

#endif  // DLOCK_SRC_CLI_COMMAND_LINE_H_
