// The process `dlock acquire` leaves behind. It detaches (a session of its
// own, no terminal, none of its parent's descriptors), takes the lock,
// tells its parent the handle or the error through `report`, and renews the
// lease until `dlock release` asks through its socket, SIGTERM (or SIGINT,
// SIGHUP, SIGQUIT) ends it — released either way — or the lease is lost.
#ifndef DLOCK_SRC_CLI_DETACHED_HOLDER_H_
#define DLOCK_SRC_CLI_DETACHED_HOLDER_H_

#include "cli/lock_flags.h"
#include "core/fd.h"

namespace dlock::cli {

// Runs in the child of a fork, with the parent's signals blocked; never
// returns.
[[noreturn]] void RunDetachedHolder(const LockFlags& flags, LockPlan plan, internal::Fd report);

}  // namespace dlock::cli

#endif  // DLOCK_SRC_CLI_DETACHED_HOLDER_H_
