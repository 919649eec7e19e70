#include "backends/postgres/postgres_sql.h"

#include <map>

namespace dlock::postgres {

// Session set-up, one round trip: do the tables exist and are they dlock's;
// a session that would commit asynchronously (synchronous_commit=off
// could lose the last grants, and so reissue a token, in a server crash)
// commits durably instead; and the session plans each statement once
// (plan_cache_mode). By default PostgreSQL plans a prepared statement
// afresh at each of its first five runs, and most dlock sessions are short
// (`dlock exec`): a waiter's grant was planned anew in the middle of every
// hand-off, 0.2-0.7 ms of the server's time for the acquire's plan
// (docs/benchmarks-postgres.md, Session 7). Every statement is written to
// have a good generic plan (keys found by equality, or by a range of two
// parameters).
const char* const kCheckSql = R"sql(
SELECT to_regclass($1) IS NOT NULL, obj_description(to_regclass($1), 'pg_class'),
       to_regclass($2) IS NOT NULL, obj_description(to_regclass($2), 'pg_class'),
       CASE WHEN current_setting('synchronous_commit') = 'off'
            THEN set_config('synchronous_commit', 'on', false) END,
       to_regclass($3) IS NOT NULL, obj_description(to_regclass($3), 'pg_class'),
       to_regclass($4) IS NOT NULL, obj_description(to_regclass($4), 'pg_class'),
       set_config('plan_cache_mode', 'force_generic_plan', false)
)sql";

namespace {

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
      sharers       jsonb NOT NULL DEFAULT '[]',
      layout        smallint NOT NULL CHECK (layout = 3)
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
  END IF;
  IF obj_description(to_regclass('{t}'), 'pg_class') IN ('{locks_comment_v1}',
                                                         '{locks_comment_v2}') THEN
    -- Schema 3 deletes the rows of free keys. An older dlock still running
    -- would make such a key's row again with token 1 and go on from there,
    -- issuing its old tokens a second time: its INSERT, which does not name
    -- `layout`, must fail. The default fills the existing rows only.
    ALTER TABLE {t} ADD COLUMN IF NOT EXISTS layout smallint NOT NULL DEFAULT 3
                    CHECK (layout = 3);
    ALTER TABLE {t} ALTER COLUMN layout DROP DEFAULT;
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
      key        bytea PRIMARY KEY,
      owner      text NOT NULL,
      token      bigint NOT NULL,
      done_at    timestamptz NOT NULL,
      keep_until timestamptz
    );
    CREATE INDEX ON {d} (keep_until) WHERE keep_until IS NOT NULL;
    COMMENT ON TABLE {d} IS '{done_comment}';
  ELSIF obj_description(to_regclass('{d}'), 'pg_class') = '{done_comment_v2}' THEN
    -- Schema 3: a retention per record (NULL: for ever, as every older one).
    ALTER TABLE {d} ADD COLUMN IF NOT EXISTS keep_until timestamptz;
    CREATE INDEX ON {d} (keep_until) WHERE keep_until IS NOT NULL;
    COMMENT ON TABLE {d} IS '{done_comment}';
  END IF;
  -- Within schema 3: one row per holding a break evicted, kept until
  -- keep_until (NULL: for ever).
  IF to_regclass('{b}') IS NULL THEN
    CREATE TABLE {b} (
      key         bytea NOT NULL,
      at          timestamptz NOT NULL,
      owner       text NOT NULL,
      token       bigint NOT NULL,
      label       text NOT NULL,
      broken_by   text NOT NULL,
      break_token bigint NOT NULL,
      keep_until  timestamptz
    );
    CREATE INDEX ON {b} (key, at);
    CREATE INDEX ON {b} (keep_until) WHERE keep_until IS NOT NULL;
    COMMENT ON TABLE {b} IS '{breaks_comment}';
  END IF;
  -- Schema 3: a new row's first token comes from here. It starts above
  -- every token any key was granted, so no key's next token goes down.
  IF to_regclass('{s}') IS NULL THEN
    CREATE SEQUENCE {s} AS bigint;
    PERFORM setval('{s}', coalesce(m, 1), m IS NOT NULL)
    FROM (SELECT greatest((SELECT max(token) FROM {t}), (SELECT max(token) FROM {d})) AS m) AS x;
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
//            exclusion). A key without a row (never granted, or its row
//            swept) gets a row whose first token is the sequence's next
//            value; on an existing row a new grant takes token + 1 and goes
//            to the primary
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
                        lock_delay_ms, label, holder_limit, sharers, layout)
  SELECT $1, $2, n.token, n.token, c.now + $3 * interval '1 millisecond', c.now, $3, $4, $5, $6,
         '[]', 3
  FROM c, (SELECT nextval('{s}') AS token) AS n
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

// The fresh form: a single attempt (any limit) on a key without a row —
// never granted, or its row swept — when nobody else has a live place in
// its queue, which the template would grant as here: the row made with the
// sequence's next token. Nothing returned when the key has a row (made
// meanwhile too: the insert then waits for it and does nothing) or others
// wait; the template decides then. The sequence is read only when the row
// is to be made. A statement a fraction of the template's size: the
// template's plan is large, and preparing its executor for each run is
// most of what a grant of a new key costs the server
// (docs/benchmarks-postgres.md, Session 7).
constexpr const char* kAcquireFreshSql = R"sql(
INSERT INTO {t} (key, owner, token, holder_token, expires_at, acquired_at, ttl_ms,
                 lock_delay_ms, label, holder_limit, sharers, layout)
SELECT $1, $2, n.token, n.token, c.now + $3 * interval '1 millisecond', c.now, $3, $4, $5, $6,
       '[]', 3
FROM (SELECT clock_timestamp() AS now) AS c, (SELECT nextval('{s}') AS token) AS n
WHERE NOT EXISTS (SELECT 1 FROM {t} WHERE key = $1)
  AND NOT EXISTS (SELECT 1 FROM {q} WHERE key = $1 AND owner <> $2
                                      AND expires_at > clock_timestamp())
ON CONFLICT (key) DO NOTHING
RETURNING holder_token
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
      // A release's transaction commits without waiting for its WAL to reach
      // the disk (synchronous_commit off, for this transaction only: set_config
      // with is_local; volatile, so the planner keeps it in the subquery that
      // carries it). Losing a release to a crash only leaves the key held until
      // its lease ends, which a lease allows anyway. And it cannot be lost once
      // the next grant stands: that grant's commit flushes the WAL up to its
      // own record, which comes after the release's. So the hand-off waits for
      // one flush (the grant's), not two; the releaser's NOTIFY leaves at its
      // commit, before any flush (docs/decisions.md).
      {"async_commit", "set_config('synchronous_commit', 'off', true)"},
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
// reading, statement_timestamp(), as in kAcquireLeanTemplate. The commit
// does not wait for the WAL flush (async_commit, in ReleaseConditions).
constexpr const char* kReleaseLeanSql = R"sql(
UPDATE {t} AS l SET owner = NULL, expires_at = NULL
FROM (SELECT statement_timestamp() AS now, {async_commit} AS async_commit) AS c
WHERE l.key = $1 AND l.sharers = '[]'::jsonb AND {p_free}
RETURNING pg_notify($3, $4 || ' ' || {head_owner})
)sql";

// Release, the general form: $1 key, $2 owner, $3 channel, $4 key hash
// text. Frees our holding (first holder or sharer; keeping the row's token
// counter), drops lapsed sharers and our place in the queue, and NOTIFYs,
// in the same transaction, the head of the queue (or everybody on the
// key): after a release of the key, or after a waiter that gave up left a
// free key's queue. `other` tells kNotOwner from "nobody holds it" (OK:
// release is idempotent). The commit does not wait for the WAL flush
// (async_commit, in ReleaseConditions).
constexpr const char* kReleaseSql = R"sql(
WITH
c AS MATERIALIZED (SELECT clock_timestamp() AS now, {async_commit} AS async_commit),
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

// Keep waiters' places (Backend::KeepPlaces), one statement for a batch:
// $1 keys (hex), $2 owners, $3 queue ttls in ms, as arrays. Only a live
// place is extended, by the server's clock: a lapsed one has lost its turn
// (an attempt would queue it again at the back), and a holder has none (a
// waiting grant deletes its owner's place). Nor is a place that is first
// in line on a key nothing holds (no live place ahead, no holding that
// counts, lock-delays included): its answer, kNotFound, makes its waiter
// attempt at once, and be granted. That is how a waiter learns that the
// places ahead of it lapsed (their waiters died; no release, so no
// NOTIFY), and how a head whose NOTIFY was lost learns its turn came: in
// a tick, with no attempt per waiter (Backend::NoticesLapsedPlaces). The
// locks table is only read, so no holding is touched. The queue is
// UNLOGGED: no WAL flush.
constexpr const char* kKeepPlacesSql = R"sql(
WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now)
UPDATE {q} AS w SET expires_at = c.now + r.ttl_ms * interval '1 millisecond'
FROM unnest($1::text[], $2::text[], $3::bigint[]) AS r(key_hex, owner, ttl_ms), c
WHERE w.key = decode(r.key_hex, 'hex') AND w.owner = r.owner AND w.expires_at > c.now
  AND (EXISTS (SELECT 1 FROM {q} AS a
               WHERE a.key = w.key AND a.expires_at > c.now
                 AND (a.enqueued_at, a.owner) < (w.enqueued_at, w.owner))
       OR EXISTS (SELECT 1 FROM {t} AS l
                  WHERE l.key = w.key
                    AND ((l.owner IS NOT NULL
                          AND l.expires_at + l.lock_delay_ms * interval '1 millisecond' > c.now)
                         OR EXISTS (SELECT 1 FROM jsonb_array_elements(l.sharers) AS e
                                    WHERE (e->>'u')::timestamptz > c.now))))
RETURNING encode(w.key, 'hex'), w.owner
)sql";

// Ping (`dlock bench`'s floor): one durable single-row write of the kind a
// grant is, on a row no lock can use (its key starts with a NUL byte, which
// lock keys never hold, and it never has an owner).
constexpr const char* kPingSql = R"sql(
INSERT INTO {t} AS l (key, owner, token, layout)
VALUES ('\x00646c6f636b2070696e67'::bytea, NULL, 1, 3)
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
WHERE l.key >= $1 AND {l_before_end}
  AND l.owner IS NOT NULL AND l.expires_at > c.now
UNION ALL
SELECT encode(l.key, 'hex'), e->>'o', (e->>'t')::bigint,
       GREATEST(1, ceil(extract(epoch FROM (e->>'x')::timestamptz - c.now) * 1000))::bigint,
       (e->>'ttl')::bigint,
       floor(extract(epoch FROM c.now - (e->>'a')::timestamptz) * 1000)::bigint,
       e->>'b', (e->>'l')::bigint
FROM {t} AS l, c, jsonb_array_elements(l.sharers) AS e
WHERE l.key >= $1 AND {l_before_end}
  AND (e->>'x')::timestamptz > c.now
ORDER BY 1, 3
)sql";

constexpr const char* kWaitersSql = R"sql(
SELECT encode(key, 'hex'), owner, holder_limit, label,
       floor(extract(epoch FROM clock_timestamp() - enqueued_at) * 1000)::bigint
FROM {q}
WHERE key >= $1 AND {before_end} AND expires_at > clock_timestamp()
ORDER BY key, enqueued_at, owner
)sql";

// Run-once marks: only a live holder of the key may set one. FOR UPDATE
// re-reads the key's row at its latest version under the row lock, so a
// grant or release that committed meanwhile is seen. $1 key, $2 owner, $3
// retention in ms (NULL: for ever; the sweep deletes records past theirs).
constexpr const char* kMarkDoneSql = R"sql(
WITH h AS (
  SELECT CASE WHEN l.owner = $2 AND l.expires_at > clock_timestamp() THEN l.holder_token
              ELSE (SELECT max((e->>'t')::bigint) FROM jsonb_array_elements(l.sharers) AS e
                    WHERE e->>'o' = $2 AND (e->>'x')::timestamptz > clock_timestamp()) END
           AS token
  FROM {t} AS l
  WHERE l.key = $1
  FOR UPDATE)
INSERT INTO {d} AS d (key, owner, token, done_at, keep_until)
SELECT $1, $2, token, clock_timestamp(), clock_timestamp() + $3 * interval '1 millisecond'
FROM h WHERE token IS NOT NULL
ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, token = excluded.token,
  done_at = excluded.done_at, keep_until = excluded.keep_until
RETURNING 1
)sql";

// A break record (at and keep_until by the server's clock), and up to 16
// records past their retention with it. $1 key, $2 owner, $3 token, $4
// label, $5 broken_by, $6 break_token, $7 retention in ms (NULL: for ever).
constexpr const char* kRecordBreakSql = R"sql(
WITH gone AS (
  DELETE FROM {b} WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM {b} WHERE keep_until <= clock_timestamp() LIMIT 16)))
INSERT INTO {b} (key, at, owner, token, label, broken_by, break_token, keep_until)
VALUES ($1, clock_timestamp(), $2, $3, $4, $5, $6,
        clock_timestamp() + $7 * interval '1 millisecond')
)sql";

// The break records of keys in [$1, $2) still kept, by key, oldest first.
constexpr const char* kBreaksSql = R"sql(
SELECT encode(key, 'hex'), owner, token, label, broken_by, break_token,
       floor(extract(epoch FROM at) * 1000)::bigint
FROM {b}
WHERE key >= $1 AND {before_end}
  AND (keep_until IS NULL OR keep_until > clock_timestamp())
ORDER BY key, at
)sql";

constexpr const char* kIsDoneSql =
    "SELECT 1 FROM {d} WHERE key = $1 AND (keep_until IS NULL OR keep_until > clock_timestamp())";

// The sweep: rows of keys that nobody holds (no owner, or one expired past
// its lock-delay; no sharer counting) are deleted, so that a key leaves
// nothing behind. A fresh row takes its first token from the sequence at
// some moment during its INSERT statement, possibly before a row of the same
// key that outran the sequence (token + 1 per grant) was deleted. The
// sweep therefore deletes under a table lock that conflicts with the ROW
// EXCLUSIVE lock every grant holds from the start of its statement: it
// waits until no grant is in flight and keeps new ones out until it
// commits, and it raises the sequence to the highest token it deleted
// before that. A grant that starts afterwards draws a value above every
// token of the deleted rows. Candidates are chosen before the lock (a scan
// of a large table must not keep grants out) and checked again under it;
// lock_timeout bounds how long grants queue behind a sweep that waits.
// Only rows whose last grant is {idle_ms} ms old are candidates, so that a
// busy key keeps its row (and its grants their one-row update) rather than
// being deleted and made again between uses. Expired places in the queue
// and run-once records past their retention go too, after the table lock:
// deleted before it, a queue place a grant in flight is about to touch
// would make the grant wait for the sweep while the sweep waits for the
// grant, until lock_timeout ended the sweep. The ping row is kept.
constexpr const char* kSweepSql = R"sql(
DO $sweep$
DECLARE
  victims bytea[];
  top bigint;
  swept bigint := 0;
BEGIN
  SELECT array_agg(key) INTO victims FROM (
    SELECT key FROM {t} AS l
    WHERE {free}
      AND (l.acquired_at IS NULL
           OR l.acquired_at <= clock_timestamp() - {idle_ms} * interval '1 millisecond')
    LIMIT {batch}) AS v;
  IF victims IS NOT NULL THEN
    SET LOCAL lock_timeout = '20ms';
    LOCK TABLE {t} IN SHARE ROW EXCLUSIVE MODE;
    WITH gone AS (DELETE FROM {t} AS l WHERE l.key = ANY (victims) AND {free} RETURNING l.token)
    SELECT count(*), max(token) INTO swept, top FROM gone;
    IF top IS NOT NULL THEN
      PERFORM setval('{s}', greatest(top, (SELECT last_value FROM {s})));
    END IF;
  END IF;
  DELETE FROM {q} WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM {q} WHERE expires_at <= clock_timestamp() LIMIT {batch}));
  DELETE FROM {d} WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM {d} WHERE keep_until <= clock_timestamp() LIMIT {batch}));
  PERFORM set_config('dlock.swept', swept::text, false);
END
$sweep$;
SELECT current_setting('dlock.swept');
)sql";

// A row nobody holds, `l` (kSweepSql).
constexpr const char* kFreeRowSql =
    "((l.owner IS NULL OR l.expires_at + l.lock_delay_ms * interval '1 millisecond' "
    "<= clock_timestamp()) AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(l.sharers) AS e "
    "WHERE (e->>'u')::timestamptz > clock_timestamp()) "
    "AND l.key <> '\\x00646c6f636b2070696e67'::bytea)";

// Whether the sweep would find anything to delete now ($1: kSweepSql's
// idle, in ms): what a closing backend asks before it sweeps. The sweep is
// a DO block, which the server compiles at each run (1.3 ms of its time),
// and a closing `dlock exec` runs it just as the next one in line is being
// granted. A looser test than the sweep's own (sharers and lock-delays
// aside), so that it costs little to plan: a "yes" too many costs one
// sweep that deletes nothing.
constexpr const char* kSweepDueSql = R"sql(
SELECT EXISTS (SELECT 1 FROM {t} AS l
               WHERE (l.owner IS NULL OR l.expires_at <= clock_timestamp())
                 AND (l.acquired_at IS NULL
                      OR l.acquired_at <= clock_timestamp() - $1 * interval '1 millisecond')
                 AND l.key <> '\x00646c6f636b2070696e67'::bytea)
    OR EXISTS (SELECT 1 FROM {q} WHERE expires_at <= clock_timestamp())
    OR EXISTS (SELECT 1 FROM {d} WHERE keep_until <= clock_timestamp())
)sql";

// Backend::StoredObjects: rows and queue places of keys in [$1, $2), the
// ping row aside.
constexpr const char* kCountSql = R"sql(
SELECT (SELECT count(*) FROM {t} WHERE key >= $1 AND {before_end}
          AND key <> '\x00646c6f636b2070696e67'::bytea)
     + (SELECT count(*) FROM {q} WHERE key >= $1 AND {before_end})
     + (SELECT count(*) FROM {d} WHERE key >= $1 AND {before_end})
     + (SELECT count(*) FROM {b} WHERE key >= $1 AND {before_end})
)sql";

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

}  // namespace

std::string CreateTablesSql(const TableNames& tables, std::uint64_t lock_id) {
  return Substitute(kCreateSql, {{"t", tables.locks},
                                 {"q", tables.queue},
                                 {"d", tables.done},
                                 {"b", tables.breaks},
                                 {"breaks_comment", kBreaksComment},
                                 {"lock_id", std::to_string(lock_id)},
                                 {"locks_comment", kLocksComment},
                                 {"queue_comment", kQueueComment},
                                 {"done_comment", kDoneComment},
                                 {"done_comment_v2", kDoneCommentV2},
                                 {"locks_comment_v1", kLocksCommentV1},
                                 {"locks_comment_v2", kLocksCommentV2},
                                 {"s", tables.tokens},
                                 {"queue_comment_v1", kQueueCommentV1}});
}

// One round trip, and each statement's own text as its source: a PREPARE
// in a multi-statement query keeps the whole query (35 KB) as its source
// text, which the server copies and measures at every execution
// (exec_bind_message, pgstat_report_activity): ~4 µs of server CPU per
// statement, Ping's included (docs/benchmarks-postgres.md, issue 25).
// Each PREPARE is therefore run by EXECUTE inside one DO block.
std::string PrepareStatementsSql(const TableNames& tables) {
  std::string prepare = "DO $dlock_prepare$\nBEGIN\n";
  auto add = [&](const char* name, const char* types, const std::string& sql) {
    prepare += "EXECUTE $dlock_statement$PREPARE " + std::string(name) + types + " AS " +
               Substitute(sql, {{"t", tables.locks},
                                {"q", tables.queue},
                                {"d", tables.done},
                                {"b", tables.breaks},
                                {"s", tables.tokens}}) +
               "$dlock_statement$;\n";
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
  add("dlock_acquire_once_fresh", once_types, kAcquireFreshSql);
  add("dlock_release", "(bytea, text, text, text)", Substitute(kReleaseSql, ReleaseConditions()));
  add("dlock_release_lean", "(bytea, text, text, text)",
      Substitute(kReleaseLeanSql, ReleaseConditions()));
  add("dlock_renew", "(text[], text[], bigint[])", kRenewSql);
  add("dlock_keep_places", "(text[], text[], bigint[])", kKeepPlacesSql);
  // Each listing in two forms: keys in [$1, $2), and from $1 on (no key
  // is past the prefix; $2 is NULL). One form with "($2 IS NULL OR key <
  // $2)" would have a generic plan that scans the whole table.
  auto add_range = [&](const std::string& name, const char* sql) {
    add(name.c_str(), "(bytea, bytea)",
        Substitute(sql, {{"before_end", "key < $2"}, {"l_before_end", "l.key < $2"}}));
    add((name + "_to_end").c_str(), "(bytea, bytea)",
        Substitute(sql, {{"before_end", "$2::bytea IS NULL"}, {"l_before_end", "$2::bytea IS NULL"}}));
  };
  add_range("dlock_list", kListSql);
  add("dlock_ping", "", kPingSql);
  add_range("dlock_waiters", kWaitersSql);
  add("dlock_mark_done", "(bytea, text, bigint)", kMarkDoneSql);
  add("dlock_is_done", "(bytea)", kIsDoneSql);
  add_range("dlock_count", kCountSql);
  add("dlock_record_break", "(bytea, text, bigint, text, text, bigint, bigint)", kRecordBreakSql);
  add_range("dlock_breaks", kBreaksSql);
  add("dlock_sweep_due", "(bigint)", kSweepDueSql);
  return prepare + "END\n$dlock_prepare$;\n";
}

std::string SweepSql(const TableNames& tables, int batch, std::chrono::milliseconds idle) {
  return Substitute(Substitute(kSweepSql, {{"free", kFreeRowSql}}),
                    {{"t", tables.locks},
                     {"q", tables.queue},
                     {"d", tables.done},
                     {"s", tables.tokens},
                     {"batch", std::to_string(batch)},
                     {"idle_ms", std::to_string(idle.count())}});
}

}  // namespace dlock::postgres
