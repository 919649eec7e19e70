// `dlock status [PREFIX]`: who holds what.
#ifndef DLOCK_SRC_CLI_STATUS_CMD_H_
#define DLOCK_SRC_CLI_STATUS_CMD_H_

#include <string>

namespace dlock::cli {

struct StatusFlags {
  std::string prefix;
  bool json = false;
  std::string backend;
};

int RunStatus(const StatusFlags& flags);

}  // namespace dlock::cli

#endif  // DLOCK_SRC_CLI_STATUS_CMD_H_
