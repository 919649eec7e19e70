// Opening an SQLite lock file: the URI, the file's location checked
// before SQLite would misreport it, the connection's settings, the schema
// created or an older one migrated, the statements prepared.
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "backends/sqlite/sqlite_backend_impl.h"
#include "backends/sqlite/sqlite_query.h"
#include "backends/sqlite/sqlite_sql.h"
#include "core/duration.h"

namespace dlock::sqlite {
namespace {

std::string DirectoryOf(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == 0 ? "/" : path.substr(0, slash);
}

// mkdir -p with mode 0700: the default database holds lock names that other
// users need not see.
Status MakeDirectories(const std::string& dir) {
  std::size_t pos = 1;
  while (true) {
    const std::size_t slash = dir.find('/', pos);
    const std::string part = dir.substr(0, slash);
    struct stat st;
    if (stat(part.c_str(), &st) != 0) {
      // EEXIST: another process created it between stat and mkdir.
      if (mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
        return UnavailableError("cannot create directory " + part + ": " + ErrnoText(errno));
      }
    }
    if (slash == std::string::npos) return Status::Ok();
    pos = slash + 1;
  }
}

// SQLite would report a missing directory as "unable to open database file"
// and a read-only one only at the first write, or not at all (it silently
// opens read-only); WAL also needs to create -wal and -shm files beside the
// database. So check up front and say which.
Status CheckLocation(const std::string& path, bool create_directory) {
  const std::string dir = DirectoryOf(path);
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT && create_directory) {
      DLOCK_RETURN_IF_ERROR(MakeDirectories(dir));
      if (stat(dir.c_str(), &st) != 0) {
        return UnavailableError("directory " + dir + ": " + ErrnoText(errno));
      }
    } else if (err == ENOENT) {
      return UnavailableError("directory " + dir + " does not exist");
    } else if (err == ENOTDIR) {
      return UnavailableError("directory " + dir +
                              " does not exist: a part of its path is not a directory");
    } else {
      return UnavailableError("directory " + dir + ": " + ErrnoText(err));
    }
  }
  if (!S_ISDIR(st.st_mode)) return UnavailableError(dir + " is not a directory");
  // AT_EACCESS: judge by the effective ids, as open() will.
  if (faccessat(AT_FDCWD, dir.c_str(), W_OK | X_OK, AT_EACCESS) != 0) {
    const int err = errno;
    if (err == EACCES || err == EPERM) {
      return UnavailableError("directory " + dir + " is not writable");
    }
    return UnavailableError("directory " + dir + " is not writable: " + ErrnoText(err));
  }
  if (stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return UnavailableError(path + " is a directory");
    if (!S_ISREG(st.st_mode)) return UnavailableError(path + " is not a regular file");
    if (faccessat(AT_FDCWD, path.c_str(), R_OK | W_OK, AT_EACCESS) != 0) {
      return UnavailableError("file " + path + " is not writable: " + ErrnoText(errno));
    }
  }
  return Status::Ok();
}

const char* SynchronousPragma(Synchronous s) {
  switch (s) {
    case Synchronous::kFull:
      return "PRAGMA synchronous = FULL";
    case Synchronous::kNormal:
      return "PRAGMA synchronous = NORMAL";
    case Synchronous::kOff:
      return "PRAGMA synchronous = OFF";
  }
  return "PRAGMA synchronous = FULL";
}

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace

Status SqliteBackend::Prepare(const char* sql, StmtHandle* out, std::string_view what) {
  sqlite3_stmt* raw = nullptr;
  const int rc = sqlite3_prepare_v3(db_.get(), sql, -1, SQLITE_PREPARE_PERSISTENT, &raw, nullptr);
  out->reset(raw);
  if (rc != SQLITE_OK) return FromSqlite(rc, db_.get(), what);
  return Status::Ok();
}

Status SqliteBackend::SetJournalModeWal(std::string_view what) {
  // Switching a new file to WAL takes a brief exclusive lock, and SQLite can
  // report SQLITE_BUSY for it without consulting the busy handler when many
  // processes open the same new file at once. Retry within busy_timeout.
  const auto deadline = std::chrono::steady_clock::now() + options_.busy_timeout;
  while (true) {
    StmtHandle stmt;
    DLOCK_RETURN_IF_ERROR(Prepare("PRAGMA journal_mode = WAL", &stmt, what));
    Query query(stmt.get());
    const int rc = query.Step();
    if (rc == SQLITE_ROW) {
      const std::string mode = Lower(query.Text(0));
      if (mode == "wal") return Status::Ok();
      return UnavailableError(std::string(what) + ": cannot switch " + options_.path +
                              " to WAL journal mode (it stays in '" + mode +
                              "' mode; is it on a network file system?)");
    }
    if ((rc & 0xff) != SQLITE_BUSY || std::chrono::steady_clock::now() >= deadline) {
      return FromSqlite(rc == SQLITE_DONE ? SQLITE_ERROR : rc, db_.get(), what);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// 0 when the file has no version yet.
Result<std::int64_t> SqliteBackend::ReadSchemaVersion(std::string_view what) {
  StmtHandle stmt;
  DLOCK_RETURN_IF_ERROR(Prepare(kSchemaVersionSql, &stmt, what));
  Query query(stmt.get());
  const int rc = query.Step();
  if (IsError(rc)) return FromSqlite(rc, db_.get(), what);
  return rc == SQLITE_ROW ? query.Int(0) : 0;
}

// Brings an older file to kSchemaVersion, one version at a time, inside the
// caller's write transaction: every process sees either the old layout or
// the new one.
Status SqliteBackend::Migrate(std::string_view what) {
  static constexpr const char* kSteps[] = {nullptr, kMigrateV1Sql, kMigrateV2Sql};
  DLOCK_ASSIGN_OR_RETURN(std::int64_t version, ReadSchemaVersion(what));
  while (version >= 1 && version < kSchemaVersion) {
    const int rc = sqlite3_exec(db_.get(), kSteps[version], nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) return FromSqlite(rc, db_.get(), what);
    DLOCK_ASSIGN_OR_RETURN(version, ReadSchemaVersion(what));
  }
  if (version != kSchemaVersion) {
    return FailedPreconditionError(std::string(what) + ": " + options_.path +
                                   " has lock schema version " + std::to_string(version) +
                                   ", this dlock reads version " + std::to_string(kSchemaVersion) +
                                   " (was it written by a newer dlock?)");
  }
  return Status::Ok();
}

Status SqliteBackend::CreateSchema(std::string_view what) {
  // IF NOT EXISTS inside BEGIN IMMEDIATE: many processes may open a new file
  // at once; each waits for the write lock, and all but the first find the
  // tables there.
  WriteTransaction txn = Transaction();
  int rc = txn.Begin();
  if (IsError(rc)) return FromSqlite(rc, db_.get(), what);
  rc = sqlite3_exec(db_.get(), kSchemaSql, nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return FromSqlite(rc, db_.get(), what);
  auto add_column = [&](const char* table, const char* column, const char* definition) {
    StmtHandle probe;
    const std::string probe_sql = std::string("SELECT count(*) FROM pragma_table_info('") + table +
                                  "') WHERE name = '" + column + "'";
    DLOCK_RETURN_IF_ERROR(Prepare(probe_sql.c_str(), &probe, what));
    if (sqlite3_step(probe.get()) == SQLITE_ROW && sqlite3_column_int(probe.get(), 0) == 0) {
      const std::string alter =
          std::string("ALTER TABLE ") + table + " ADD COLUMN " + column + " " + definition;
      const int alter_rc = sqlite3_exec(db_.get(), alter.c_str(), nullptr, nullptr, nullptr);
      if (alter_rc != SQLITE_OK) return FromSqlite(alter_rc, db_.get(), what);
    }
    return Status::Ok();
  };
  for (const auto& [table, column, definition] : kAddedColumns) {
    DLOCK_RETURN_IF_ERROR(add_column(table, column, definition));
  }
  rc = sqlite3_exec(db_.get(), kAddedIndexesSql, nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return FromSqlite(rc, db_.get(), what);
  DLOCK_ASSIGN_OR_RETURN(const std::int64_t version, ReadSchemaVersion(what));
  if (version == 1) {
    DLOCK_RETURN_IF_ERROR(add_column("dlock_locks", "lock_delay_ms", "INTEGER NOT NULL DEFAULT 0"));
  }
  DLOCK_RETURN_IF_ERROR(Migrate(what));
  rc = txn.Commit();
  if (IsError(rc)) return FromSqlite(rc, db_.get(), what);
  return Status::Ok();
}

Status SqliteBackend::Init(std::string_view what) {
  std::lock_guard lock(mu_);
  sqlite3* db = db_.get();
  sqlite3_extended_result_codes(db, 1);
  // SQLITE_OPEN_READWRITE falls back to read-only when the file is write
  // protected; a lock store that cannot write is useless, say so now.
  if (sqlite3_db_readonly(db, "main") == 1) {
    return UnavailableError(std::string(what) + ": file " + options_.path + " is not writable");
  }
  int rc = sqlite3_busy_timeout(db, static_cast<int>(options_.busy_timeout.count()));
  if (rc != SQLITE_OK) return FromSqlite(rc, db, what);
  rc = sqlite3_exec(db, SynchronousPragma(options_.synchronous), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return FromSqlite(rc, db, what);
  // Short-lived processes (`dlock exec`) are often the file's only
  // connection: keep the -wal file between them instead of deleting and
  // re-creating (and fsyncing) it each time. Truncating it at every
  // checkpoint (a limit of 0) costs steady-state throughput; 4 MiB is about
  // the size the default auto-checkpoint lets it reach anyway.
  int persist = 1;
  sqlite3_file_control(db, "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
  rc = sqlite3_exec(db, "PRAGMA journal_size_limit = 4194304", nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return FromSqlite(rc, db, what);
  // The first statement that reads the file: a non-database fails here.
  DLOCK_RETURN_IF_ERROR(SetJournalModeWal(what));
  DLOCK_RETURN_IF_ERROR(Prepare("BEGIN IMMEDIATE", &begin_, what));
  DLOCK_RETURN_IF_ERROR(Prepare("COMMIT", &commit_, what));
  DLOCK_RETURN_IF_ERROR(Prepare("ROLLBACK", &rollback_, what));
  DLOCK_RETURN_IF_ERROR(CreateSchema(what));
  DLOCK_RETURN_IF_ERROR(Prepare(kStateSql, &state_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kNextTokenSql, &next_token_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kInsertHolderSql, &insert_holder_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kRegrantSql, &regrant_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kPurgeHoldersSql, &purge_holders_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kWaitersSql, &waiters_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kReleaseSql, &release_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kHeldByAnyoneSql, &held_by_anyone_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kRenewSql, &renew_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kListSql, &list_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kEnqueueSql, &enqueue_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kPurgeQueueSql, &purge_queue_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kDequeueSql, &dequeue_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kKeepPlaceSql, &keep_place_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kHeldByOwnerSql, &held_by_owner_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kMarkDoneSql, &mark_done_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kIsDoneSql, &is_done_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kExpireDoneSql, &expire_done_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kRecordBreakSql, &record_break_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kExpireBreaksSql, &expire_breaks_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kBreaksSql, &breaks_, what));
  DLOCK_RETURN_IF_ERROR(Prepare("BEGIN", &read_begin_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kTurnHoldersSql, &turn_holders_, what));
  DLOCK_RETURN_IF_ERROR(Prepare(kTurnQueueSql, &turn_queue_, what));
  DLOCK_RETURN_IF_ERROR(Prepare("PRAGMA data_version", &data_version_, what));
  return Status::Ok();
}

Result<SqliteOptions> OptionsFromUri(const internal::Uri& uri) {
  auto bad = [&](const std::string& why) {
    return InvalidArgumentError("bad SQLite URI '" + uri.Redacted() + "': " + why +
                                "; expected sqlite:///absolute/path/locks.db");
  };
  if (uri.scheme != "sqlite") return bad("the scheme is not sqlite");
  if (!uri.hosts.empty() || !uri.user.empty() || uri.has_password) {
    return bad("'" + uri.hosts +
               "' is read as a host name, but the file is on this machine "
               "(a path needs three slashes)");
  }
  if (uri.path.empty() || uri.path.front() != '/') return bad("the path is missing");
  if (uri.path.back() == '/') return bad("the path names a directory, not a file");
  if (uri.path.find('\0') != std::string::npos) return bad("the path contains a NUL byte");
  DLOCK_RETURN_IF_ERROR(uri.CheckParams({"synchronous", "busy_timeout"}));

  SqliteOptions options;
  options.path = uri.path;
  if (const std::string* value = uri.Param("synchronous")) {
    const std::string v = Lower(*value);
    if (v == "full") {
      options.synchronous = Synchronous::kFull;
    } else if (v == "normal") {
      options.synchronous = Synchronous::kNormal;
    } else if (v == "off") {
      options.synchronous = Synchronous::kOff;
    } else {
      return InvalidArgumentError("bad synchronous value '" + *value +
                                  "' in SQLite URI: accepted: full, normal, off");
    }
  }
  if (const std::string* value = uri.Param("busy_timeout")) {
    Result<std::chrono::milliseconds> timeout = internal::ParseDuration(*value);
    if (!timeout.ok()) return timeout.status().WithContext("busy_timeout in SQLite URI");
    if (*timeout > std::chrono::hours(1)) {
      return InvalidArgumentError("busy_timeout " + *value +
                                  " in SQLite URI is too long: at most 1h");
    }
    options.busy_timeout = *timeout;
  }
  return options;
}

Result<std::unique_ptr<Backend>> Open(const SqliteOptions& options) {
  const std::string& path = options.path;
  const std::string what = "cannot open lock database " + path;
  if (path.empty() || path.front() != '/' || path.back() == '/') {
    return InvalidArgumentError(what + ": the path must be an absolute file name");
  }
  if (options.busy_timeout < std::chrono::milliseconds(0) ||
      options.busy_timeout > std::chrono::hours(1)) {
    return InvalidArgumentError(what + ": busy_timeout must be 0 to 1h, got " +
                                internal::FormatDuration(options.busy_timeout));
  }
  DLOCK_RETURN_IF_ERROR(CheckLocation(path, options.create_directory).WithContext(what));

  sqlite3* raw = nullptr;
  // NOMUTEX: the backend's own mutex serializes every use of the connection.
  const int rc =
      sqlite3_open_v2(path.c_str(), &raw,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  DbHandle db(raw);  // owns it even when the open failed
  if (rc != SQLITE_OK) return FromSqlite(rc, db.get(), what);
  auto backend = std::make_unique<SqliteBackend>(options, std::move(db));
  DLOCK_RETURN_IF_ERROR(backend->Init(what));
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace dlock::sqlite
