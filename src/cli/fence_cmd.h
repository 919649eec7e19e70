// `dlock fence write --dir DIR NAME`: replace a file only with a current token.
#ifndef DLOCK_SRC_CLI_FENCE_CMD_H_
#define DLOCK_SRC_CLI_FENCE_CMD_H_

#include <string>

namespace dlock::cli {

struct FenceWriteFlags {
  std::string dir;
  std::string name;
  std::string token;  // empty: $DLOCK_TOKEN
  std::string key;    // empty: $DLOCK_KEY
  std::string mode;   // octal; empty: 0644 less the umask
};

int RunFenceWrite(const FenceWriteFlags& flags);

}  // namespace dlock::cli

#endif  // DLOCK_SRC_CLI_FENCE_CMD_H_
