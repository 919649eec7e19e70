// The store's own pipelined-write floor for dlock_bench_async's distinct
// mode (issue 25): how many writes a second one connection of the store
// takes with many in flight, each the cheapest write of the kind a grant
// makes. Each store's measurement lives in async_floor_<store>.cc.
#ifndef DLOCK_BENCH_ASYNC_FLOOR_H_
#define DLOCK_BENCH_ASYNC_FLOOR_H_

#include <optional>
#include <string>
#include <string_view>

namespace dlock::bench {

struct WriteFloor {
  double writes_per_s = 0;
  std::string what;  // the write and how it was pipelined, for the output
};

// `writes` writes through the store at `uri`; nullopt when no floor is
// written for that store yet (the output then says so).
std::optional<WriteFloor> PipelinedWriteFloor(std::string_view uri, int writes);

// Each store's, in async_floor_<store>.cc (built when the store is).
std::optional<WriteFloor> PostgresWriteFloor(std::string_view uri, int writes);

}  // namespace dlock::bench

#endif  // DLOCK_BENCH_ASYNC_FLOOR_H_
