#include "backends/postgres/postgres_backend.h"

#include <libpq-fe.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "backends/postgres/pg_listener.h"
#include "backends/postgres/pg_util.h"
#include "core/duration.h"

namespace dlock::postgres {
namespace {

using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

// Bumped when the tables change shape; kept in the tables' comments. Schema
// 2 added the holder's ttl, lock-delay and label, the waiter's limit and
// label, and the run-once table; a schema-1 table is migrated in place
// (kCreateSql, under the same advisory lock as creation).
constexpr const char* kLocksComment = "dlock locks, schema 2";
constexpr const char* kQueueComment = "dlock wait queue, schema 2";
constexpr const char* kDoneComment = "dlock run-once marks, schema 2";
constexpr const char* kLocksCommentV1 = "dlock locks, schema 1";
constexpr const char* kQueueCommentV1 = "dlock wait queue, schema 1";

// A renewal waits at most this fraction of its shortest TTL (and at least
// kMinRenewBudget): a renewal answered later is useless anyway (the core
// retries at ttl/10), and one stuck for long would hold up loss detection.
constexpr int kRenewBudgetDivisor = 10;
constexpr milliseconds kMinRenewBudget{20};
// A waiting acquire that begins this soon after this backend's own release
// of the key leaves the nudge to the head that release told (see
// PostgresBackend::NoteReleased).
constexpr milliseconds kJustReleased{1000};

// {t} is the locks table, {q} the queue table, {d} the run-once table, all
// quoted identifiers.
//
// Session set-up, one round trip: do the tables exist and are they dlock's;
// and a session that would commit asynchronously (synchronous_commit=off
// could lose the last grants, and so reissue a token, in a server crash)
// commits durably instead.
constexpr const char* kCheckSql = R"sql(
SELECT to_regclass($1) IS NOT NULL, obj_description(to_regclass($1), 'pg_class'),
       to_regclass($2) IS NOT NULL, obj_description(to_regclass($2), 'pg_class'),
       CASE WHEN current_setting('synchronous_commit') = 'off'
            THEN set_config('synchronous_commit', 'on', false) END,
       to_regclass($3) IS NOT NULL, obj_description(to_regclass($3), 'pg_class')
)sql";

// Many clients may start at once against an empty database: the advisory
// lock makes them create the tables one after the other, and the second
// finds them there (CREATE TABLE IF NOT EXISTS alone can fail on a race in
// the catalogs). A schema-1 table (from the previous dlock) gains the new
// columns, with defaults that keep its rows' meaning (no lock-delay, limit
// 1, no label), and its comment says schema 2 (a schema-1 dlock then refuses
// to open it; one already running keeps excluding correctly, since holders
// still live in the same rows, but ignores lock-delays). New tables are
// ANALYZEd at once: one never analyzed is planned from its page count
// alone, and the queue's pages fill with dead places within seconds of
// contention (a 4-process hand-off ran ~30 % slower until autovacuum's
// first ANALYZE, docs/benchmarks-postgres.md).
constexpr const char* kCreateSql = R"sql(
BEGIN;
SELECT pg_advisory_xact_lock({lock_id});
DO $dlock$
BEGIN
  IF to_regclass('{t}') IS NULL THEN
    CREATE TABLE {t} (
      key           bytea PRIMARY KEY,
      owner         text,
      token         bigint NOT NULL CHECK (token > 0),
      expires_at    timestamptz,
      acquired_at   timestamptz,
      ttl_ms        bigint,
      lock_delay_ms bigint NOT NULL DEFAULT 0,
      label         text,
      holder_limit  bigint NOT NULL DEFAULT 1,
      holder_token  bigint,
      sharers       jsonb NOT NULL DEFAULT '[]'
    ) WITH (fillfactor = 90);
    COMMENT ON TABLE {t} IS '{locks_comment}';
    ANALYZE {t};
  ELSIF obj_description(to_regclass('{t}'), 'pg_class') = '{locks_comment_v1}' THEN
    ALTER TABLE {t} ADD COLUMN IF NOT EXISTS ttl_ms bigint,
                    ADD COLUMN IF NOT EXISTS lock_delay_ms bigint NOT NULL DEFAULT 0,
                    ADD COLUMN IF NOT EXISTS label text,
                    ADD COLUMN IF NOT EXISTS holder_limit bigint NOT NULL DEFAULT 1,
                    ADD COLUMN IF NOT EXISTS holder_token bigint,
                    ADD COLUMN IF NOT EXISTS sharers jsonb NOT NULL DEFAULT '[]';
    -- Schema 1 kept one holder per key, whose token was the counter.
    UPDATE {t} SET holder_token = token WHERE owner IS NOT NULL;
    COMMENT ON TABLE {t} IS '{locks_comment}';
  END IF;
  IF to_regclass('{q}') IS NULL THEN
    CREATE UNLOGGED TABLE {q} (
      key          bytea NOT NULL,
      owner        text NOT NULL,
      enqueued_at  timestamptz NOT NULL,
      expires_at   timestamptz NOT NULL,
      holder_limit bigint NOT NULL DEFAULT 1,
      label        text NOT NULL DEFAULT '',
      PRIMARY KEY (key, owner)
    );
    COMMENT ON TABLE {q} IS '{queue_comment}';
    ANALYZE {q};
  ELSIF obj_description(to_regclass('{q}'), 'pg_class') = '{queue_comment_v1}' THEN
    ALTER TABLE {q} ADD COLUMN IF NOT EXISTS holder_limit bigint NOT NULL DEFAULT 1,
                    ADD COLUMN IF NOT EXISTS label text NOT NULL DEFAULT '';
    COMMENT ON TABLE {q} IS '{queue_comment}';
  END IF;
  IF to_regclass('{d}') IS NULL THEN
    CREATE TABLE {d} (
      key     bytea PRIMARY KEY,
      owner   text NOT NULL,
      token   bigint NOT NULL,
      done_at timestamptz NOT NULL
    );
    COMMENT ON TABLE {d} IS '{done_comment}';
  END IF;
END
$dlock$;
COMMIT;
)sql";

// Holders. The first holder of a key lives in the key's row itself (owner,
// holder_token, expires_at, acquired_at, ttl_ms, lock_delay_ms, label,
// holder_limit: "the primary"), so an exclusive lock is the same one-row
// HOT update as before sharing. Further holders of a shared key (readers,
// semaphore permits) live in the same row's `sharers`, a jsonb array of
// {"o": owner, "t": token, "x": expires_at, "u": expires_at + lock_delay,
//  "a": acquired_at, "ttl": ttl_ms, "d": lock_delay_ms, "l": limit,
//  "b": label}. Keeping every holder in the one row is what makes the
// sharing rule exact: the upsert's WHERE and SET are evaluated on the
// latest row version under its row lock, so a concurrent grant is always
// seen (a second table read by the statement's snapshot would not be).
// A holding counts (for the sharing rule) while expires_at + lock_delay is
// ahead of the server's clock; it is held while expires_at is.

// Acquire, one statement, built from this one template for both prepared
// forms: dlock_acquire (a waiting attempt, with the queue CTEs) and
// dlock_acquire_once (a single attempt, the uncontended fast path: the queue
// is only read). $1 key, $2 owner, $3 ttl_ms, $4 lock_delay_ms, $5 label,
// $6 limit; waiting only: $7 queue_ttl_ms, $8 channel, $9 key hash text.
//  - c:      the statement's one reading of the server's clock. Taken
//            before any row lock wait, so expiry is judged late, never
//            early, and every expression below agrees on it.
//  - held:   the holdings that count, from the statement's snapshot.
//  - mine:   this owner's live place in the queue.
//  - ahead:  live waiters that go before us (all of them for a single
//            attempt or a first-time waiter), their number and smallest
//            limit.
//  - granted: the upsert, attempted only when we hold the key live (a
//            retried request gets the same token back) or when the sharing
//            rule admits us by the snapshot and the queue. Its WHERE
//            re-checks the rule on the latest row version under the row
//            lock (the queue part only decides who may try: fairness, never
//            exclusion). A new grant takes token + 1 and goes to the primary
//            when no primary holding counts, else into sharers; lapsed
//            sharers are dropped on the way.
//  - enqueued: a refused waiter takes (or keeps, while live) its place.
//  - dequeued: a granted owner leaves the queue, with any expired entries.
//  - told:   a grant tells the next waiter in line (NOTIFY, payload
//            "<key hash> <its owner> <ttl_ms>") when this lease will expire:
//            it may have been refused while the key was free but it was not
//            yet first, and so knows no holder's expiry to wake at. Only
//            when its place outlives the lease: a live waiter attempts again
//            before its place lapses, and so learns the expiry in time by
//            itself (one NOTIFY, which signals every listening backend,
//            saved per hand-off of a lease longer than the queue ttl).
//  - nudged: a waiter refused while the key is free (someone else is first)
//            wakes the first. Places are ordered by enqueued_at, taken before
//            their commit: an entry can become visible *ahead* of one a
//            releaser already chose to notify, and would then sleep out its
//            queue refresh; the one notified instead finds it first and
//            passes the wake-up on.
// A refused single attempt writes nothing.
constexpr const char* kAcquireTemplate = R"sql(
WITH
c AS MATERIALIZED (SELECT clock_timestamp() AS now),
held AS (
  SELECT l.owner, l.expires_at + l.lock_delay_ms * interval '1 millisecond' AS until,
         l.holder_limit AS lim, l.expires_at > c.now AS live
  FROM {t} AS l, c
  WHERE l.key = $1 AND l.owner IS NOT NULL
    AND l.expires_at + l.lock_delay_ms * interval '1 millisecond' > c.now
  UNION ALL
  SELECT e->>'o', (e->>'u')::timestamptz, (e->>'l')::bigint, (e->>'x')::timestamptz > c.now
  FROM {t} AS l, c, jsonb_array_elements(l.sharers) AS e
  WHERE l.key = $1 AND (e->>'u')::timestamptz > c.now),
{queue_read}
granted AS (
  INSERT INTO {t} AS l (key, owner, token, holder_token, expires_at, acquired_at, ttl_ms,
                        lock_delay_ms, label, holder_limit, sharers)
  SELECT $1, $2, 1, 1, c.now + $3 * interval '1 millisecond', c.now, $3, $4, $5, $6, '[]'
  FROM c
  WHERE EXISTS (SELECT 1 FROM held WHERE owner = $2 AND live)
     OR (NOT EXISTS (SELECT 1 FROM held WHERE owner = $2)
         AND (SELECT count(*) FROM held) + (SELECT n FROM ahead) + 1
             <= least($6, (SELECT min(lim) FROM held), (SELECT lim FROM ahead)))
  ON CONFLICT (key) DO UPDATE SET
    token = CASE WHEN {p_mine} OR {s_mine} THEN l.token ELSE l.token + 1 END,
    owner = CASE WHEN {new_p} THEN excluded.owner ELSE l.owner END,
    holder_token = CASE WHEN {new_p} THEN l.token + 1 ELSE l.holder_token END,
    expires_at = CASE WHEN {p_mine} OR {new_p} THEN excluded.expires_at ELSE l.expires_at END,
    acquired_at = CASE WHEN {new_p} THEN excluded.acquired_at ELSE l.acquired_at END,
    ttl_ms = CASE WHEN {p_mine} OR {new_p} THEN excluded.ttl_ms ELSE l.ttl_ms END,
    lock_delay_ms = CASE WHEN {p_mine} OR {new_p} THEN excluded.lock_delay_ms
                         ELSE l.lock_delay_ms END,
    label = CASE WHEN {p_mine} OR {new_p} THEN excluded.label ELSE l.label END,
    holder_limit = CASE WHEN {new_p} THEN excluded.holder_limit ELSE l.holder_limit END,
    sharers = CASE
      WHEN {p_mine} THEN l.sharers
      WHEN {s_mine} THEN (
        SELECT jsonb_agg(CASE WHEN e->>'o' = excluded.owner
                              THEN e || jsonb_build_object(
                                'x', excluded.expires_at,
                                'u', excluded.expires_at
                                       + excluded.lock_delay_ms * interval '1 millisecond',
                                'ttl', excluded.ttl_ms, 'd', excluded.lock_delay_ms)
                              ELSE e END ORDER BY i)
        FROM jsonb_array_elements(l.sharers) WITH ORDINALITY AS s(e, i))
      WHEN {new_p} THEN {s_live}
      ELSE {s_live} || jsonb_build_array(jsonb_build_object(
        'o', excluded.owner, 't', l.token + 1, 'x', excluded.expires_at,
        'u', excluded.expires_at + excluded.lock_delay_ms * interval '1 millisecond',
        'a', excluded.acquired_at, 'ttl', excluded.ttl_ms, 'd', excluded.lock_delay_ms,
        'l', excluded.holder_limit, 'b', excluded.label)) END
  WHERE {p_mine} OR {s_mine}
     OR (NOT {mine_counts}
         AND CASE WHEN l.sharers = '[]'::jsonb
                  THEN {p_counts}::int + 1
                       <= least(excluded.holder_limit, CASE WHEN {p_counts} THEN l.holder_limit END)
                  ELSE {p_counts}::int
                       + (SELECT count(*) FROM jsonb_array_elements(l.sharers) AS e
                          WHERE (e->>'u')::timestamptz > excluded.acquired_at) + 1
                       <= least(excluded.holder_limit,
                                CASE WHEN {p_counts} THEN l.holder_limit END,
                                (SELECT min((e->>'l')::bigint)
                                 FROM jsonb_array_elements(l.sharers) AS e
                                 WHERE (e->>'u')::timestamptz > excluded.acquired_at)) END)
  RETURNING CASE WHEN l.owner = $2 OR l.sharers = '[]'::jsonb THEN l.holder_token
                 ELSE (SELECT max((e->>'t')::bigint) FROM jsonb_array_elements(l.sharers) AS e
                       WHERE e->>'o' = $2) END AS token){queue_write}
SELECT (SELECT token FROM granted),
       {holder_left}{queue_counts}
)sql";

// The lean forms, for an exclusive attempt (limit 1) on a key whose row
// exists and has no sharers — every attempt of a plain mutex after the
// key's first grant. The same rule as kAcquireTemplate for that case, as a
// plain UPDATE without the sharers bookkeeping: re-grant our own live
// holding (a retried request: same token), or take the key when its holder
// no longer counts (none, or expired and past its lock-delay) and nobody
// waits ahead of us. The server runs this in about half the time of the
// template's upsert (docs/benchmarks-postgres.md). Built with the same
// queue parts into dlock_acquire_lean (waiting) and dlock_acquire_once_lean
// (a single attempt), with the same parameters. The third column,
// `fallback`, is true when this form cannot decide (no row for the key
// yet, or sharers in it): it then granted nothing, and the template must
// run (a waiting attempt may have taken its place already; the template
// keeps it). One clock reading, statement_timestamp(): when the request
// arrived, before any wait for the row lock.
constexpr const char* kAcquireLeanTemplate = R"sql(
WITH
c AS MATERIALIZED (SELECT statement_timestamp() AS now),
held AS (
  SELECT l.owner, l.expires_at + l.lock_delay_ms * interval '1 millisecond' AS until
  FROM {t} AS l, c
  WHERE l.key = $1 AND l.owner IS NOT NULL
    AND l.expires_at + l.lock_delay_ms * interval '1 millisecond' > c.now),
{queue_read}
granted AS (
  UPDATE {t} AS l SET
    token = CASE WHEN {mine} THEN l.token ELSE l.token + 1 END,
    holder_token = CASE WHEN {mine} THEN l.holder_token ELSE l.token + 1 END,
    acquired_at = CASE WHEN {mine} THEN l.acquired_at ELSE c.now END,
    owner = $2,
    expires_at = c.now + $3 * interval '1 millisecond',
    ttl_ms = $3, lock_delay_ms = $4, label = $5, holder_limit = 1
  FROM c
  WHERE l.key = $1 AND l.sharers = '[]'::jsonb
    AND ({mine}
         OR ((l.owner IS NULL
              OR l.expires_at + l.lock_delay_ms * interval '1 millisecond' <= c.now)
             AND (SELECT n FROM ahead) = 0))
  RETURNING l.holder_token AS token){queue_write}
SELECT (SELECT token FROM granted),
       {holder_left},
       NOT EXISTS (SELECT 1 FROM {t} WHERE key = $1 AND sharers = '[]'::jsonb){queue_counts}
)sql";

// The lean forms' one placeholder: our own live holding (a retried request),
// on the row `l` being updated at `c.now`.
const std::map<std::string, std::string>& LeanConditions() {
  static const auto* conditions = new std::map<std::string, std::string>{
      {"mine", "(l.owner = $2 AND l.expires_at > c.now)"}};
  return *conditions;
}

// Conditions on the existing row `l` inside the upsert's DO UPDATE, where
// `excluded` is the request (excluded.acquired_at is the statement's now).
// Each is coalesced to false: a free row's owner and expiry are NULL, and
// NOT NULL would be NULL, not true.
const std::map<std::string, std::string>& AcquireConditions() {
  static const auto* conditions = new std::map<std::string, std::string>{
      // Our live primary holding / our live sharer holding: a retry.
      {"p_mine",
       "coalesce(" "(l.owner = excluded.owner AND l.expires_at > excluded.acquired_at)" ", false)"},
      {"s_mine",
       "coalesce(" "(l.sharers <> '[]'::jsonb AND EXISTS (SELECT 1 FROM jsonb_array_elements(l.sharers) AS e WHERE e->>'o' = excluded.owner "
       "AND (e->>'x')::timestamptz > excluded.acquired_at))" ", false)"},
      // The primary holding counts (held, or inside its lock-delay).
      {"p_counts",
       "coalesce(" "(l.owner IS NOT NULL AND l.expires_at + l.lock_delay_ms * interval '1 millisecond' > "
       "excluded.acquired_at)" ", false)"},
      // Any holding of ours counts (one inside its lock-delay waits it out).
      {"mine_counts",
       "coalesce(" "((l.owner = excluded.owner AND l.expires_at + l.lock_delay_ms * interval '1 millisecond' "
       "> excluded.acquired_at) OR (l.sharers <> '[]'::jsonb AND EXISTS (SELECT 1 FROM jsonb_array_elements(l.sharers) AS e "
       "WHERE e->>'o' = excluded.owner AND (e->>'u')::timestamptz > excluded.acquired_at)))" ", false)"},
      // A new grant that goes to the primary: no retry, and no primary
      // holding counts.
      {"new_p",
       "(NOT coalesce(l.owner = excluded.owner AND l.expires_at > excluded.acquired_at, false) "
       "AND NOT (l.sharers <> '[]'::jsonb AND EXISTS (SELECT 1 FROM jsonb_array_elements(l.sharers) AS e "
       "WHERE e->>'o' = excluded.owner AND (e->>'x')::timestamptz > excluded.acquired_at)) "
       "AND NOT coalesce(l.owner IS NOT NULL AND l.expires_at + l.lock_delay_ms * interval "
       "'1 millisecond' > excluded.acquired_at, false))"},
      // The sharers that still count.
      {"s_live",
       "(CASE WHEN l.sharers = '[]'::jsonb THEN l.sharers ELSE "
       "(SELECT coalesce(jsonb_agg(e ORDER BY i), '[]'::jsonb) FROM "
       "jsonb_array_elements(l.sharers) WITH ORDINALITY AS s(e, i) "
       "WHERE (e->>'u')::timestamptz > excluded.acquired_at) END)"},
  };
  return *conditions;
}

constexpr const char* kAcquireQueueRead = R"sql(mine AS (
  SELECT enqueued_at FROM {q}
  WHERE key = $1 AND owner = $2 AND expires_at > clock_timestamp()),
ahead AS (
  SELECT count(*) AS n, min(holder_limit) AS lim FROM {q} AS w
  WHERE w.key = $1 AND w.owner <> $2 AND w.expires_at > clock_timestamp()
    AND (NOT EXISTS (SELECT 1 FROM mine)
         OR (w.enqueued_at, w.owner) < ((SELECT enqueued_at FROM mine), $2))),)sql";

constexpr const char* kAcquireOnceQueueRead = R"sql(ahead AS (
  SELECT count(*) AS n, min(holder_limit) AS lim FROM {q}
  WHERE key = $1 AND owner <> $2 AND expires_at > clock_timestamp()),)sql";

constexpr const char* kAcquireQueueWrite = R"sql(,
enqueued AS (
  INSERT INTO {q} AS w (key, owner, enqueued_at, expires_at, holder_limit, label)
  SELECT $1, $2, clock_timestamp(), clock_timestamp() + $7 * interval '1 millisecond', $6, $5
  WHERE NOT EXISTS (SELECT 1 FROM granted)
  ON CONFLICT (key, owner) DO UPDATE SET
    enqueued_at  = CASE WHEN w.expires_at > clock_timestamp() THEN w.enqueued_at
                        ELSE excluded.enqueued_at END,
    expires_at   = excluded.expires_at,
    holder_limit = excluded.holder_limit,
    label        = excluded.label
  RETURNING 1),
dequeued AS (
  DELETE FROM {q}
  WHERE key = $1 AND (owner = $2 OR expires_at <= clock_timestamp())
    AND EXISTS (SELECT 1 FROM granted)
  RETURNING 1),
successor AS (
  SELECT owner, expires_at FROM {q}
  WHERE key = $1 AND owner <> $2 AND expires_at > clock_timestamp()
  ORDER BY enqueued_at, owner
  LIMIT 1),
told AS (
  SELECT pg_notify($8, $9 || ' ' || owner || ' ' || $3) FROM successor
  WHERE EXISTS (SELECT 1 FROM granted)
    AND expires_at > (SELECT now FROM c) + $3 * interval '1 millisecond'),
nudged AS (
  SELECT pg_notify($8, $9 || ' ' || owner) FROM successor
  WHERE NOT EXISTS (SELECT 1 FROM granted) AND NOT EXISTS (SELECT 1 FROM held) AND $10))sql";

constexpr const char* kAcquireQueueCounts = R"sql(,
       (SELECT count(*) FROM enqueued) + (SELECT count(*) FROM dequeued) +
       (SELECT count(*) FROM told) + (SELECT count(*) FROM nudged))sql";

// Both acquire forms' second column: ms until the first counting holding
// of another owner lapses (never below 1), or NULL when none counts (the
// key is free, or only ours counts). Without HAVING, min() over no rows is
// NULL and GREATEST(1, NULL) is 1: a refused waiter on a free key was told
// "1 ms left" and retried every millisecond.
constexpr const char* kHolderLeftSql = R"sql((
  SELECT GREATEST(1, ceil(extract(epoch FROM min(until) - clock_timestamp()) * 1000))::bigint
  FROM held WHERE owner <> $2 HAVING count(*) > 0))sql";

// The prepared forms of kAcquireTemplate and kAcquireLeanTemplate: waiting
// (with the queue writes) or a single attempt (the queue only read).
std::string AcquireSql(const char* form, bool waiting) {
  std::string sql = form;
  auto put = [&](const std::string& name, const char* text) {
    const std::size_t pos = sql.find(name);
    sql.replace(pos, name.size(), text);
  };
  put("{queue_read}", waiting ? kAcquireQueueRead : kAcquireOnceQueueRead);
  put("{queue_write}", waiting ? kAcquireQueueWrite : "");
  put("{queue_counts}", waiting ? kAcquireQueueCounts : "");
  put("{holder_left}", kHolderLeftSql);
  return sql;
}

// The NOTIFY after a release names the head of the queue, so only the next
// in line wakes; when that head shares (a reader, a permit), everybody on
// the key wakes (the empty owner), as several may now be admitted.
// Placeholders of both release statements; $1 key, $2 owner.
const std::map<std::string, std::string>& ReleaseConditions() {
  static const auto* conditions = new std::map<std::string, std::string>{
      {"head_owner",
       "coalesce((SELECT CASE WHEN holder_limit = 1 THEN owner ELSE '' END FROM {q} "
       "WHERE key = $1 AND owner <> $2 AND expires_at > clock_timestamp() "
       "ORDER BY enqueued_at, owner LIMIT 1), '')"},
      // Our first-holder / sharer holding may be freed: anything but one
      // that expired and is still inside its lock-delay.
      {"p_free",
       "coalesce(" "(l.owner = $2 AND NOT (l.expires_at <= c.now AND "
       "l.expires_at + l.lock_delay_ms * interval '1 millisecond' > c.now))" ", false)"},
      {"s_free",
       "coalesce(" "(e->>'o' = $2 AND NOT ((e->>'x')::timestamptz <= c.now AND "
       "(e->>'u')::timestamptz > c.now))" ", false)"},
  };
  return *conditions;
}

// Release of an exclusive holding by an owner with no place in the queue
// (it was granted, which removed its place), the usual release, as a plain
// UPDATE: clear our first-holder columns unless our holding expired and is
// still inside its lock-delay, and NOTIFY the head of the queue, one row
// back. A row with sharers is left to kReleaseSql, and so is every case
// where this returns no row (nothing of ours released: another owner's, or
// nobody's?). $1 key, $2 owner, $3 channel, $4 key hash text. One clock
// reading, statement_timestamp(), as in kAcquireLeanTemplate.
constexpr const char* kReleaseLeanSql = R"sql(
UPDATE {t} AS l SET owner = NULL, expires_at = NULL
FROM (SELECT statement_timestamp() AS now) AS c
WHERE l.key = $1 AND l.sharers = '[]'::jsonb AND {p_free}
RETURNING pg_notify($3, $4 || ' ' || {head_owner})
)sql";

// Release, the general form: $1 key, $2 owner, $3 channel, $4 key hash
// text. Frees our holding (first holder or sharer; keeping the row's token
// counter), drops lapsed sharers and our place in the queue, and NOTIFYs,
// in the same transaction, the head of the queue (or everybody on the
// key): after a release of the key, or after a waiter that gave up left a
// free key's queue. `other` tells kNotOwner from "nobody holds it" (OK:
// release is idempotent).
constexpr const char* kReleaseSql = R"sql(
WITH
c AS MATERIALIZED (SELECT clock_timestamp() AS now),
released AS (
  UPDATE {t} AS l SET
    owner = CASE WHEN {p_free} THEN NULL ELSE l.owner END,
    expires_at = CASE WHEN {p_free} THEN NULL ELSE l.expires_at END,
    sharers = CASE WHEN l.sharers = '[]'::jsonb THEN l.sharers ELSE
              (SELECT coalesce(jsonb_agg(e ORDER BY i), '[]'::jsonb)
               FROM jsonb_array_elements(l.sharers) WITH ORDINALITY AS s(e, i)
               WHERE (e->>'u')::timestamptz > c.now AND NOT {s_free}) END
  FROM c
  WHERE l.key = $1
    AND ({p_free} OR (l.sharers <> '[]'::jsonb
                      AND EXISTS (SELECT 1 FROM jsonb_array_elements(l.sharers) AS e
                                  WHERE {s_free})))
  RETURNING 1),
left_queue AS (
  DELETE FROM {q} WHERE key = $1 AND owner = $2
  RETURNING 1),
other AS (
  SELECT 1 FROM {t} AS l
  WHERE l.key = $1
    AND ((l.owner IS NOT NULL AND l.owner <> $2 AND l.expires_at > clock_timestamp())
         OR EXISTS (SELECT 1 FROM jsonb_array_elements(l.sharers) AS e
                    WHERE e->>'o' <> $2 AND (e->>'x')::timestamptz > clock_timestamp()))),
notified AS (
  SELECT pg_notify($3, $4 || ' ' || {head_owner})
  WHERE EXISTS (SELECT 1 FROM released)
     OR (EXISTS (SELECT 1 FROM left_queue) AND NOT EXISTS (SELECT 1 FROM other)))
SELECT (SELECT count(*) FROM released), EXISTS (SELECT 1 FROM other),
       (SELECT count(*) FROM notified)
)sql";

// Renew due leases of a client, one statement per round, each key at most
// once per round (an UPDATE changes a row once): $1 keys (hex), $2 owners,
// $3 ttl_ms, as arrays. Only a live holding of the same owner is extended
// (an expired one may be taken over at any moment: it is lost). The WHERE is
// re-checked on the latest row version, and every expression uses the same
// reading of the clock, so a row returned was renewed.
constexpr const char* kRenewSql = R"sql(
WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now)
UPDATE {t} AS l SET
  expires_at = CASE WHEN l.owner = r.owner AND l.expires_at > c.now
                    THEN c.now + r.ttl_ms * interval '1 millisecond' ELSE l.expires_at END,
  ttl_ms = CASE WHEN l.owner = r.owner AND l.expires_at > c.now THEN r.ttl_ms ELSE l.ttl_ms END,
  sharers = CASE WHEN l.owner = r.owner AND l.expires_at > c.now THEN l.sharers ELSE (
    SELECT jsonb_agg(CASE WHEN e->>'o' = r.owner AND (e->>'x')::timestamptz > c.now
                          THEN e || jsonb_build_object(
                            'x', c.now + r.ttl_ms * interval '1 millisecond',
                            'u', c.now + (r.ttl_ms + (e->>'d')::bigint) * interval '1 millisecond',
                            'ttl', r.ttl_ms)
                          ELSE e END ORDER BY i)
    FROM jsonb_array_elements(l.sharers) WITH ORDINALITY AS s(e, i)) END
FROM unnest($1::text[], $2::text[], $3::bigint[]) AS r(key_hex, owner, ttl_ms), c
WHERE l.key = decode(r.key_hex, 'hex')
  AND ((l.owner = r.owner AND l.expires_at > c.now)
       OR EXISTS (SELECT 1 FROM jsonb_array_elements(l.sharers) AS e
                  WHERE e->>'o' = r.owner AND (e->>'x')::timestamptz > c.now))
RETURNING encode(l.key, 'hex'), r.owner
)sql";

// Ping (`dlock bench`'s floor): one durable single-row write of the kind a
// grant is, on a row no lock can use (its key starts with a NUL byte, which
// lock keys never hold, and it never has an owner).
constexpr const char* kPingSql = R"sql(
INSERT INTO {t} AS l (key, owner, token) VALUES ('\x00646c6f636b2070696e67'::bytea, NULL, 1)
ON CONFLICT (key) DO UPDATE SET token = l.token % 1000000000 + 1
)sql";

// A key range rather than LIKE: keys may hold '%', '_' and any byte. One
// row per holder: the primary, then each live sharer.
constexpr const char* kListSql = R"sql(
WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now)
SELECT encode(l.key, 'hex'), l.owner, coalesce(l.holder_token, l.token),
       GREATEST(1, ceil(extract(epoch FROM l.expires_at - c.now) * 1000))::bigint,
       coalesce(l.ttl_ms, 0),
       floor(extract(epoch FROM c.now - l.acquired_at) * 1000)::bigint,
       coalesce(l.label, ''), l.holder_limit
FROM {t} AS l, c
WHERE l.key >= $1 AND ($2::bytea IS NULL OR l.key < $2)
  AND l.owner IS NOT NULL AND l.expires_at > c.now
UNION ALL
SELECT encode(l.key, 'hex'), e->>'o', (e->>'t')::bigint,
       GREATEST(1, ceil(extract(epoch FROM (e->>'x')::timestamptz - c.now) * 1000))::bigint,
       (e->>'ttl')::bigint,
       floor(extract(epoch FROM c.now - (e->>'a')::timestamptz) * 1000)::bigint,
       e->>'b', (e->>'l')::bigint
FROM {t} AS l, c, jsonb_array_elements(l.sharers) AS e
WHERE l.key >= $1 AND ($2::bytea IS NULL OR l.key < $2)
  AND (e->>'x')::timestamptz > c.now
ORDER BY 1, 3
)sql";

constexpr const char* kWaitersSql = R"sql(
SELECT encode(key, 'hex'), owner, holder_limit, label,
       floor(extract(epoch FROM clock_timestamp() - enqueued_at) * 1000)::bigint
FROM {q}
WHERE key >= $1 AND ($2::bytea IS NULL OR key < $2) AND expires_at > clock_timestamp()
ORDER BY key, enqueued_at, owner
)sql";

// Run-once marks: only a live holder of the key may set one. FOR UPDATE
// re-reads the key's row at its latest version under the row lock, so a
// grant or release that committed meanwhile is seen. $1 key, $2 owner.
constexpr const char* kMarkDoneSql = R"sql(
WITH h AS (
  SELECT CASE WHEN l.owner = $2 AND l.expires_at > clock_timestamp() THEN l.holder_token
              ELSE (SELECT max((e->>'t')::bigint) FROM jsonb_array_elements(l.sharers) AS e
                    WHERE e->>'o' = $2 AND (e->>'x')::timestamptz > clock_timestamp()) END
           AS token
  FROM {t} AS l
  WHERE l.key = $1
  FOR UPDATE)
INSERT INTO {d} AS d (key, owner, token, done_at)
SELECT $1, $2, token, clock_timestamp() FROM h WHERE token IS NOT NULL
ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, token = excluded.token,
  done_at = excluded.done_at
RETURNING 1
)sql";

constexpr const char* kIsDoneSql = "SELECT 1 FROM {d} WHERE key = $1";

std::string Substitute(std::string text, const std::map<std::string, std::string>& values) {
  for (const auto& [name, value] : values) {
    const std::string pattern = "{" + name + "}";
    for (std::size_t pos = text.find(pattern); pos != std::string::npos;
         pos = text.find(pattern, pos + value.size())) {
      text.replace(pos, pattern.size(), value);
    }
  }
  return text;
}

std::string Quoted(std::string_view identifier) { return "\"" + std::string(identifier) + "\""; }

// The smallest string greater than every string that starts with `prefix`,
// or nullopt when there is none (empty prefix, or all 0xff bytes).
std::optional<std::string> PrefixEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    const auto last = static_cast<unsigned char>(end.back());
    if (last != 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  return std::nullopt;
}

// Parameters of one statement: bytea in binary (any bytes, no escaping),
// everything else as text.
class Params {
 public:
  Params& Bytes(std::string_view value) {
    Add(std::string(value), 1);
    return *this;
  }
  Params& Text(std::string value) {
    Add(std::move(value), 0);
    return *this;
  }
  Params& Int(std::int64_t value) { return Text(std::to_string(value)); }
  Params& Null() {
    values_.emplace_back();
    null_.push_back(true);
    formats_.push_back(0);
    return *this;
  }

  int size() const { return static_cast<int>(values_.size()); }
  // Valid while this object lives and is not changed.
  void Fill(std::vector<const char*>* values, std::vector<int>* lengths) const {
    values->clear();
    lengths->clear();
    for (std::size_t i = 0; i < values_.size(); ++i) {
      values->push_back(null_[i] ? nullptr : values_[i].data());
      lengths->push_back(static_cast<int>(values_[i].size()));
    }
  }
  const int* formats() const { return formats_.data(); }

 private:
  void Add(std::string value, int format) {
    values_.push_back(std::move(value));
    null_.push_back(false);
    formats_.push_back(format);
  }
  std::vector<std::string> values_;
  std::vector<bool> null_;
  std::vector<int> formats_;
};

std::string ArrayLiteral(const std::vector<std::string>& items) {
  // Only hex digits and decimal numbers go in here: nothing to quote.
  std::string out = "{";
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ',';
    out += items[i];
  }
  return out + "}";
}

bool IsNull(const PGresult* r, int row, int col) { return PQgetisnull(r, row, col) != 0; }
std::string Value(const PGresult* r, int row, int col) {
  return std::string(PQgetvalue(r, row, col), static_cast<std::size_t>(PQgetlength(r, row, col)));
}
std::int64_t IntValue(const PGresult* r, int row, int col) {
  return std::strtoll(PQgetvalue(r, row, col), nullptr, 10);
}

class PostgresAcquisition;

class PostgresBackend final : public Backend {
 public:
  explicit PostgresBackend(PostgresOptions options)
      : options_(std::move(options)),
        clock_(options_.clock ? options_.clock : DefaultClock()),
        locks_(Quoted(options_.table)),
        queue_(Quoted(options_.table + "_queue")),
        done_(Quoted(options_.table + "_done")),
        listener_(options_.conninfo, options_.table, options_.connect_timeout,
                  options_.describe) {}

  Status Init() {
    std::unique_lock lock(mu_);
    return EnsureConnectedLocked(SteadyClock::now() + options_.connect_timeout,
                                 "open the lock store");
  }

  // Always a single attempt, even with queue_ttl > 0: waiters queue only
  // through Begin.
  Result<Attempt> TryAcquire(const LeaseRequest& request) override;
  std::unique_ptr<Acquisition> Begin(const LeaseRequest& request) override;
  Status Release(std::string_view key, const OwnerId& owner) override;
  std::vector<Status> Renew(std::span<const LeaseRequest> leases) override;
  Result<std::vector<HolderInfo>> List(std::string_view prefix) override;
  std::string Describe() const override { return options_.describe; }
  bool SupportsLockDelay() const override { return true; }
  bool SupportsSharing() const override { return true; }
  Result<std::vector<WaiterInfo>> Waiters(std::string_view prefix) override;
  Result<bool> IsDone(std::string_view key) override;
  Status MarkDone(std::string_view key, const OwnerId& owner) override;
  Status Ping() override { return Run("dlock_ping", Params(), CallDeadline(), "ping").status(); }

 private:
  friend class PostgresAcquisition;

  // What a waiting attempt sends beyond a single attempt's parameters.
  struct QueueArgs {
    std::uint64_t key_hash = 0;
    // False: do not wake the head of the queue when refused on a free key.
    bool may_nudge = true;
  };

  SteadyTime CallDeadline() const { return SteadyClock::now() + options_.connect_timeout; }

  // One attempt of a valid request: a single one (queue null) or a waiting
  // one, which takes or refreshes the owner's place in the queue.
  Result<Attempt> RunAttempt(const LeaseRequest& request, const QueueArgs* queue);
  // The general release: frees any holding of `owner` and its place in the
  // queue, and tells kNotOwner from "nobody holds it".
  Status ReleaseAndLeaveQueue(std::string_view key, const std::string& owner,
                              SteadyTime deadline);
  Params ReleaseParams(std::string_view key, const std::string& owner) const;
  // Acquisition::Wait for a waiter of this backend's listener.
  bool WaitFor(const Listener::Waiter& waiter, TimePoint until, std::stop_token stop);

  // Runs prepared statement `name` on the operations connection, connecting
  // first if needed; all of it before `deadline`.
  Result<PgResultHandle> Run(const char* name, const Params& params, SteadyTime deadline,
                             const std::string& what);
  Result<PgResultHandle> RunForPrefix(const char* statement, std::string_view prefix,
                                      const std::string& what);
  static Status ReadKeyAndOwner(const PGresult* r, int row, const std::string& table,
                                const std::string& what, std::string* key, OwnerId* owner);
  Status EnsureConnectedLocked(SteadyTime deadline, const std::string& what);
  Status SetUpSessionLocked(PGconn* conn, SteadyTime deadline);

  // The last release by this backend of a key, which NOTIFYed the head of
  // its queue: a waiting acquire of that key that begins at once (a process
  // queueing again right after its release) need not nudge the head on its
  // first attempt: that release told the head, and the head, if refused
  // because another place turned out first, nudges that one itself. Saves
  // a NOTIFY (a database-wide lock at commit, and a signal to every
  // listener) per contended hand-off.
  void NoteReleased(std::string_view key) {
    std::lock_guard lock(releases_mu_);
    if (recent_releases_.size() > 1024) recent_releases_.clear();
    recent_releases_[std::string(key)] = SteadyClock::now();
  }
  // Whether this backend released the key within kJustReleased; forgets
  // that release.
  bool TakeRecentRelease(std::string_view key) {
    std::lock_guard lock(releases_mu_);
    auto it = recent_releases_.find(std::string(key));
    if (it == recent_releases_.end()) return false;
    const bool recent = SteadyClock::now() - it->second < kJustReleased;
    recent_releases_.erase(it);
    return recent;
  }

  const PostgresOptions options_;
  const std::shared_ptr<Clock> clock_;
  const std::string locks_;  // quoted
  const std::string queue_;  // quoted
  const std::string done_;   // quoted

  std::mutex releases_mu_;
  std::map<std::string, SteadyTime> recent_releases_;

  TimedMutex mu_;  // guards conn_ and the two below
  PgConnHandle conn_;
  bool awaiting_stale_reply_ = false;  // a timed-out statement's reply is due
  SteadyTime stale_since_{};

  Listener listener_;
};

// One acquire of one key by one owner (Backend::Begin). A waiting one
// (queue_ttl > 0) keeps a place in the key's queue between its attempts and
// waits as a Listener waiter; a single one (queue_ttl 0) is one TryAcquire
// per Try. Its calls may come from different threads, one after the other.
class PostgresAcquisition final : public Acquisition {
 public:
  PostgresAcquisition(PostgresBackend& backend, LeaseRequest request);
  ~PostgresAcquisition() override;

  Result<Attempt> Try() override;
  bool Wait(TimePoint until, std::stop_token stop) override;
  void Abandon() override;

 private:
  bool waiting() const { return request_.queue_ttl > milliseconds(0); }
  // One attempt; a waiting one first tells the listener.
  Result<Attempt> Send();

  PostgresBackend& backend_;
  const LeaseRequest request_;
  const Status valid_;  // the request's validation
  const Listener::Waiter waiter_;
  // False for the first attempt of an acquire that follows this backend's
  // own release of the key (PostgresBackend::NoteReleased).
  bool may_nudge_ = true;
  // A waiting attempt was sent and no grant answered it: the owner may
  // have a place in the queue.
  bool may_hold_place_ = false;
  // The last attempt's outcome is unknown: it may have granted.
  bool may_be_granted_ = false;
  bool granted_ = false;
};

Status PostgresBackend::SetUpSessionLocked(PGconn* conn, SteadyTime deadline) {
  const std::string& where = options_.describe;
  auto run = [&](const std::string& sql, const std::vector<std::string>& args,
                 const char* what) -> Result<PgResultHandle> {
    std::vector<const char*> values;
    for (const std::string& a : args) values.push_back(a.c_str());
    const int sent =
        args.empty() ? PQsendQuery(conn, sql.c_str())
                     : PQsendQueryParams(conn, sql.c_str(), static_cast<int>(values.size()),
                                         nullptr, values.data(), nullptr, nullptr, 0);
    if (sent == 0) return FromPg(conn, nullptr, what, where);
    return Await(conn, deadline, what, where);
  };

  auto check = run(kCheckSql, {locks_, queue_, done_}, "check the lock tables");
  if (!check.ok()) return check.status();
  const PGresult* r = check->get();
  const bool have_locks = Value(r, 0, 0) == "t";
  const bool have_queue = Value(r, 0, 2) == "t";
  const bool have_done = Value(r, 0, 5) == "t";
  // Tables of the previous schema are migrated (kCreateSql).
  const bool old_locks = have_locks && Value(r, 0, 1) == kLocksCommentV1;
  const bool old_queue = have_queue && Value(r, 0, 3) == kQueueCommentV1;
  auto verify = [&](bool exists, int col, const char* comment, const std::string& name) {
    const std::string found = Value(r, 0, col);
    if (exists && found != comment && found != kLocksCommentV1 && found != kQueueCommentV1) {
      return FailedPreconditionError(
          "table " + name + " on " + where + " exists but is not a dlock table ('" + comment +
          "' expected as its comment, found '" + Value(r, 0, col) +
          "'); choose another with ?table=NAME");
    }
    return Status::Ok();
  };
  DLOCK_RETURN_IF_ERROR(verify(have_locks, 1, kLocksComment, locks_));
  DLOCK_RETURN_IF_ERROR(verify(have_queue, 3, kQueueComment, queue_));
  DLOCK_RETURN_IF_ERROR(verify(have_done, 6, kDoneComment, done_));
  if (!have_locks || !have_queue || !have_done || old_locks || old_queue) {
    const std::uint64_t lock_id = KeyHash("dlock schema " + options_.table) >> 1;
    const std::string sql =
        Substitute(kCreateSql, {{"t", locks_},
                                {"q", queue_},
                                {"d", done_},
                                {"lock_id", std::to_string(lock_id)},
                                {"locks_comment", kLocksComment},
                                {"queue_comment", kQueueComment},
                                {"done_comment", kDoneComment},
                                {"locks_comment_v1", kLocksCommentV1},
                                {"queue_comment_v1", kQueueCommentV1}});
    auto created = run(sql, {}, ("create the lock tables " + locks_).c_str());
    if (!created.ok()) {
      // A failed statement inside BEGIN leaves the transaction open.
      (void)run("ROLLBACK", {}, "roll back");
      return created.status();
    }
  }
  std::string prepare;
  auto add = [&](const char* name, const char* types, const std::string& sql) {
    prepare += "PREPARE " + std::string(name) + types + " AS " +
               Substitute(sql, {{"t", locks_}, {"q", queue_}, {"d", done_}}) + ";\n";
  };
  const char* waiting_types =
      "(bytea, text, bigint, bigint, text, bigint, bigint, text, text, boolean)";
  const char* once_types = "(bytea, text, bigint, bigint, text, bigint)";
  add("dlock_acquire", waiting_types,
      Substitute(AcquireSql(kAcquireTemplate, true), AcquireConditions()));
  add("dlock_acquire_once", once_types,
      Substitute(AcquireSql(kAcquireTemplate, false), AcquireConditions()));
  add("dlock_acquire_lean", waiting_types,
      Substitute(AcquireSql(kAcquireLeanTemplate, true), LeanConditions()));
  add("dlock_acquire_once_lean", once_types,
      Substitute(AcquireSql(kAcquireLeanTemplate, false), LeanConditions()));
  add("dlock_release", "(bytea, text, text, text)", Substitute(kReleaseSql, ReleaseConditions()));
  add("dlock_release_lean", "(bytea, text, text, text)",
      Substitute(kReleaseLeanSql, ReleaseConditions()));
  add("dlock_renew", "(text[], text[], bigint[])", kRenewSql);
  add("dlock_list", "(bytea, bytea)", kListSql);
  add("dlock_ping", "", kPingSql);
  add("dlock_waiters", "(bytea, bytea)", kWaitersSql);
  add("dlock_mark_done", "(bytea, text)", kMarkDoneSql);
  add("dlock_is_done", "(bytea)", kIsDoneSql);
  auto prepared = run(prepare, {}, "prepare statements");
  if (!prepared.ok()) return prepared.status();
  return Status::Ok();
}

Status PostgresBackend::EnsureConnectedLocked(SteadyTime deadline, const std::string& what) {
  // A session the server ended while idle (pg_terminate_backend, restart)
  // has left its FATAL message and EOF on the socket: notice it now and
  // reconnect, rather than fail the next statement.
  if (conn_ && !DrainIdle(conn_.get())) conn_.reset();
  if (conn_) return Status::Ok();
  auto conn = Connect(options_.conninfo, deadline, options_.describe);
  if (!conn.ok()) return conn.status().WithContext(what);  // "acquire k: connect (uri): ..."
  DLOCK_RETURN_IF_ERROR(SetUpSessionLocked(conn->get(), deadline).WithContext(what));
  conn_ = std::move(*conn);
  return Status::Ok();
}

Result<PgResultHandle> PostgresBackend::Run(const char* name, const Params& params,
                                            SteadyTime deadline, const std::string& what) {
  std::unique_lock lock(mu_, std::defer_lock);
  if (!lock.try_lock_until(deadline)) {
    return UnavailableError(what + " (" + options_.describe + ")" +
                            ": the connection stayed busy with another call past the time limit");
  }
  if (conn_ && awaiting_stale_reply_) {
    // An earlier call gave up waiting for its reply; the statement may still
    // be running (a slow fsync, a lock wait). Collect and discard that reply
    // first instead of paying for a new connection, unless it is overdue.
    bool timed_out = false;
    (void)Await(conn_.get(), deadline, what, options_.describe, &timed_out);
    if (timed_out) {
      if (SteadyClock::now() - stale_since_ >= options_.connect_timeout) {
        conn_.reset();
        awaiting_stale_reply_ = false;
      }
      return UnavailableError(what + " (" + options_.describe + ")" +
                              ": the server has not yet answered an earlier call");
    }
    awaiting_stale_reply_ = false;
  }
  DLOCK_RETURN_IF_ERROR(EnsureConnectedLocked(deadline, what));
  std::vector<const char*> values;
  std::vector<int> lengths;
  params.Fill(&values, &lengths);
  if (PQsendQueryPrepared(conn_.get(), name, params.size(), values.data(), lengths.data(),
                          params.formats(), 0) == 0) {
    Status s = FromPg(conn_.get(), nullptr, what, options_.describe);
    conn_.reset();
    return s;
  }
  bool timed_out = false;
  auto result = Await(conn_.get(), deadline, what, options_.describe, &timed_out);
  if (PQstatus(conn_.get()) != CONNECTION_OK) {
    conn_.reset();
  } else if (timed_out) {
    // The outcome is unknown (kUnavailable; the core reconciles by owner).
    // The reply may still come: the next call collects it.
    awaiting_stale_reply_ = true;
    stale_since_ = SteadyClock::now();
  }
  return result;
}

Status ValidateRequest(const LeaseRequest& request) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(request.key));
  DLOCK_RETURN_IF_ERROR(ValidateTtl(request.ttl));
  DLOCK_RETURN_IF_ERROR(ValidateLabel(request.label));
  if (request.owner.empty()) return InvalidArgumentError("acquire: the owner id is empty");
  if (request.limit == 0) return InvalidArgumentError("acquire: the limit is 0");
  if (request.lock_delay < milliseconds(0)) {
    return InvalidArgumentError("acquire: lock_delay is negative");
  }
  if (request.queue_ttl < milliseconds(0)) {
    return InvalidArgumentError("acquire: queue_ttl is negative");
  }
  return Status::Ok();
}

// Both acquire forms answer (token or NULL, ms the holder has left or NULL).
Attempt ReadAttempt(const PGresult* r) {
  Attempt attempt;
  if (!IsNull(r, 0, 0)) {
    attempt.granted = true;
    attempt.token = static_cast<FencingToken>(IntValue(r, 0, 0));
    return attempt;
  }
  if (!IsNull(r, 0, 1)) attempt.holder_ttl_remaining = milliseconds(IntValue(r, 0, 1));
  return attempt;
}

Result<Attempt> PostgresBackend::TryAcquire(const LeaseRequest& request) {
  DLOCK_RETURN_IF_ERROR(ValidateRequest(request));
  return RunAttempt(request, nullptr);
}

Result<Attempt> PostgresBackend::RunAttempt(const LeaseRequest& request, const QueueArgs* queue) {
  const bool waiting = queue != nullptr;
  Params params;
  params.Bytes(request.key)
      .Text(request.owner.ToString())
      .Int(request.ttl.count())
      .Int(request.lock_delay.count())
      .Text(request.label)
      .Int(static_cast<std::int64_t>(request.limit));
  if (waiting) {
    params.Int(request.queue_ttl.count())
        .Text(ChannelName(options_.table, queue->key_hash))
        .Text(KeyHashText(queue->key_hash))
        .Text(queue->may_nudge ? "t" : "f");
  }
  const std::string what = "acquire " + request.key;
  const SteadyTime deadline = CallDeadline();
  if (request.limit == 1) {
    // The lean form first; the template when it cannot decide (no row for
    // the key yet, or sharers in it).
    DLOCK_ASSIGN_OR_RETURN(
        PgResultHandle lean,
        Run(waiting ? "dlock_acquire_lean" : "dlock_acquire_once_lean", params, deadline, what));
    if (Value(lean.get(), 0, 2) != "t") return ReadAttempt(lean.get());
  }
  DLOCK_ASSIGN_OR_RETURN(
      PgResultHandle full,
      Run(waiting ? "dlock_acquire" : "dlock_acquire_once", params, deadline, what));
  return ReadAttempt(full.get());
}

Params PostgresBackend::ReleaseParams(std::string_view key, const std::string& owner) const {
  const std::uint64_t hash = KeyHash(key);
  Params params;
  params.Bytes(key)
      .Text(owner)
      .Text(ChannelName(options_.table, hash))
      .Text(KeyHashText(hash));
  return params;
}

Status PostgresBackend::Release(std::string_view key, const OwnerId& owner) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(key));
  const std::string owner_text = owner.ToString();
  const SteadyTime deadline = CallDeadline();
  DLOCK_ASSIGN_OR_RETURN(PgResultHandle held,
                         Run("dlock_release_lean", ReleaseParams(key, owner_text), deadline,
                             "release " + std::string(key)));
  if (PQntuples(held.get()) == 1) {
    NoteReleased(key);
    return Status::Ok();
  }
  // Nothing released: somebody else's, nobody's, a shared holding, or a
  // waiter's place.
  return ReleaseAndLeaveQueue(key, owner_text, deadline);
}

Status PostgresBackend::ReleaseAndLeaveQueue(std::string_view key, const std::string& owner,
                                             SteadyTime deadline) {
  const std::string what = "release " + std::string(key);
  DLOCK_ASSIGN_OR_RETURN(PgResultHandle result,
                         Run("dlock_release", ReleaseParams(key, owner), deadline, what));
  const PGresult* r = result.get();
  if (IntValue(r, 0, 0) > 0) return Status::Ok();
  if (Value(r, 0, 1) == "t") {
    return NotOwnerError(what + ": the lock is held by another owner");
  }
  return Status::Ok();  // free or expired: releasing again is not an error
}

bool PostgresBackend::WaitFor(const Listener::Waiter& waiter, TimePoint until,
                              std::stop_token stop) {
  const auto left = until - clock_->Now();
  return listener_.Wait(waiter, SteadyClock::now() + left, std::move(stop));
}

std::unique_ptr<Acquisition> PostgresBackend::Begin(const LeaseRequest& request) {
  return std::make_unique<PostgresAcquisition>(*this, request);
}

PostgresAcquisition::PostgresAcquisition(PostgresBackend& backend, LeaseRequest request)
    : backend_(backend),
      request_(std::move(request)),
      valid_(ValidateRequest(request_)),
      waiter_{KeyHash(request_.key), waiting() ? backend_.listener_.NewWaiterId() : 0,
              request_.owner.ToString()},
      may_nudge_(!(waiting() && backend_.TakeRecentRelease(request_.key))) {}

PostgresAcquisition::~PostgresAcquisition() {
  if (waiting()) backend_.listener_.Forget(waiter_);
}

Result<Attempt> PostgresAcquisition::Send() {
  if (!waiting()) return backend_.RunAttempt(request_, nullptr);
  backend_.listener_.BeforeAttempt(waiter_);
  may_hold_place_ = true;  // before sending: if the reply is lost, it may exist
  const PostgresBackend::QueueArgs queue{waiter_.key_hash, may_nudge_};
  may_nudge_ = true;
  return backend_.RunAttempt(request_, &queue);
}

Result<Attempt> PostgresAcquisition::Try() {
  DLOCK_RETURN_IF_ERROR(valid_);
  Result<Attempt> attempt = Send();
  if (!attempt.ok()) {
    if (attempt.status().code() == StatusCode::kUnavailable) may_be_granted_ = true;
    return attempt;
  }
  // An answer: an earlier attempt whose reply was lost granted nothing that
  // still stands, or this one has it back.
  may_be_granted_ = false;
  if (attempt->granted) {
    granted_ = true;
    may_hold_place_ = false;  // the grant removed the place
    if (waiting()) backend_.listener_.Forget(waiter_);
  } else if (waiting()) {
    backend_.listener_.AfterRefused(waiter_);
  }
  return attempt;
}

bool PostgresAcquisition::Wait(TimePoint until, std::stop_token stop) {
  if (!waiting() || granted_) return false;
  return backend_.WaitFor(waiter_, until, std::move(stop));
}

void PostgresAcquisition::Abandon() {
  if (waiting()) backend_.listener_.Forget(waiter_);
  if (may_hold_place_) {
    (void)backend_.ReleaseAndLeaveQueue(request_.key, waiter_.owner, backend_.CallDeadline());
  } else if (may_be_granted_) {
    (void)backend_.Release(request_.key, request_.owner);
  }
  may_hold_place_ = false;
  may_be_granted_ = false;
}

std::vector<Status> PostgresBackend::Renew(std::span<const LeaseRequest> leases) {
  std::vector<Status> result(leases.size());
  // An UPDATE changes a row once, and every holder of a key lives in its
  // one row: a batch holding two leases on one key (two permits of one
  // client) takes more than one round, each key at most once per round.
  // Almost always one round.
  struct Round {
    std::vector<std::string> keys, owners, ttls;
    std::set<std::string> seen;
  };
  std::vector<Round> rounds;
  milliseconds shortest = options_.connect_timeout * kRenewBudgetDivisor;
  for (std::size_t i = 0; i < leases.size(); ++i) {
    result[i] = ValidateKey(leases[i].key);
    if (result[i].ok()) result[i] = ValidateTtl(leases[i].ttl);
    if (!result[i].ok()) continue;
    const std::string key = HexEncode(leases[i].key);
    auto round = std::find_if(rounds.begin(), rounds.end(),
                              [&](const Round& r) { return r.seen.count(key) == 0; });
    if (round == rounds.end()) round = rounds.insert(rounds.end(), Round{});
    round->seen.insert(key);
    round->keys.push_back(key);
    round->owners.push_back(leases[i].owner.ToString());
    round->ttls.push_back(std::to_string(leases[i].ttl.count()));
    shortest = std::min(shortest, leases[i].ttl);
  }
  if (rounds.empty()) return result;
  const milliseconds budget = std::clamp(shortest / kRenewBudgetDivisor, kMinRenewBudget,
                                         std::max(kMinRenewBudget, options_.connect_timeout));
  const SteadyTime deadline = SteadyClock::now() + budget;
  std::set<std::pair<std::string, std::string>> done;
  Status failure;
  for (const Round& round : rounds) {
    Params params;
    params.Text(ArrayLiteral(round.keys))
        .Text(ArrayLiteral(round.owners))
        .Text(ArrayLiteral(round.ttls));
    auto renewed = Run("dlock_renew", params, deadline, "renew");
    if (!renewed.ok()) {
      // One statement: when it failed, none of its renewals happened.
      failure = renewed.status();
      for (std::size_t j = 0; j < round.keys.size(); ++j) {
        done.emplace("!" + round.keys[j], round.owners[j]);
      }
      continue;
    }
    const PGresult* r = renewed->get();
    for (int row = 0; row < PQntuples(r); ++row) done.emplace(Value(r, row, 0), Value(r, row, 1));
  }
  for (std::size_t i = 0; i < leases.size(); ++i) {
    if (!result[i].ok()) continue;
    const std::string key = HexEncode(leases[i].key);
    const std::string owner = leases[i].owner.ToString();
    if (done.count({"!" + key, owner}) > 0) {
      result[i] = failure;
    } else if (done.count({key, owner}) == 0) {
      result[i] = NotOwnerError("lease on key " + leases[i].key +
                                " is no longer held by this owner");
    }
  }
  return result;
}

// Runs `statement` ($1 prefix, $2 the first key past it or NULL): the
// listing statements, dlock_list and dlock_waiters.
Result<PgResultHandle> PostgresBackend::RunForPrefix(const char* statement,
                                                     std::string_view prefix,
                                                     const std::string& what) {
  const std::optional<std::string> end = PrefixEnd(prefix);
  Params params;
  params.Bytes(prefix);
  if (end) {
    params.Bytes(*end);
  } else {
    params.Null();
  }
  return Run(statement, params, CallDeadline(), what);
}

// Columns 0 and 1 of a listing row: the key (hex) and the owner id.
Status PostgresBackend::ReadKeyAndOwner(const PGresult* r, int row, const std::string& table,
                                        const std::string& what, std::string* key,
                                        OwnerId* owner) {
  if (!HexDecode(Value(r, row, 0), key)) {
    return InternalError(what + ": the server returned a malformed key");
  }
  Result<OwnerId> parsed = OwnerId::Parse(Value(r, row, 1));
  if (!parsed.ok()) {
    return InternalError(what + ": row for key " + *key + " in " + table +
                         " has a malformed owner id: " + parsed.status().message());
  }
  *owner = *parsed;
  return Status::Ok();
}

Result<std::vector<HolderInfo>> PostgresBackend::List(std::string_view prefix) {
  const std::string what = "list '" + std::string(prefix) + "'";
  auto result = RunForPrefix("dlock_list", prefix, what);
  if (!result.ok()) return result.status();
  const PGresult* r = result->get();
  std::vector<HolderInfo> holders;
  for (int row = 0; row < PQntuples(r); ++row) {
    HolderInfo info;
    DLOCK_RETURN_IF_ERROR(ReadKeyAndOwner(r, row, locks_, what, &info.key, &info.owner));
    info.token = static_cast<FencingToken>(IntValue(r, row, 2));
    info.ttl_remaining = milliseconds(IntValue(r, row, 3));
    info.ttl = milliseconds(IntValue(r, row, 4));
    if (!IsNull(r, row, 5)) info.held_for = milliseconds(std::max<std::int64_t>(0, IntValue(r, row, 5)));
    info.label = Value(r, row, 6);
    info.limit = static_cast<std::uint32_t>(IntValue(r, row, 7));
    holders.push_back(std::move(info));
  }
  return holders;
}

Result<std::vector<WaiterInfo>> PostgresBackend::Waiters(std::string_view prefix) {
  const std::string what = "list the waiters for '" + std::string(prefix) + "'";
  auto result = RunForPrefix("dlock_waiters", prefix, what);
  if (!result.ok()) return result.status();
  const PGresult* r = result->get();
  std::vector<WaiterInfo> waiters;
  for (int row = 0; row < PQntuples(r); ++row) {
    WaiterInfo info;
    DLOCK_RETURN_IF_ERROR(ReadKeyAndOwner(r, row, queue_, what, &info.key, &info.owner));
    info.limit = static_cast<std::uint32_t>(IntValue(r, row, 2));
    info.label = Value(r, row, 3);
    info.waited_for = milliseconds(std::max<std::int64_t>(0, IntValue(r, row, 4)));
    waiters.push_back(std::move(info));
  }
  return waiters;
}

Result<bool> PostgresBackend::IsDone(std::string_view key) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(key));
  Params params;
  params.Bytes(key);
  auto result = Run("dlock_is_done", params, CallDeadline(),
                    "read the done mark of " + std::string(key));
  if (!result.ok()) return result.status();
  return PQntuples(result->get()) > 0;
}

// Committed durably (the session's synchronous_commit is on) before it
// returns OK.
Status PostgresBackend::MarkDone(std::string_view key, const OwnerId& owner) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(key));
  const std::string what = "mark " + std::string(key) + " done";
  Params params;
  params.Bytes(key).Text(owner.ToString());
  auto result = Run("dlock_mark_done", params, CallDeadline(), what);
  if (!result.ok()) return result.status();
  if (PQntuples(result->get()) == 0) {
    return NotOwnerError(what + ": this owner no longer holds the lock");
  }
  return Status::Ok();
}

// [a-z_][a-z0-9_]{0,56}: a plain identifier that needs no quoting rules
// beyond double quotes, and leaves room for the "_queue" suffix.
bool IsTableName(std::string_view name) {
  if (name.empty() || name.size() > 57) return false;
  auto lower = [](char c) { return (c >= 'a' && c <= 'z') || c == '_'; };
  if (!lower(name.front())) return false;
  return std::all_of(name.begin(), name.end(),
                     [&](char c) { return lower(c) || (c >= '0' && c <= '9'); });
}

// The libpq connection keywords this libpq knows.
std::set<std::string> LibpqKeywords() {
  std::set<std::string> out;
  PQconninfoOption* options = PQconndefaults();
  if (options == nullptr) return out;
  for (PQconninfoOption* o = options; o->keyword != nullptr; ++o) out.insert(o->keyword);
  PQconninfoFree(options);
  return out;
}

}  // namespace

Result<PostgresOptions> OptionsFromUri(const internal::Uri& uri) {
  auto bad = [&](const std::string& why) {
    return InvalidArgumentError("bad PostgreSQL URI '" + uri.Redacted() + "': " + why);
  };
  if (uri.scheme != "postgres" && uri.scheme != "postgresql") {
    return bad("the scheme is not postgres or postgresql");
  }
  PostgresOptions options;
  options.describe = uri.Redacted();
  ConnInfo& info = options.conninfo;
  if (!uri.user.empty()) info.emplace_back("user", uri.user);
  if (uri.has_password) info.emplace_back("password", uri.password);
  if (!uri.hosts.empty()) {
    // "h1:5432,[::1]:5433,h3" -> host "h1,::1,h3", port "5432,5433,".
    std::string hosts, ports;
    bool any_port = false;
    std::size_t start = 0;
    while (start <= uri.hosts.size()) {
      std::size_t comma = uri.hosts.find(',', start);
      if (comma == std::string::npos) comma = uri.hosts.size();
      std::string_view item(uri.hosts.data() + start, comma - start);
      std::string_view host = item, port;
      if (!item.empty() && item.front() == '[') {
        const std::size_t close = item.find(']');
        if (close == std::string_view::npos) return bad("unclosed '[' in host '" + std::string(item) + "'");
        host = item.substr(1, close - 1);
        if (close + 1 < item.size()) {
          if (item[close + 1] != ':') return bad("junk after ']' in host '" + std::string(item) + "'");
          port = item.substr(close + 2);
        }
      } else if (const std::size_t colon = item.rfind(':'); colon != std::string_view::npos) {
        host = item.substr(0, colon);
        port = item.substr(colon + 1);
      }
      if (!port.empty() && !std::all_of(port.begin(), port.end(), ::isdigit)) {
        return bad("port '" + std::string(port) + "' is not a number");
      }
      if (start > 0) {
        hosts += ',';
        ports += ',';
      }
      hosts += host;
      ports += port;
      any_port = any_port || !port.empty();
      start = comma + 1;
    }
    info.emplace_back("host", hosts);
    if (any_port) info.emplace_back("port", ports);
  }
  if (uri.path.size() > 1) info.emplace_back("dbname", uri.path.substr(1));

  static const std::set<std::string> keywords = LibpqKeywords();
  bool have_application_name = false, have_keepalives_idle = false;
  for (const auto& [k, v] : uri.query) {
    if (k == "table") {
      if (!IsTableName(v)) {
        return bad("table name '" + v +
                   "' is not accepted: use a lower-case identifier, a letter or '_' and "
                   "then up to 56 letters, digits or '_' (dlock adds '_queue' to it for the "
                   "wait queue)");
      }
      options.table = v;
      continue;
    }
    if (keywords.count(k) == 0 || k == "dbname" || k == "replication") {
      return bad("unknown parameter '" + k +
                 "': accepted: table, and libpq's connection parameters (sslmode, "
                 "application_name, options, target_session_attrs, ...)");
    }
    have_application_name = have_application_name || k == "application_name";
    have_keepalives_idle = have_keepalives_idle || k == "keepalives_idle";
    info.emplace_back(k, v);
  }
  if (!have_application_name) info.emplace_back("application_name", "dlock");
  // The LISTEN connection is idle for long stretches: find out within about
  // half a minute that its server went away without a word.
  if (!have_keepalives_idle) {
    info.emplace_back("keepalives_idle", "15");
    info.emplace_back("keepalives_interval", "5");
    info.emplace_back("keepalives_count", "3");
  }
  return options;
}

Result<std::unique_ptr<Backend>> Open(const PostgresOptions& options) {
  if (!IsTableName(options.table)) {
    return InvalidArgumentError("table name '" + options.table + "' is not accepted");
  }
  if (options.connect_timeout <= milliseconds(0)) {
    return InvalidArgumentError("connect timeout must be positive, got " +
                                internal::FormatDuration(options.connect_timeout));
  }
  auto backend = std::make_unique<PostgresBackend>(options);
  DLOCK_RETURN_IF_ERROR(backend->Init());
  return std::unique_ptr<Backend>(std::move(backend));
}

Result<std::unique_ptr<Backend>> Open(const internal::Uri& uri,
                                      const internal::BackendParams& params) {
  auto options = OptionsFromUri(uri);
  if (!options.ok()) return options.status();
  options->connect_timeout = params.connect_timeout;
  options->clock = params.clock;
  return Open(*options);
}

}  // namespace dlock::postgres
