// How many threads this process has now: what the asynchronous API's tests
// check does not grow with the number of pending acquisitions.
#ifndef DLOCK_TESTS_THREADS_H_
#define DLOCK_TESTS_THREADS_H_

#include <dirent.h>

namespace dlock::testing_support {

inline int ThreadsOfThisProcess() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

}  // namespace dlock::testing_support

#endif  // DLOCK_TESTS_THREADS_H_
