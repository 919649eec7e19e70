// ParseBenchFlags: the command-line flags of a benchmark program, from a
// table of names and where each value goes, so that every program accepts
// and refuses flags the same way.
#ifndef DLOCK_BENCH_BENCH_FLAGS_H_
#define DLOCK_BENCH_BENCH_FLAGS_H_

#include <initializer_list>
#include <string>
#include <string_view>
#include <variant>

namespace dlock::bench {

// A flag that takes no value and sets `*target` to `value` when given.
struct SetTo {
  bool* target;
  bool value;
};

// One flag: `--name COUNT` (a positive integer), `--name TEXT`, or a SetTo.
struct BenchFlag {
  std::string_view name;
  std::variant<int*, std::string*, SetTo> target;
};

// Reads argv[1..] against `flags`. --help or -h prints `usage` and exits 0;
// an unknown flag, a missing value or a count that is not a positive
// integer prints one line naming it, then `usage`, and exits 64.
void ParseBenchFlags(int argc, char** argv, std::string_view usage,
                     std::initializer_list<BenchFlag> flags);

}  // namespace dlock::bench

#endif  // DLOCK_BENCH_BENCH_FLAGS_H_
