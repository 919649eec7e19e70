// `dlock demo`: the stale-writer story of every fencing explanation, played
// live with real processes on a real store.
#ifndef DLOCK_SRC_CLI_DEMO_CMD_H_
#define DLOCK_SRC_CLI_DEMO_CMD_H_

#include <string>

namespace dlock::cli {

struct DemoFlags {
  std::string backend;
  std::string key = "demo/ledger";
  std::string ttl = "2s";
  bool no_fence = false;
  bool json = false;
};

int RunDemo(const DemoFlags& flags);

// One worker of the demo (hidden subcommand `demo-worker`): acquire, read the
// ledger, work, write through the fence (or not), report events as JSON lines
// on stdout.
struct DemoWorkerFlags {
  std::string name;
  std::string key;
  std::string ttl;
  std::string wait = "30s";
  std::string dir;
  int add = 0;
  std::string work = "0ms";
  bool no_fence = false;
};

int RunDemoWorker(const DemoWorkerFlags& flags);

}  // namespace dlock::cli

#endif  // DLOCK_SRC_CLI_DEMO_CMD_H_
