// The resource the chaos workers protect with the lock: a counter in its own
// SQLite file, plus the resource's log of every operation it admitted, in
// commit order.
//
// Fenced: the read and the write each go through fence::Sqlite in their own
// transaction, so the resource learns a holder's token when the holder first
// touches it; a paused holder whose successor has already read is rejected.
// Unfenced (the positive control): the same transactions without the fence.
#ifndef DLOCK_HARNESS_RESOURCE_H_
#define DLOCK_HARNESS_RESOURCE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dlock/status.h"
#include "harness/history.h"

struct sqlite3;

namespace dlock::harness {

class CounterResource {
 public:
  static Result<std::unique_ptr<CounterResource>> Open(const std::string& path, bool fenced);
  ~CounterResource();

  Result<std::int64_t> Read(std::string_view key, FencingToken token, int worker);
  Status Write(std::string_view key, FencingToken token, int worker, std::int64_t read_value,
               std::int64_t new_value);

  // The log and the final counter of `path` (after the run).
  static Status Load(const std::string& path, std::vector<LoggedOp>* log,
                     std::int64_t* final_counter);

 private:
  CounterResource(sqlite3* db, bool fenced) : db_(db), fenced_(fenced) {}
  Status InTransaction(std::string_view key, FencingToken token,
                       const std::function<Status()>& body);

  sqlite3* db_;
  bool fenced_;
};

}  // namespace dlock::harness

#endif  // DLOCK_HARNESS_RESOURCE_H_
