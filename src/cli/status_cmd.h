// `dlock status [PREFIX]`: who holds what, and who waits for whom.
#ifndef DLOCK_SRC_CLI_STATUS_CMD_H_
#define DLOCK_SRC_CLI_STATUS_CMD_H_

#include <cstdint>
#include <string>

namespace dlock::cli {

struct StatusFlags {
  std::string prefix;
  bool json = false;
  bool waits = false;  // the wait-for graph instead of the holder list
  bool breaks = false;  // the break records instead of the holder list
  std::string backend;
  bool watch = false;           // a live view, redrawn every `interval`
  std::string interval = "1s";  // 100ms..1h
  int count = 0;                // --watch: stop after this many looks (0: until q)
};

int RunStatus(const StatusFlags& flags);
// `status --watch` (status_watch.cc): holders and waiters redrawn in place on
// a terminal, or one JSON object per line with --json.
int RunWatch(const StatusFlags& flags);

// `dlock leader KEY [--after TERM --wait D]`: an election's leader.
struct LeaderFlags {
  std::string key;
  std::uint64_t after = 0;
  std::string wait = "30s";
  bool json = false;
  std::string backend;
};

int RunLeader(const LeaderFlags& flags);

// Exit code of `status --waits` when it finds a wait-for cycle.
inline constexpr int kExitDeadlock = 3;

}  // namespace dlock::cli

#endif  // DLOCK_SRC_CLI_STATUS_CMD_H_
