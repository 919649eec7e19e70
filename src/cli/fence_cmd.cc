#include "cli/fence_cmd.h"

#include <cstdlib>
#include <iostream>
#include <iterator>

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
  if (t == 0) {
    return InvalidArgumentError(std::string(source) + " is 0: tokens start at 1");
  }
  return t;
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

  // Read all of stdin before taking the fence's lock: a slow producer must
  // not hold up other writers, and a failed producer must not half-write.
  std::string content(std::istreambuf_iterator<char>(std::cin), {});
  if (std::cin.bad()) return Fail(kExitCantCreate, "cannot read standard input");

  Status s = fence::Directory(flags.dir).Write(key, *token, flags.name, content);
  if (s.code() == StatusCode::kUnavailable) return Fail(kExitCantCreate, s.message());
  return s.ok() ? kExitOk : Fail(s);
}

}  // namespace dlock::cli
