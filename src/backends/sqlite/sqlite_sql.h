// The SQL the SQLite backend runs: the file's layout (and how an older
// file is brought to it), and every statement, each prepared once per
// connection (SqliteBackend::Init).
#ifndef DLOCK_SRC_BACKENDS_SQLITE_SQLITE_SQL_H_
#define DLOCK_SRC_BACKENDS_SQLITE_SQLITE_SQL_H_

#include <cstdint>

namespace dlock::sqlite {

// Bumped when the layout changes; kept in dlock_meta rather than PRAGMA
// user_version so that a database shared with another application (which
// may use user_version itself) is not misread. Version 1 kept the holder and
// the token counter in one dlock_locks row per key (one holder per key);
// version 2 kept a counter per key in dlock_tokens, one row per key ever
// granted; version 3 keeps one counter for the whole store, so a released
// key leaves no row behind. Older files are migrated in place when opened
// (kMigrateV1Sql, kMigrateV2Sql), and the table the older dlock wrote its
// counters to is dropped: an older dlock that still has the file open then
// fails ("no such table") instead of granting a token below one already
// granted, and one that opens it later refuses the schema version.
inline constexpr std::int64_t kSchemaVersion = 3;

// dlock_meta 'last_token': the store's one token counter, the last token
// granted on any key. Every grant takes the next value, so a key's tokens
// increase however often its rows come and go.
//
// dlock_holders: one row per holding. A holding counts (for the sharing
// rule) iff boot_id is the current boot and expires_at_ms + lock_delay_ms >
// now; it is held iff expires_at_ms > now. Released holdings are deleted;
// lapsed ones are deleted by the next grant on their key.
//
// dlock_queue: one row per waiter, live iff boot_id is the current boot and
// expires_at_ms > now.
//
// dlock_done: one run-once record per key, kept until keep_until_unix_ms
// (wall-clock time: a retention of days is a calendar matter; NULL: kept
// for ever, as every record written before version 3).
//
// dlock_breaks: one row per holding a break evicted (BreakRecord), kept
// until keep_until_unix_ms as run-once records are. Added within version
// 3: a table an older dlock of the same version never reads.
inline constexpr const char* kSchemaSql = R"sql(
CREATE TABLE IF NOT EXISTS dlock_meta (
  name  TEXT PRIMARY KEY NOT NULL,
  value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO dlock_meta (name, value) VALUES ('schema_version', 3)
  ON CONFLICT (name) DO NOTHING;
INSERT INTO dlock_meta (name, value) VALUES ('last_token', 0)
  ON CONFLICT (name) DO NOTHING;
CREATE TABLE IF NOT EXISTS dlock_holders (
  key            TEXT NOT NULL,
  owner          TEXT NOT NULL,
  token          INTEGER NOT NULL,
  boot_id        TEXT NOT NULL,
  expires_at_ms  INTEGER NOT NULL,
  acquired_at_ms INTEGER NOT NULL,
  lock_delay_ms  INTEGER NOT NULL DEFAULT 0,
  ttl_ms         INTEGER NOT NULL DEFAULT 0,
  holder_limit   INTEGER NOT NULL DEFAULT 1,
  label          TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (key, owner)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dlock_queue (
  key           TEXT NOT NULL,
  owner         TEXT NOT NULL,
  seq           INTEGER NOT NULL,
  boot_id       TEXT NOT NULL,
  expires_at_ms INTEGER NOT NULL,
  PRIMARY KEY (key, owner)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS dlock_queue_by_seq ON dlock_queue (key, seq);
CREATE TABLE IF NOT EXISTS dlock_done (
  key        TEXT PRIMARY KEY NOT NULL,
  owner      TEXT NOT NULL,
  token      INTEGER NOT NULL,
  done_at_ms INTEGER NOT NULL,
  keep_until_unix_ms INTEGER
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dlock_breaks (
  key         TEXT NOT NULL,
  at_unix_ms  INTEGER NOT NULL,
  owner       TEXT NOT NULL,
  token       INTEGER NOT NULL,
  label       TEXT NOT NULL,
  broken_by   TEXT NOT NULL,
  break_token INTEGER NOT NULL,
  keep_until_unix_ms INTEGER
);
CREATE INDEX IF NOT EXISTS dlock_breaks_by_key ON dlock_breaks (key);
CREATE INDEX IF NOT EXISTS dlock_breaks_by_expiry ON dlock_breaks (keep_until_unix_ms)
  WHERE keep_until_unix_ms IS NOT NULL;
)sql";

// Columns added after a table was first released, for files created by an
// older dlock: (table, column, definition).
inline constexpr const char* kAddedColumns[][3] = {
    {"dlock_queue", "holder_limit", "INTEGER NOT NULL DEFAULT 1"},
    {"dlock_queue", "label", "TEXT NOT NULL DEFAULT ''"},
    {"dlock_queue", "since_ms", "INTEGER"},
    {"dlock_done", "keep_until_unix_ms", "INTEGER"},
};

// After kAddedColumns: the index that finds run-once records past their
// retention without reading the others.
inline constexpr const char* kAddedIndexesSql = R"sql(
CREATE INDEX IF NOT EXISTS dlock_done_by_expiry ON dlock_done (keep_until_unix_ms)
  WHERE keep_until_unix_ms IS NOT NULL;
)sql";

// Version 1 -> 2, in the transaction that checked the version (version 3
// follows at once): the counters move to dlock_tokens, the live holders to
// dlock_holders (their ttl unknown, 0). dlock_locks.lock_delay_ms was added during version 1 (the
// migration adds it first where it is missing).
inline constexpr const char* kMigrateV1Sql = R"sql(
CREATE TABLE dlock_tokens (key TEXT PRIMARY KEY NOT NULL, token INTEGER NOT NULL) WITHOUT ROWID;
INSERT INTO dlock_tokens (key, token) SELECT key, token FROM dlock_locks;
INSERT INTO dlock_holders (key, owner, token, boot_id, expires_at_ms, acquired_at_ms,
                           lock_delay_ms, ttl_ms, holder_limit, label)
SELECT key, owner, token, boot_id, expires_at_ms, coalesce(acquired_at_ms, expires_at_ms),
       lock_delay_ms, 0, 1, ''
FROM dlock_locks
WHERE owner IS NOT NULL AND boot_id IS NOT NULL AND expires_at_ms IS NOT NULL;
DROP TABLE dlock_locks;
UPDATE dlock_meta SET value = 2 WHERE name = 'schema_version';
)sql";

// Version 2 -> 3: the store's counter starts at the highest token any key
// was ever granted (a counter, a holding, a run-once record), so no key's
// next token goes down; then the per-key counters go.
inline constexpr const char* kMigrateV2Sql = R"sql(
UPDATE dlock_meta SET value = max(value,
    coalesce((SELECT max(token) FROM dlock_tokens), 0),
    coalesce((SELECT max(token) FROM dlock_holders), 0),
    coalesce((SELECT max(token) FROM dlock_done), 0))
  WHERE name = 'last_token';
DROP TABLE dlock_tokens;
UPDATE dlock_meta SET value = 3 WHERE name = 'schema_version';
)sql";

inline constexpr const char* kSchemaVersionSql =
    "SELECT value FROM dlock_meta WHERE name = 'schema_version'";

// Everything one grant decision needs about a key, read in one statement of
// two rows. Flat aggregates over the key's index range only: a FROM-clause
// subquery would be materialized into a temporary table on every grant,
// which doubled the cost of an uncontended acquire.
// Row with column 0 = 0, the holdings (C: the holding counts):
//  1 mine:       the token of :owner's unexpired holding (NULL: none)
//  2 mine_delay: 1 if :owner has a holding that expired but still counts
//  3 holders:    holdings that count (held, or expired within lock-delay)
//  4 holder_lim: the smallest limit among them
//  5 wait_ms:    until the first of them stops counting
//  6 stale:      holding rows that no longer count
// Row with column 0 = 1, the queue (L: the waiter is live):
//  1 ahead:      live waiters queued before :owner (all of them when
//                :owner has no live place)
//  2 ahead_lim:  the smallest limit among those
//  3 stale:      queue rows no longer live
//  4 queued:     1 if :owner has a queue row, live or not
inline constexpr const char* kStateSql = R"sql(
SELECT 0,
  max(token) FILTER (WHERE boot_id = :boot AND expires_at_ms + lock_delay_ms > :now_ms
                       AND owner = :owner AND expires_at_ms > :now_ms),
  coalesce(max(owner = :owner AND expires_at_ms <= :now_ms)
             FILTER (WHERE boot_id = :boot AND expires_at_ms + lock_delay_ms > :now_ms), 0),
  count(*) FILTER (WHERE boot_id = :boot AND expires_at_ms + lock_delay_ms > :now_ms),
  min(holder_limit) FILTER (WHERE boot_id = :boot AND expires_at_ms + lock_delay_ms > :now_ms),
  min(expires_at_ms + lock_delay_ms)
    FILTER (WHERE boot_id = :boot AND expires_at_ms + lock_delay_ms > :now_ms) - :now_ms,
  count(*) FILTER (WHERE NOT (boot_id = :boot AND expires_at_ms + lock_delay_ms > :now_ms))
FROM dlock_holders WHERE key = :key
UNION ALL
SELECT 1,
  count(*) FILTER (WHERE boot_id = :boot AND expires_at_ms > :now_ms AND owner <> :owner
                     AND seq < coalesce((SELECT seq FROM dlock_queue
                                         WHERE key = :key AND owner = :owner AND boot_id = :boot
                                           AND expires_at_ms > :now_ms),
                                        9223372036854775807)),
  min(holder_limit) FILTER (WHERE boot_id = :boot AND expires_at_ms > :now_ms AND owner <> :owner
                              AND seq < coalesce((SELECT seq FROM dlock_queue
                                                  WHERE key = :key AND owner = :owner
                                                    AND boot_id = :boot
                                                    AND expires_at_ms > :now_ms),
                                                 9223372036854775807)),
  count(*) FILTER (WHERE NOT (boot_id = :boot AND expires_at_ms > :now_ms)),
  coalesce(max(owner = :owner), 0),
  NULL, NULL
FROM dlock_queue WHERE key = :key
)sql";

// The store's token counter: one more than the last token of any key.
inline constexpr const char* kNextTokenSql = R"sql(
UPDATE dlock_meta SET value = value + 1 WHERE name = 'last_token' RETURNING value
)sql";

inline constexpr const char* kInsertHolderSql = R"sql(
INSERT INTO dlock_holders (key, owner, token, boot_id, expires_at_ms, acquired_at_ms,
                           lock_delay_ms, ttl_ms, holder_limit, label)
VALUES (:key, :owner, :token, :boot, :now_ms + :ttl_ms, :now_ms, :lock_delay_ms, :ttl_ms,
        :limit, :label)
)sql";

// A retried grant: the same token, a fresh expiry.
inline constexpr const char* kRegrantSql = R"sql(
UPDATE dlock_holders SET expires_at_ms = :now_ms + :ttl_ms, ttl_ms = :ttl_ms,
  lock_delay_ms = :lock_delay_ms
WHERE key = :key AND owner = :owner
)sql";

inline constexpr const char* kPurgeHoldersSql = R"sql(
DELETE FROM dlock_holders
WHERE key = :key AND (boot_id IS NOT :boot OR expires_at_ms + lock_delay_ms <= :now_ms)
)sql";

// The wait queue: waiters are served in arrival order, so that a process
// that releases and re-acquires in a loop cannot starve the others. An entry
// lives queue_ttl past its owner's last attempt (judged by the store clock),
// so a waiter that dies leaves the queue by itself. A lapsed entry that comes
// back goes to the end.
inline constexpr const char* kEnqueueSql = R"sql(
INSERT INTO dlock_queue (key, owner, seq, boot_id, expires_at_ms, holder_limit, label, since_ms)
VALUES (:key, :owner, (SELECT coalesce(max(seq), 0) + 1 FROM dlock_queue WHERE key = :key),
        :boot, :now_ms + :queue_ttl_ms, :limit, :label, :now_ms)
ON CONFLICT (key, owner) DO UPDATE SET
  seq = CASE WHEN dlock_queue.boot_id IS NOT excluded.boot_id
               OR dlock_queue.expires_at_ms <= :now_ms
             THEN excluded.seq ELSE dlock_queue.seq END,
  since_ms = CASE WHEN dlock_queue.boot_id IS NOT excluded.boot_id
                    OR dlock_queue.expires_at_ms <= :now_ms
                  THEN excluded.since_ms ELSE dlock_queue.since_ms END,
  boot_id = excluded.boot_id,
  expires_at_ms = excluded.expires_at_ms,
  holder_limit = excluded.holder_limit,
  label = excluded.label
)sql";

inline constexpr const char* kPurgeQueueSql = R"sql(
DELETE FROM dlock_queue
WHERE key = :key AND (boot_id IS NOT :boot OR expires_at_ms <= :now_ms)
)sql";

inline constexpr const char* kDequeueSql =
    "DELETE FROM dlock_queue WHERE key = :key AND owner = :owner";

// KeepPlaces: a live place lives another queue_ttl. A lapsed one is left as
// it is (the waiter's next attempt re-takes it, at the back), and holdings
// are another table.
inline constexpr const char* kKeepPlaceSql = R"sql(
UPDATE dlock_queue SET expires_at_ms = :now_ms + :queue_ttl_ms
WHERE key = :key AND owner = :owner AND boot_id = :boot AND expires_at_ms > :now_ms
)sql";

inline constexpr const char* kHeldByOwnerSql = R"sql(
SELECT token FROM dlock_holders
WHERE key = :key AND owner = :owner AND boot_id = :boot AND expires_at_ms > :now_ms
)sql";

inline constexpr const char* kMarkDoneSql = R"sql(
INSERT INTO dlock_done (key, owner, token, done_at_ms, keep_until_unix_ms)
VALUES (:key, :owner, :token, :now_ms, :keep_until)
ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, token = excluded.token,
  done_at_ms = excluded.done_at_ms, keep_until_unix_ms = excluded.keep_until_unix_ms
)sql";

inline constexpr const char* kIsDoneSql = R"sql(
SELECT 1 FROM dlock_done
WHERE key = :key AND (keep_until_unix_ms IS NULL OR keep_until_unix_ms > :unix_ms)
)sql";

// With every record written, a few past their retention go (by the index).
inline constexpr const char* kExpireDoneSql = R"sql(
DELETE FROM dlock_done WHERE key IN (
  SELECT key FROM dlock_done WHERE keep_until_unix_ms <= :unix_ms LIMIT 16)
)sql";

// A break record, and a few records past their retention with it.
inline constexpr const char* kRecordBreakSql = R"sql(
INSERT INTO dlock_breaks (key, at_unix_ms, owner, token, label, broken_by, break_token,
                          keep_until_unix_ms)
VALUES (:key, :unix_ms, :owner, :token, :label, :by, :break_token, :keep_until)
)sql";

inline constexpr const char* kExpireBreaksSql = R"sql(
DELETE FROM dlock_breaks WHERE rowid IN (
  SELECT rowid FROM dlock_breaks WHERE keep_until_unix_ms <= :unix_ms LIMIT 16)
)sql";

inline constexpr const char* kBreaksSql = R"sql(
SELECT key, owner, token, label, broken_by, break_token, at_unix_ms FROM dlock_breaks
WHERE key >= :lo AND (:hi IS NULL OR key < :hi)
  AND (keep_until_unix_ms IS NULL OR keep_until_unix_ms > :unix_ms)
ORDER BY key, rowid
)sql";

// Deletes this owner's holding unless it expired and is still inside its
// lock-delay (an unclean end keeps the key closed for the delay, even if the
// late holder then releases). Returns whether it was still held.
inline constexpr const char* kReleaseSql = R"sql(
DELETE FROM dlock_holders
WHERE key = :key AND owner = :owner
  AND NOT (boot_id = :boot AND expires_at_ms <= :now_ms AND expires_at_ms + lock_delay_ms > :now_ms)
RETURNING boot_id = :boot AND expires_at_ms > :now_ms
)sql";

inline constexpr const char* kHeldByAnyoneSql = R"sql(
SELECT 1 FROM dlock_holders
WHERE key = :key AND boot_id = :boot AND expires_at_ms > :now_ms
LIMIT 1
)sql";

inline constexpr const char* kRenewSql = R"sql(
UPDATE dlock_holders SET expires_at_ms = :now_ms + :ttl_ms, ttl_ms = :ttl_ms
WHERE key = :key AND owner = :owner AND boot_id = :boot AND expires_at_ms > :now_ms
)sql";

// A key range rather than LIKE or GLOB: keys may hold '%', '_', '*' and bytes
// that are not UTF-8, and TEXT compares with memcmp (BINARY collation).
inline constexpr const char* kListSql = R"sql(
SELECT key, owner, token, expires_at_ms - :now_ms, ttl_ms, :now_ms - acquired_at_ms,
       holder_limit, label
FROM dlock_holders
WHERE key >= :lo AND (:hi IS NULL OR key < :hi)
  AND boot_id = :boot AND expires_at_ms > :now_ms
ORDER BY key, token
)sql";

inline constexpr const char* kWaitersSql = R"sql(
SELECT key, owner, holder_limit, label, :now_ms - since_ms FROM dlock_queue
WHERE key >= :lo AND (:hi IS NULL OR key < :hi)
  AND boot_id = :boot AND expires_at_ms > :now_ms
ORDER BY key, seq
)sql";

// For the watcher of asynchronous waiters (wal_watcher.h), in one read
// transaction: the holdings of `key` that count, then its live queue in
// arrival order, read only as far as someone could be granted (the index
// on (key, seq) serves the order: no sort, so stepping stops early). With
// each row, how long until it stops counting.
inline constexpr const char* kTurnHoldersSql = R"sql(
SELECT owner, holder_limit, expires_at_ms + lock_delay_ms - :now_ms, expires_at_ms > :now_ms
FROM dlock_holders
WHERE key = :key AND boot_id = :boot AND expires_at_ms + lock_delay_ms > :now_ms
)sql";
inline constexpr const char* kTurnQueueSql = R"sql(
SELECT owner, holder_limit, expires_at_ms - :now_ms FROM dlock_queue
WHERE key = :key AND boot_id = :boot AND expires_at_ms > :now_ms
ORDER BY seq
)sql";

inline constexpr const char* kStoredObjectsSql = R"sql(
SELECT (SELECT count(*) FROM dlock_holders WHERE key >= :lo AND (:hi IS NULL OR key < :hi))
     + (SELECT count(*) FROM dlock_queue WHERE key >= :lo AND (:hi IS NULL OR key < :hi))
     + (SELECT count(*) FROM dlock_done WHERE key >= :lo AND (:hi IS NULL OR key < :hi))
     + (SELECT count(*) FROM dlock_breaks WHERE key >= :lo AND (:hi IS NULL OR key < :hi))
)sql";

}  // namespace dlock::sqlite

#endif  // DLOCK_SRC_BACKENDS_SQLITE_SQLITE_SQL_H_
