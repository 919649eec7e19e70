// The MariaDB backend's SQL: the schema, the stored procedures that make
// each operation one round trip and one transaction, and the plain
// statements, as text. mariadb_schema.cc creates them; mariadb_backend.cc
// runs them; docs/backend-mariadb.md explains them.
//
// In the text, {t} is the locks table (one row per key in use, with its
// first holder: the row every change to the key locks first), {h} the
// further holders of shared keys, {q} the wait queue, {d} the run-once
// records, {b} the break records, {s} the token sequence, and {p_acquire}
// ... the procedures; all quoted identifiers.
//
// The sharing rule of backend.h (Admits in include/dlock/sharing.h) is
// written here in SQL, in the acquire procedure; the conformance test
// SharingFollowsTheTableOfCases checks it against the same table of cases
// as the C++ copy (tests/conformance/sharing_cases.h).
#ifndef DLOCK_SRC_BACKENDS_MARIADB_MARIADB_SQL_H_
#define DLOCK_SRC_BACKENDS_MARIADB_MARIADB_SQL_H_

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace dlock::mariadb {

// Kept in every table's and procedure's COMMENT; bumped when they change.
inline constexpr const char* kSchemaComment = "dlock schema 1";

// The names of everything dlock keeps in the database for one `table=`.
struct SchemaNames {
  explicit SchemaNames(std::string_view table);
  std::string locks, sharers, queue, done, breaks, tokens;  // quoted
  std::string acquire, release, renew, mark_done, record_break, sweep, sweep_from;  // quoted
  // The same, unquoted, for information_schema lookups.
  std::vector<std::string> tables, procedures;
};

// The key of the row Ping writes (a NUL byte first: no lock key has one).
inline constexpr std::string_view kPingKey{"\0dlock ping", 11};

// Session settings, one statement: UTC for the clock arithmetic, READ
// COMMITTED (no gap locks; each statement reads what committed before it),
// lock waits bounded by `lock_wait_s` seconds, and a strict sql_mode.
std::string SessionSql(int lock_wait_s);

// Does each table and procedure exist, and with which comment? One row per
// object found: (name, comment). `database` is a literal.
std::string FindSchemaSql(const SchemaNames& names);

// The statements that create what is missing, in order (each one a round
// trip; CREATE ... IF NOT EXISTS and CREATE OR REPLACE, safe to repeat).
std::vector<std::string> CreateSchemaSql(const SchemaNames& names);

// The lean forms (mariadb_sql.cc): an exclusive attempt as one upsert of
// the key's row, and the release of an exclusive holding, each prepared
// once per session (PrepareLeanSql, after the tables exist) and run in one
// round trip with their arguments (the connection takes several statements
// at once). `key`, `owner` and `label` are raw, not literals.
std::string PrepareLeanSql(const SchemaNames& n);
std::string LeanAcquireSql(const std::string& key, const std::string& owner, long long ttl_ms,
                           long long lock_delay_ms, const std::string& label);
std::string LeanReleaseSql(const std::string& key, const std::string& owner);

// Statements; the arguments are SQL literals (mariadb_conn.h).
std::string CallAcquire(const SchemaNames& n, const std::string& key, const std::string& owner,
                        long long ttl_ms, long long lock_delay_ms, const std::string& label,
                        long long limit, long long queue_ttl_ms);
std::string CallRelease(const SchemaNames& n, const std::string& key, const std::string& owner);
// `leases`: a JSON array of ["<hex key>", "<owner>", ttl_ms], unquoted.
std::string CallRenew(const SchemaNames& n, const std::string& leases);
std::string CallMarkDone(const SchemaNames& n, const std::string& key, const std::string& owner,
                         const std::string& keep_ms);
std::string CallRecordBreak(const SchemaNames& n, const std::string& key, const std::string& owner,
                            unsigned long long token, const std::string& label,
                            const std::string& by, unsigned long long break_token,
                            const std::string& keep_ms);
// One stretch of the sweep: the `batch` rows after the key `after` (a
// literal; '' for the start), stopped by the server itself after `limit`
// (max_statement_time): a caller that gave up at its deadline leaves
// nothing running.
std::string CallSweepFrom(const SchemaNames& n, const std::string& after, int batch,
                          std::chrono::milliseconds limit);
// Takes (without waiting: 1 if taken, 0 if another session has it) or lets
// go of the store's sweeper name, a user lock of the session: one sweeper
// at a time per store (database and table).
std::string SweeperLockSql(const SchemaNames& n, bool take);
std::string PingSql(const SchemaNames& n);
// The key range [from, to) (`to` may be "NULL": no end).
std::string ListSql(const SchemaNames& n, const std::string& from, const std::string& to);
std::string WaitersSql(const SchemaNames& n, const std::string& from, const std::string& to);
std::string CountSql(const SchemaNames& n, const std::string& from, const std::string& to);
std::string BreaksSql(const SchemaNames& n, const std::string& from, const std::string& to);
std::string IsDoneSql(const SchemaNames& n, const std::string& key);

}  // namespace dlock::mariadb

#endif  // DLOCK_SRC_BACKENDS_MARIADB_MARIADB_SQL_H_
