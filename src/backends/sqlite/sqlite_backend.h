// The embedded SQLite backend: the default store, for processes on one host.
//
// One database file holds every lock. Each grant, takeover of an expired
// lease and token bump happens in one BEGIN IMMEDIATE transaction; tokens come
// from the store's one counter, never reset (dlock_meta 'last_token',
// sqlite_sql.h), so each key's tokens increase. A key may have
// several holders (read-write locks, semaphores: the sharing rule of
// backend.h), one dlock_holders row each; waiters queue in dlock_queue with
// their limit and label. docs/backends.md has the layout.
// WAL journal, synchronous=FULL by default, so a granted token survives power
// loss.
//
// Expiry is judged by the host's boot-time clock (CLOCK_BOOTTIME, in ms)
// stored together with the kernel's boot id: a wall-clock step neither
// expires nor extends a lease, and after a reboot every old lease counts as
// expired. This is only sound on one host: a database on a network file
// system shared between machines is not supported (docs/backends.md).
//
// URI: sqlite:///absolute/path/locks.db[?synchronous=full|normal|off]
//                                     [&busy_timeout=5s]
//
// Waiting: a thread blocked in Acquire waits on an inotify watch of the
// -wal file of its own (WaitForRelease); asynchronous waiters share one
// thread per backend, made when first needed (wal_watcher.h).
//
// Thread-safety: the backend is thread-safe (one connection, one mutex).
#ifndef DLOCK_SRC_BACKENDS_SQLITE_SQLITE_BACKEND_H_
#define DLOCK_SRC_BACKENDS_SQLITE_SQLITE_BACKEND_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/uri.h"
#include "dlock/backend.h"

namespace dlock::sqlite {

// The store's clock: which boot this is, and milliseconds since it began.
struct BootTime {
  std::string boot_id;
  std::int64_t now_ms = 0;
};
// Reads /proc/sys/kernel/random/boot_id and CLOCK_BOOTTIME.
BootTime ReadBootTime();

enum class Synchronous { kFull, kNormal, kOff };

struct SqliteOptions {
  std::string path;  // absolute
  Synchronous synchronous = Synchronous::kFull;
  // How long one transaction waits for another process's write lock.
  std::chrono::milliseconds busy_timeout{5000};
  // Creates the file's directory (0700) if missing. Only for the default
  // path; an explicit URI naming a missing directory is an error.
  bool create_directory = false;
  // The store clock; tests replace it to play reboots. Null: ReadBootTime.
  std::function<BootTime()> store_clock;
};

// From a parsed sqlite:// URI. kInvalidArgument for a relative or empty
// path or an unknown parameter.
Result<SqliteOptions> OptionsFromUri(const internal::Uri& uri);

// Opens (creating if needed) the database and its schema. kUnavailable when
// the directory is missing or unwritable or the file is not a SQLite
// database, with the path and the reason in the message.
Result<std::unique_ptr<Backend>> Open(const SqliteOptions& options);

// For tests: how many asynchronous waiters `backend` (an SQLite backend;
// 0 for any other) has asked to be woken and were neither woken nor
// stopped.
std::size_t PendingNotifications(Backend& backend);

}  // namespace dlock::sqlite

#endif  // DLOCK_SRC_BACKENDS_SQLITE_SQLITE_BACKEND_H_
