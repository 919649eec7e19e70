// Fences: the resource-side check that makes a fencing token worth having.
//
// A lease cannot stop a holder that was paused (GC, SIGSTOP, a swapped-out
// VM) from writing after its lease expired and somebody else was granted the
// lock. The resource can: every write carries the writer's token, and a fence
// admits the write for lock key K with token T only when
//
//     T >= the highest token it has admitted for K,
//
// records T as the new highest *atomically with the write itself*, and
// rejects the rest with kStaleToken ("stale token 33 < 34 for key
// orders/42"). Equal tokens are admitted: the same holder may write twice.
//
// Every fence has the same shape: Admit(<the resource's own transaction>,
// key, token) inside the caller's write, plus a convenience that wraps one
// write. This header has the fences for in-process state, SQLite tables and
// plain files; the PostgreSQL and Redis fences follow the same shape with a
// PGconn* and a Redis script.
#ifndef DLOCK_FENCE_H_
#define DLOCK_FENCE_H_

#include <sys/types.h>

#include <functional>
#include <optional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "dlock/export.h"
#include "dlock/status.h"
#include "dlock/types.h"

struct sqlite3;

namespace dlock::fence {

// kStaleToken with the canonical message naming both tokens and the key.
DLOCK_EXPORT Status StaleToken(FencingToken token, FencingToken highest, std::string_view key);

// kInvalidArgument for a token no store grants: 0, or 2^64-1 (a fence that
// accepted it could never accept a newer one).
DLOCK_EXPORT Status CheckToken(FencingToken token);

// Fences in-process state (a map, a cache, an in-memory model).
// Thread-safe: Admit calls for one fence are serialised.
class DLOCK_EXPORT Memory {
 public:
  // Runs `write` if `token` is admitted for `key`, under the fence's lock, and
  // records the token only if `write` returns OK. A null `write` just records.
  Status Admit(std::string_view key, FencingToken token,
               const std::function<Status()>& write = nullptr);
  // 0 when no write was admitted for `key`.
  FencingToken Highest(std::string_view key) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, FencingToken, std::less<>> highest_;
};

// Fences rows of a SQLite database, on the caller's own connection: the
// highest token per key lives in a table `dlock_fence` of the same database,
// so the check and the caller's write commit or roll back together.
class DLOCK_EXPORT Sqlite {
 public:
  // Creates `dlock_fence` if it does not exist. Admit and Write call it
  // themselves; call it up front to keep DDL out of your first transaction.
  static Status EnsureSchema(sqlite3* db);

  // Inside the caller's open write transaction (BEGIN IMMEDIATE): admits and
  // records `token`, or returns kStaleToken. kFailedPrecondition outside a
  // transaction. On kStaleToken the caller must roll back.
  static Status Admit(sqlite3* db, std::string_view key, FencingToken token);

  // BEGIN IMMEDIATE; Admit; write(); COMMIT — or ROLLBACK of everything if
  // the token is stale or `write` fails.
  static Status Write(sqlite3* db, std::string_view key, FencingToken token,
                      const std::function<Status()>& write);

  // The highest admitted token for `key` (0 if none).
  static Result<FencingToken> Highest(sqlite3* db, std::string_view key);
};

// Fences files in one directory. A write replaces DIR/NAME atomically
// (write a temporary file, fsync, rename over NAME, fsync DIR) and only when
// the token is admitted; the highest token per lock key is kept in
// DIR/.dlock-fence/, so it survives restarts. Writers in different processes
// are serialised per key with flock(2) on that record. A crash between
// recording a token and the rename loses that write, never admits a stale one.
class DLOCK_EXPORT Directory {
 public:
  explicit Directory(std::string dir) : dir_(std::move(dir)) {}

  struct WriteOptions {
    // Permissions of a new file; none: 0644 less the umask. A file that is
    // replaced keeps its own mode (and, when run as root, its owner).
    std::optional<mode_t> mode;
  };

  // kStaleToken, kInvalidArgument (bad NAME, or token 0 or 2^64-1),
  // kUnavailable (cannot write the directory, with the path and the
  // reason; a fence file that is a symbolic link is refused), kDataLoss
  // (the key's record is damaged).
  Status Write(std::string_view key, FencingToken token, std::string_view name,
               std::string_view content) const {
    return Write(key, token, name, content, WriteOptions{});
  }
  Status Write(std::string_view key, FencingToken token, std::string_view name,
               std::string_view content, const WriteOptions& options) const;
  Result<FencingToken> Highest(std::string_view key) const;

  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

}  // namespace dlock::fence

#endif  // DLOCK_FENCE_H_
