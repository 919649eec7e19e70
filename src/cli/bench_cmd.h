// `dlock bench`: what a lock costs on one store, against that store's floor.
#ifndef DLOCK_SRC_CLI_BENCH_CMD_H_
#define DLOCK_SRC_CLI_BENCH_CMD_H_

#include <string>

namespace dlock::cli {

struct BenchFlags {
  std::string backend;
  int iterations = 1000;    // floor and uncontended cycle samples
  int contenders = 4;       // hand-off and hot key
  std::string hold = "1ms"; // critical section in the contended runs
  std::string duration = "3s";
  int clients = 4;          // many-key throughput
  int leases = 10000;       // memory per held lease
  std::string json;         // write the figures here (for `dlock plan --from-bench`)
};

int RunBench(const BenchFlags& flags);

}  // namespace dlock::cli

#endif  // DLOCK_SRC_CLI_BENCH_CMD_H_
