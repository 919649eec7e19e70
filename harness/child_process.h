// What a child process dlock starts is given: an environment with the store
// in $DLOCK_BACKEND (never argv, which every local user can read), and the
// null-ended pointer arrays exec and posix_spawn take.
#ifndef DLOCK_HARNESS_CHILD_PROCESS_H_
#define DLOCK_HARNESS_CHILD_PROCESS_H_

#include <string>
#include <vector>

namespace dlock::harness {

// This process's environment, with DLOCK_BACKEND set to `store_uri` in
// place of any value it had.
std::vector<std::string> EnvironmentWithStore(const std::string& store_uri);

// Pointers into `strings`, then a null: argv or envp. `strings` must
// outlive the result.
std::vector<char*> NullEnded(std::vector<std::string>& strings);

}  // namespace dlock::harness

#endif  // DLOCK_HARNESS_CHILD_PROCESS_H_
