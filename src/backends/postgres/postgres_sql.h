// The PostgreSQL backend's SQL: the schema and every statement a session
// prepares, as text. postgres_backend.cc runs them; docs/backend-postgres.md
// explains them.
//
// In the statements, {t} is the locks table, {q} the queue table, {d} the
// run-once table and {b} the break records, all quoted identifiers.
//
// The sharing rule of backend.h (Admits in include/dlock/sharing.h) is
// written here in SQL: in kAcquireTemplate's `granted` (first by the
// statement's snapshot, holders + waiters ahead; then, on the locked row,
// holders only) and in the lean forms' limit-1 case of it. The conformance
// test SharingFollowsTheTableOfCases checks it against the same table of
// cases as the C++ copy (tests/conformance/sharing_cases.h).
#ifndef DLOCK_SRC_BACKENDS_POSTGRES_POSTGRES_SQL_H_
#define DLOCK_SRC_BACKENDS_POSTGRES_POSTGRES_SQL_H_

#include <chrono>
#include <cstdint>
#include <string>

namespace dlock::postgres {

// Bumped when the tables change shape; kept in the tables' comments. Schema
// 2 added the holder's ttl, lock-delay and label, the waiter's limit and
// label, and the run-once table. Schema 3 added the token sequence, from
// which a key's row takes its first token, so that rows of free keys can
// be deleted (kSweepSql), and the run-once records' retention. Older tables are migrated in place
// (CreateTablesSql, under the same advisory lock as creation).
inline constexpr const char* kLocksComment = "dlock locks, schema 3";
inline constexpr const char* kLocksCommentV2 = "dlock locks, schema 2";
inline constexpr const char* kQueueComment = "dlock wait queue, schema 2";
inline constexpr const char* kDoneComment = "dlock run-once marks, schema 3";
inline constexpr const char* kDoneCommentV2 = "dlock run-once marks, schema 2";
// Added within schema 3 (an older dlock of schema 3 never reads it).
inline constexpr const char* kBreaksComment = "dlock break records, schema 3";
inline constexpr const char* kLocksCommentV1 = "dlock locks, schema 1";
inline constexpr const char* kQueueCommentV1 = "dlock wait queue, schema 1";

// The backend's tables, as quoted identifiers.
struct TableNames {
  std::string locks;  // {t}
  std::string queue;  // {q}
  std::string done;   // {d}
  std::string tokens;  // {s}, the token sequence
  std::string breaks;  // {b}, the break records
};

// Session set-up, one round trip; $1, $2, $3, $4 the locks, queue, done and
// breaks tables' names. Columns: locks exists, its comment, queue exists,
// its comment, (a synchronous_commit fix-up), done exists, its comment,
// breaks exists, its comment.
extern const char* const kCheckSql;

// Creates the missing tables and migrates schema-1 ones, in one transaction
// under the advisory lock `lock_id`.
std::string CreateTablesSql(const TableNames& tables, std::uint64_t lock_id);

// Deletes up to `batch` rows of keys nobody holds and nobody was granted
// for `idle`, in one transaction that locks out every grant meanwhile (see
// the comment on kSweepSql), and leaves the number deleted in the setting
// dlock.swept; then reads it back. Text for the simple query protocol.
std::string SweepSql(const TableNames& tables, int batch, std::chrono::milliseconds idle);

// PREPAREs every statement the backend runs: dlock_acquire,
// dlock_acquire_once, dlock_acquire_lean, dlock_acquire_once_lean,
// dlock_acquire_once_fresh, dlock_release, dlock_release_lean,
// dlock_renew, dlock_keep_places, dlock_list, dlock_ping, dlock_waiters,
// dlock_mark_done, dlock_is_done, dlock_count, dlock_record_break,
// dlock_breaks (the four listings also as <name>_to_end, for a prefix no
// key is past), dlock_sweep_due. One DO block, each statement prepared by
// its own EXECUTE, so that its source text is its own.
std::string PrepareStatementsSql(const TableNames& tables);

}  // namespace dlock::postgres

#endif  // DLOCK_SRC_BACKENDS_POSTGRES_POSTGRES_SQL_H_
