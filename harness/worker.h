// A chaos worker: one process that loops acquire → read → write → release
// on one key and reports every step as a JSON line on stdout.
//
// Inside the critical section (after its read) it waits for one byte on
// stdin from the harness: that is where the harness pauses or kills it, so a
// fault always lands inside a critical section. It never checks its own
// lease before writing: a paused process cannot know it was paused, which is
// the case the fence exists for.
#ifndef DLOCK_HARNESS_WORKER_H_
#define DLOCK_HARNESS_WORKER_H_

#include <chrono>
#include <string>

namespace dlock::harness {

struct WorkerOptions {
  int id = 0;
  int incarnation = 0;
  std::string key;
  std::string resource;  // SQLite file of the counter
  bool fenced = true;
  std::chrono::milliseconds ttl{500};
};

// Returns the process exit code.
int RunWorker(const WorkerOptions& options);

}  // namespace dlock::harness

#endif  // DLOCK_HARNESS_WORKER_H_
