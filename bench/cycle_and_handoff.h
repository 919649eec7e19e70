// What dlock_bench_postgres and dlock_bench_mariadb share: the uncontended
// cycle timed beside two kinds of plain writes, and the hand-off between
// contending processes (each program runs itself again as a contender), and
// the table both print. Each program keeps what is its store's own: the
// server it starts, the raw connection, which floor its target is judged
// against, and its report's names.
#ifndef DLOCK_BENCH_CYCLE_AND_HANDOFF_H_
#define DLOCK_BENCH_CYCLE_AND_HANDOFF_H_

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dlock/client.h"

namespace dlock::bench {

constexpr int kExitUsage = 64;

// Prints "PROGRAM: message" on stderr and exits with `code`.
[[noreturn]] void Die(const std::string& message, int code = 1);

// Samples in µs. `floor` and `write` are two writes of the kind the
// program's target is judged against, and each one of them; `other_floor`
// and `other_write` the same of the other kind, printed for reference.
struct CycleSamples {
  std::vector<double> cycle, acquire, release;
  std::vector<double> floor, write, other_floor, other_write;
};

// n iterations of a TryAcquire + Release cycle, two `floor_write`s and two
// `other_write`s, in an order that rotates with the iteration, so that
// neither position nor drift favours any of them. Samples go to `out`
// unless it is null (a warm-up).
void RunCyclesAndFloor(Client& client, const std::function<void()>& floor_write,
                       const std::function<void()>& other_write, int n, CycleSamples* out);

// `PROGRAM --contender URI KEY START_NS END_NS OUTFILE`: loops Acquire and
// Release of KEY from START_NS (so that all begin together) until END_NS,
// and writes one line per grant. Returns the process's exit status.
int Contender(int argc, char** argv);

// Hand-off latencies in µs, from the Release's return and from its call,
// and the number of grants each contender had.
struct Handoff {
  std::vector<double> from_call_us, from_return_us;
  std::vector<int> counts;
};

// How grants of one key follow each other in token order: each the last
// one's token + 1 (a counter per key), or only in order (one sequence for
// the whole store).
enum class TokenSteps { kByOne, kInOrder };

// `contenders` processes contend for one key on `uri` for `seconds`.
Handoff RunHandoff(const std::string& uri, int seconds, int contenders, TokenSteps steps);

// One row of the printed table: `us` summarised under results[key].
struct Row {
  const char *key, *label;
  const std::vector<double>& us;
};

// Prints the table's heading and rows, and puts each row in `results`.
void PrintRows(const std::vector<Row>& rows, nlohmann::json& results);

// Prints the grants per process and puts them in `results`; returns the
// largest |count - mean| / mean, in percent.
double GrantSpreadPercent(const std::vector<int>& counts, nlohmann::json& results);

// A target: `value` at most `target`. Printed and put in report["ratios"].
struct Ratio {
  const char *key, *label;
  double value, target;
  const char* unit;
};
void PrintRatios(const std::vector<Ratio>& ratios, nlohmann::json& report);

}  // namespace dlock::bench

#endif  // DLOCK_BENCH_CYCLE_AND_HANDOFF_H_
