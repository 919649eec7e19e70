// What a child process dlock starts is given: an environment with the store
// in $DLOCK_BACKEND (never argv, which every local user can read), and the
// null-ended pointer arrays exec and posix_spawn take.
#ifndef DLOCK_HARNESS_CHILD_PROCESS_H_
#define DLOCK_HARNESS_CHILD_PROCESS_H_

#include <string>
#include <vector>

#include "dlock/status.h"

namespace dlock::harness {

// This process's environment, with DLOCK_BACKEND set to `store_uri` in
// place of any value it had.
std::vector<std::string> EnvironmentWithStore(const std::string& store_uri);

// Pointers into `strings`, then a null: argv or envp. `strings` must
// outlive the result.
std::vector<char*> NullEnded(std::vector<std::string>& strings);

// Runs `argv` (no shell: a path may hold any byte) and waits for it. Its
// stderr, and its stdout unless `out` takes it, are appended to `log_path`.
// Fails, naming the log, unless it exits 0.
Status RunToLog(std::vector<std::string> argv, const std::string& log_path,
                std::string* out = nullptr);

}  // namespace dlock::harness

#endif  // DLOCK_HARNESS_CHILD_PROCESS_H_
