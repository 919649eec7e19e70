// What every `dlock` subcommand shares: exit codes, error lines, and how a
// store is chosen from --backend / $DLOCK_BACKEND / the default.
#ifndef DLOCK_SRC_CLI_COMMON_H_
#define DLOCK_SRC_CLI_COMMON_H_

#include <memory>
#include <string>
#include <string_view>

#include "dlock/client.h"
#include "dlock/status.h"

namespace dlock::cli {

// Documented in docs/cli.md; sysexits.h numbers where one fits.
enum ExitCode : int {
  kExitOk = 0,
  kExitUsage = 64,        // bad flag, argument, URI, key, duration
  kExitDataErr = 65,      // a fence rejected a stale token
  kExitSoftware = 70,     // a bug in dlock
  kExitCantCreate = 73,   // a fenced resource cannot be written
  kExitDamaged = 74,      // damaged local state (a fence's record)
  kExitUnavailable = 69,  // the store cannot be opened or reached
  kExitTimedOut = 75,     // gave up waiting for the lock
  kExitNoPermission = 77, // the store refused the credentials or this user's rights
  kExitLeaseLost = 79,    // the lease was lost; the child was terminated
};

// The exit code a failed Status maps to.
int ExitCodeFor(const Status& status);

// Prints "dlock: <message>" on stderr (one line) and returns the exit code.
int Fail(const Status& status);
int Fail(int code, std::string_view message);

// A connected client and the URI it was opened with (exported to children as
// DLOCK_BACKEND).
struct Store {
  std::unique_ptr<Client> client;
  std::string uri;
};

// --backend if given, else $DLOCK_BACKEND, else the default SQLite file.
Result<Store> OpenStore(const std::string& backend_flag);

}  // namespace dlock::cli

#endif  // DLOCK_SRC_CLI_COMMON_H_
