// A socket's waits bounded by a deadline: the one non-blocking connect the
// stores that open their own sockets share (Redis's transport, etcd's
// plaintext probe).
#ifndef DLOCK_SRC_CORE_CONNECT_H_
#define DLOCK_SRC_CORE_CONNECT_H_

#include <netdb.h>

#include <chrono>

namespace dlock::internal {

using SteadyTime = std::chrono::steady_clock::time_point;

// Waits until `fd` is ready for `events` or `deadline`; false on timeout.
// A poll error is reported as ready: the next call on `fd` says what it was.
bool WaitFor(int fd, short events, SteadyTime deadline);

// A non-blocking socket connected to `ai` before `deadline`, or -1 with
// errno set (ETIMEDOUT when the deadline came first).
int ConnectBefore(const addrinfo* ai, SteadyTime deadline);

}  // namespace dlock::internal

#endif  // DLOCK_SRC_CORE_CONNECT_H_
