// `dlock chaos`: the fault-injection harness (harness/), from the shell.
#ifndef DLOCK_SRC_CLI_CHAOS_CMD_H_
#define DLOCK_SRC_CLI_CHAOS_CMD_H_

#include <string>

namespace dlock::cli {

struct ChaosFlags {
  std::string backend;
  std::string workload = "fenced";
  std::string faults = "pause,kill,clock-step";
  std::string duration = "10s";
  std::string ttl = "500ms";
  std::string seed;  // empty: random, printed
  int runs = 1;
  int workers = 4;
  bool json = false;
  std::string report;
  std::string dir;
  bool keep = false;
  std::string server_script;  // store-restart, member faults
  std::string server_dir;
  std::string store_params;  // added to the URI the server script prints
  std::string time_limit;  // empty: none; else no run starts after it
};

int RunChaos(const ChaosFlags& flags);

struct ChaosWorkerFlags {
  int id = 0;
  int incarnation = 0;
  std::string key;
  std::string resource;
  std::string ttl;
  bool unfenced = false;
};

int RunChaosWorker(const ChaosWorkerFlags& flags);

}  // namespace dlock::cli

#endif  // DLOCK_SRC_CLI_CHAOS_CMD_H_
