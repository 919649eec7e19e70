#include "cli/fence_cmd.h"

#include <sys/types.h>

#include <cstdlib>
#include <optional>
#include <iostream>
#include <iterator>

#include "cli/command.h"
#include "cli/common.h"
#include "dlock/fence.h"

namespace dlock::cli {
namespace {

// Flag first, then the variable `dlock exec` sets.
std::string FlagOrEnv(const std::string& flag, const char* env) {
  if (!flag.empty()) return flag;
  const char* v = std::getenv(env);
  return v ? v : "";
}

Result<FencingToken> ParseToken(const std::string& text, const char* source) {
  if (text.empty()) {
    return InvalidArgumentError(
        "no fencing token: run under 'dlock exec' (which sets DLOCK_TOKEN, except on "
        "redlock://, whose grants are not ordered) or pass --token N");
  }
  FencingToken t = 0;
  for (char c : text) {
    const FencingToken digit = static_cast<FencingToken>(c - '0');
    if (c < '0' || c > '9' || t > (UINT64_MAX - digit) / 10) {
      return InvalidArgumentError(std::string(source) + " '" + text +
                                  "' is not a fencing token: expected a positive integer");
    }
    t = t * 10 + digit;
  }
  if (Status s = fence::CheckToken(t); !s.ok()) return s.WithContext(source);
  return t;
}

// --mode: octal permissions, as chmod takes them.
Result<std::optional<mode_t>> ParseMode(const std::string& text) {
  if (text.empty()) return std::optional<mode_t>();
  mode_t mode = 0;
  for (char c : text) {
    if (c < '0' || c > '7' || mode > 0777) {
      return InvalidArgumentError("--mode '" + text + "' is not a file mode: expected octal "
                                  "permissions, 0 to 7777, e.g. 0640");
    }
    mode = mode * 8 + static_cast<mode_t>(c - '0');
  }
  return std::optional<mode_t>(mode);
}

}  // namespace

int RunFenceWrite(const FenceWriteFlags& flags) {
  const std::string token_text = FlagOrEnv(flags.token, "DLOCK_TOKEN");
  auto token = ParseToken(token_text, flags.token.empty() ? "DLOCK_TOKEN" : "--token");
  if (!token.ok()) return Fail(token.status());
  const std::string key = FlagOrEnv(flags.key, "DLOCK_KEY");
  if (key.empty()) {
    return Fail(kExitUsage, "no lock key: run under 'dlock exec' (which sets DLOCK_KEY) or pass --key K");
  }
  if (Status s = ValidateKey(key); !s.ok()) return Fail(s);
  auto mode = ParseMode(flags.mode);
  if (!mode.ok()) return Fail(mode.status());

  // Read all of stdin before taking the fence's lock: a slow producer must
  // not hold up other writers, and a failed producer must not half-write.
  std::string content(std::istreambuf_iterator<char>(std::cin), {});
  if (std::cin.bad()) return Fail(kExitCantCreate, "cannot read standard input");

  Status s = fence::Directory(flags.dir).Write(key, *token, flags.name, content,
                                               fence::Directory::WriteOptions{*mode});
  if (s.code() == StatusCode::kUnavailable) return Fail(kExitCantCreate, s.message());
  return s.ok() ? kExitOk : Fail(s);
}

void AddFenceCommands(CLI::App& app, Commands& commands) {
  auto flags = std::make_shared<FenceWriteFlags>();
  CLI::App* fence = app.add_subcommand(
      "fence", "Resource-side guards that reject writes carrying a stale fencing token");
  fence->require_subcommand(1);
  CLI::App* write = fence->add_subcommand(
      "write",
      "Replace DIR/NAME with standard input, atomically, only if the token is not older than "
      "the newest one this directory has accepted for the key (exit 65 if it is)");
  write->add_option("name", flags->name, "file name inside DIR")->required();
  write->add_option("--dir", flags->dir, "the fenced directory")->required();
  write->add_option("--token", flags->token, "fencing token (default: $DLOCK_TOKEN)");
  write->add_option("--key", flags->key, "lock key (default: $DLOCK_KEY)");
  write->add_option("--mode", flags->mode,
                    "permissions of a new file, in octal (default: 0644 less the umask; a "
                    "replaced file keeps its own)");
  write->footer(
      "Example: dlock exec daily -- sh -c 'make-report | dlock fence write --dir /srv/reports "
      "daily.csv'\nExit status: 0 written; 64 usage; 65 stale token (file untouched); 73 the "
      "directory cannot be written; 74 the fence's record is damaged.");
  commands.push_back({write, [flags] { return RunFenceWrite(*flags); }});
}

}  // namespace dlock::cli
