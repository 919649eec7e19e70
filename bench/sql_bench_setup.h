// The set-up dlock_bench_postgres and dlock_bench_mariadb share beside
// their measurements (cycle_and_handoff.h): the same flags, and a server of
// their own when no URI is given.
#ifndef DLOCK_BENCH_SQL_BENCH_SETUP_H_
#define DLOCK_BENCH_SQL_BENCH_SETUP_H_

#include <string>

namespace dlock::bench {

struct Flags {
  std::string uri;  // empty: start a server of our own
  int iterations = 2000;
  int seconds = 5;
  int contenders = 4;
  int keys = 0;  // --keys N; zero: the program takes no --keys
  std::string json_path;
};

// --uri URI, --iterations N, --seconds S, --contenders K (at least 2),
// --json FILE, and --keys N when `defaults.keys` is not zero; each count a
// positive integer. --help prints `usage` and exits 0; a bad flag dies
// with kExitUsage, naming the flag and what it accepts.
Flags ParseFlags(int argc, char** argv, const char* usage, Flags defaults = {});

// Starts scripts/servers/<store>.sh in a fresh directory under /tmp,
// stopped and removed at exit (std::exit included), and returns the URI
// it wrote. Dies if the server does not start.
std::string StartOwnServer(const std::string& store);

}  // namespace dlock::bench

#endif  // DLOCK_BENCH_SQL_BENCH_SETUP_H_
