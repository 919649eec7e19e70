// Which file descriptors a command run by dlock may inherit: those dlock
// itself inherited (a caller's `3>log` is meant for the command too), and
// nothing dlock or a store's client library opened since (a logged-in Redis
// socket, a database file, an internal pipe), close-on-exec or not.
#ifndef DLOCK_SRC_CLI_DESCRIPTORS_H_
#define DLOCK_SRC_CLI_DESCRIPTORS_H_

namespace dlock::cli {

// Notes the descriptors open now. Call first thing in main(), before
// anything opens a file.
void RememberInheritedDescriptors();

// Closes every descriptor but 0, 1, 2 and the remembered ones. Only
// async-signal-safe calls: for a child between fork and exec.
void CloseDescriptorsNotInherited();

}  // namespace dlock::cli

#endif  // DLOCK_SRC_CLI_DESCRIPTORS_H_
