#include "backends/mariadb/mariadb_sql.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <map>

#include "backends/mariadb/mariadb_conn.h"

namespace dlock::mariadb {
namespace {

// The server's clock, in microseconds since the epoch, whatever the
// session's time zone: UTC_TIMESTAMP is UTC, and the difference of two
// DATETIMEs is plain arithmetic (no zone, no daylight saving).
constexpr const char* kNowUs = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))";

// Locks: one row per key in use. It carries the key's token counter
// (`token`: the last token granted on the row, to any holder), its first
// holder (the only one of an exclusive lock; owner NULL when there is none;
// its token in holder_token), the number
// of further holders in {h} and of places in {q} (lapsed ones included,
// until they are deleted), and the numbering of the key's queue; it is
// the row every change to the key locks first, and it stays after a
// release, so that the next grant of a busy key is one upsert of one row.
// The sweep deletes rows of keys nobody holds or waits for. A holding
// counts (for the sharing rule) while expires_us + lock_delay_ms is ahead of
// the server's clock, and is held (listed, renewable) while expires_us is.
constexpr const char* kLocksSql = R"sql(
CREATE TABLE IF NOT EXISTS {t} (
  lock_key      VARBINARY(1024) NOT NULL PRIMARY KEY,
  owner         CHAR(32) CHARACTER SET ascii NULL,
  token         BIGINT UNSIGNED NULL,
  holder_token  BIGINT UNSIGNED NULL,
  expires_us    BIGINT NULL,
  acquired_us   BIGINT NULL,
  ttl_ms        BIGINT NOT NULL DEFAULT 0,
  lock_delay_ms BIGINT NOT NULL DEFAULT 0,
  holder_limit  BIGINT NOT NULL DEFAULT 1,
  label         VARBINARY(256) NOT NULL DEFAULT '',
  sharers       INT NOT NULL DEFAULT 0,
  waiters       INT NOT NULL DEFAULT 0,
  next_place    BIGINT NOT NULL DEFAULT 0
) ENGINE=InnoDB COMMENT='{version}')sql";

// Further holders of a shared key (readers, semaphore permits), one row
// each, with the same columns as the first holder's.
constexpr const char* kSharersSql = R"sql(
CREATE TABLE IF NOT EXISTS {h} (
  lock_key      VARBINARY(1024) NOT NULL,
  owner         CHAR(32) CHARACTER SET ascii NOT NULL,
  token         BIGINT UNSIGNED NOT NULL,
  expires_us    BIGINT NOT NULL,
  acquired_us   BIGINT NOT NULL,
  ttl_ms        BIGINT NOT NULL,
  lock_delay_ms BIGINT NOT NULL,
  holder_limit  BIGINT NOT NULL,
  label         VARBINARY(256) NOT NULL,
  PRIMARY KEY (lock_key, owner)
) ENGINE=InnoDB COMMENT='{version}')sql";

constexpr const char* kQueueSql = R"sql(
CREATE TABLE IF NOT EXISTS {q} (
  lock_key     VARBINARY(1024) NOT NULL,
  owner        CHAR(32) CHARACTER SET ascii NOT NULL,
  place        BIGINT NOT NULL,
  enqueued_us  BIGINT NOT NULL,
  expires_us   BIGINT NOT NULL,
  holder_limit BIGINT NOT NULL,
  label        VARBINARY(256) NOT NULL,
  PRIMARY KEY (lock_key, owner)
) ENGINE=InnoDB COMMENT='{version}')sql";

constexpr const char* kDoneSql = R"sql(
CREATE TABLE IF NOT EXISTS {d} (
  lock_key      VARBINARY(1024) NOT NULL PRIMARY KEY,
  owner         CHAR(32) CHARACTER SET ascii NOT NULL,
  token         BIGINT UNSIGNED NOT NULL,
  done_us       BIGINT NOT NULL,
  keep_until_us BIGINT NULL,
  KEY (keep_until_us)
) ENGINE=InnoDB COMMENT='{version}')sql";

constexpr const char* kBreaksTableSql = R"sql(
CREATE TABLE IF NOT EXISTS {b} (
  id            BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  lock_key      VARBINARY(1024) NOT NULL,
  at_us         BIGINT NOT NULL,
  owner         CHAR(32) CHARACTER SET ascii NOT NULL,
  token         BIGINT UNSIGNED NOT NULL,
  label         VARBINARY(256) NOT NULL,
  broken_by     VARBINARY(1024) NOT NULL,
  break_token   BIGINT UNSIGNED NOT NULL,
  keep_until_us BIGINT NULL,
  KEY (lock_key, at_us),
  KEY (keep_until_us)
) ENGINE=InnoDB COMMENT='{version}')sql";

// The first token of a key's row (docs/decisions.md, "MariaDB: the token
// counter"); later grants on the row take its counter + 1, and the sweep
// raises the sequence to a row's counter before it deletes the row. InnoDB,
// so that its refills are in the same redo log as the grants: a grant that
// is durable had its refill written before it. The cache only means a crash
// skips values, never that one comes back.
constexpr const char* kTokensSql = R"sql(
CREATE SEQUENCE IF NOT EXISTS {s} START WITH 1 MINVALUE 1 MAXVALUE 9223372036854775806
  INCREMENT BY 1 CACHE 1000 NOCYCLE ENGINE=InnoDB COMMENT='{version}')sql";

// Acquire, the general form: one attempt, one transaction. p_queue_ms 0: a
// single attempt (takes no place); > 0: a waiting attempt, which takes or
// refreshes the owner's place in the queue when refused.
//  - The owner's wake-up name (GET_LOCK 'dlock/<owner>', on this session)
//    is taken before anything of it can be seen, so a waiter that finds it
//    free knows its holder is gone (docs/backend-mariadb.md, "Wake-ups").
//  - The key's row is locked first (created if missing): every change to a
//    key happens under it, so what follows sees every committed change.
//  - Further holders are read FOR UPDATE: the latest versions, also of a
//    renewal (which does not lock the key's row) that committed meanwhile.
//  - Granted when we hold the key live (a retry: same token, lease
//    refreshed) or when no holding of ours counts and
//      holdings that count + live waiters ahead + 1 <= the smallest limit
//    among ours, theirs and the waiters' (the sharing rule). The token is
//    the row's counter + 1, or for a row that never granted, the
//    sequence's next value, drawn after the row is locked (so after every
//    earlier grant of the key committed, and after the sweep raised the
//    sequence above the counter of the key's previous row): tokens only go
//    up per key. The grant takes the first-holder columns when no first
//    holder counts, else a row in {h}.
//  - Refused, a waiting attempt gets what stands ahead of it, in order, for
//    the client to choose whom to wait for (DecideQueue).
constexpr const char* kAcquireSql = R"sql(
CREATE OR REPLACE PROCEDURE {p_acquire}(IN p_key VARBINARY(1024),
    IN p_owner CHAR(32) CHARACTER SET ascii, IN p_ttl_ms BIGINT, IN p_delay_ms BIGINT,
    IN p_label VARBINARY(256), IN p_limit BIGINT, IN p_queue_ms BIGINT)
  MODIFIES SQL DATA SQL SECURITY INVOKER COMMENT '{version}'
BEGIN
  DECLARE v_now BIGINT DEFAULT {now_us};
  DECLARE v_name VARCHAR(64) DEFAULT CONCAT('dlock/', p_owner);
  DECLARE v_first CHAR(32) CHARACTER SET ascii;
  DECLARE v_first_token, v_counter BIGINT UNSIGNED;
  DECLARE v_first_expires, v_first_until, v_first_lim, v_sharers BIGINT;
  DECLARE v_held, v_mine, v_mine_live, v_ahead BIGINT DEFAULT 0;
  DECLARE v_lim_held, v_lim_ahead, v_place, v_until BIGINT;
  DECLARE v_token BIGINT UNSIGNED;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  IF COALESCE(IS_USED_LOCK(v_name), 0) <> CONNECTION_ID() THEN
    DO GET_LOCK(v_name, 0);
  END IF;
  START TRANSACTION;
  INSERT INTO {t} (lock_key) VALUES (p_key) ON DUPLICATE KEY UPDATE next_place = next_place;
  SELECT MAX(sharers), MAX(token), MAX(IF({counts}, owner, NULL)),
         MAX(IF({counts}, holder_token, NULL)), MAX(IF({counts}, expires_us, NULL)),
         MAX(IF({counts}, {until}, NULL)), MAX(IF({counts}, holder_limit, NULL))
    INTO v_sharers, v_counter, v_first, v_first_token, v_first_expires, v_first_until, v_first_lim
    FROM {t} WHERE lock_key = p_key;
  IF v_sharers > 0 THEN
    SELECT COUNT(*), MIN(holder_limit), COALESCE(SUM(owner = p_owner), 0),
           COALESCE(SUM(owner = p_owner AND expires_us > v_now), 0), MIN({until})
      INTO v_held, v_lim_held, v_mine, v_mine_live, v_until
      FROM {h} WHERE lock_key = p_key AND {until} > v_now FOR UPDATE;
  END IF;
  IF v_first IS NOT NULL THEN
    SET v_held = v_held + 1, v_lim_held = LEAST(COALESCE(v_lim_held, v_first_lim), v_first_lim),
        v_mine = v_mine + (v_first = p_owner),
        v_mine_live = v_mine_live + (v_first = p_owner AND v_first_expires > v_now),
        v_until = LEAST(COALESCE(v_until, v_first_until), v_first_until);
  END IF;
  IF p_queue_ms > 0 THEN
    SELECT MIN(place) INTO v_place FROM {q}
      WHERE lock_key = p_key AND owner = p_owner AND expires_us > v_now;
  END IF;
  SELECT COUNT(*), MIN(holder_limit) INTO v_ahead, v_lim_ahead FROM {q}
    WHERE lock_key = p_key AND owner <> p_owner AND expires_us > v_now
      AND (v_place IS NULL OR place < v_place);
  IF v_mine_live > 0 AND v_first = p_owner THEN
    UPDATE {t} SET expires_us = v_now + p_ttl_ms * 1000, ttl_ms = p_ttl_ms,
                   lock_delay_ms = p_delay_ms, label = p_label
      WHERE lock_key = p_key;
    SET v_token = v_first_token;
  ELSEIF v_mine_live > 0 THEN
    UPDATE {h} SET expires_us = v_now + p_ttl_ms * 1000, ttl_ms = p_ttl_ms,
                   lock_delay_ms = p_delay_ms, label = p_label
      WHERE lock_key = p_key AND owner = p_owner;
    SELECT MIN(token) INTO v_token FROM {h} WHERE lock_key = p_key AND owner = p_owner;
  ELSEIF v_mine = 0 AND v_held + v_ahead + 1 <= LEAST(p_limit, COALESCE(v_lim_held, p_limit),
                                                      COALESCE(v_lim_ahead, p_limit)) THEN
    SET v_token = IF(v_counter IS NULL, NEXTVAL({s}), v_counter + 1);
    UPDATE {t} SET token = v_token WHERE lock_key = p_key;
    IF v_sharers > 0 THEN
      DELETE FROM {h} WHERE lock_key = p_key AND {until} <= v_now;
    END IF;
    IF v_first IS NULL THEN
      UPDATE {t} SET owner = p_owner, holder_token = v_token, expires_us = v_now + p_ttl_ms * 1000,
                     acquired_us = v_now, ttl_ms = p_ttl_ms, lock_delay_ms = p_delay_ms,
                     holder_limit = p_limit, label = p_label
        WHERE lock_key = p_key;
    ELSE
      INSERT INTO {h} (lock_key, owner, token, expires_us, acquired_us, ttl_ms, lock_delay_ms,
                       holder_limit, label)
        VALUES (p_key, p_owner, v_token, v_now + p_ttl_ms * 1000, v_now, p_ttl_ms, p_delay_ms,
                p_limit, p_label);
    END IF;
    IF v_sharers > 0 OR v_first IS NOT NULL THEN
      UPDATE {t} SET sharers = (SELECT COUNT(*) FROM {h} WHERE lock_key = p_key)
        WHERE lock_key = p_key;
    END IF;
  END IF;
  IF v_token IS NOT NULL THEN
    DELETE FROM {q} WHERE lock_key = p_key AND (owner = p_owner OR expires_us <= v_now);
    IF ROW_COUNT() > 0 THEN
      UPDATE {t} SET waiters = {count_places} WHERE lock_key = p_key;
    END IF;
    COMMIT;
    SELECT 'g' AS kind, NULL AS owner, v_token AS n, NULL AS ms, NULL AS lim;
  ELSEIF p_queue_ms > 0 THEN
    IF v_place IS NULL THEN
      DELETE FROM {q} WHERE lock_key = p_key AND owner = p_owner;
      UPDATE {t} SET next_place = next_place + 1 WHERE lock_key = p_key;
      SELECT next_place INTO v_place FROM {t} WHERE lock_key = p_key;
      INSERT INTO {q} (lock_key, owner, place, enqueued_us, expires_us, holder_limit, label)
        VALUES (p_key, p_owner, v_place, v_now, v_now + p_queue_ms * 1000, p_limit, p_label);
      UPDATE {t} SET waiters = {count_places} WHERE lock_key = p_key;
    ELSE
      UPDATE {q} SET expires_us = v_now + p_queue_ms * 1000, holder_limit = p_limit,
                     label = p_label
        WHERE lock_key = p_key AND owner = p_owner;
    END IF;
    SELECT kind, owner, n, ms, lim FROM (
      SELECT 0 AS part, 'r' AS kind, NULL AS owner, NULL AS n,
             CEIL((v_until - v_now) / 1000) AS ms, NULL AS lim
      UNION ALL
      SELECT 1, IF(expires_us > v_now, 'h', 'd'), owner, holder_token, NULL, holder_limit
        FROM {t} WHERE lock_key = p_key AND owner <> p_owner AND {counts}
      UNION ALL
      SELECT 1, IF(expires_us > v_now, 'h', 'd'), owner, token, NULL, holder_limit
        FROM {h} WHERE lock_key = p_key AND owner <> p_owner AND {until} > v_now
      UNION ALL
      SELECT 2, 'w', owner, place, NULL, holder_limit
        FROM {q} WHERE lock_key = p_key AND owner <> p_owner AND expires_us > v_now
                   AND place < v_place) AS x
    ORDER BY part, n;
    COMMIT;
  ELSE
    COMMIT;
    DO RELEASE_LOCK(v_name);
    SELECT 'r' AS kind, NULL AS owner, NULL AS n, CEIL((v_until - v_now) / 1000) AS ms,
           NULL AS lim;
  END IF;
END)sql";

// Release, the general form: frees the owner's holding (not one that
// expired and is still inside its lock-delay: that one lapses by itself)
// and its place, drops what lapsed on the key, and then lets go of the
// owner's wake-up name, after the commit, so that the waiter it wakes finds
// the key free. Answers (released, another owner holds it live): release
// is idempotent, and kNotOwner only when somebody else holds the key. The
// key's row stays for the sweep.
constexpr const char* kReleaseSql = R"sql(
CREATE OR REPLACE PROCEDURE {p_release}(IN p_key VARBINARY(1024),
    IN p_owner CHAR(32) CHARACTER SET ascii)
  MODIFIES SQL DATA SQL SECURITY INVOKER COMMENT '{version}'
BEGIN
  DECLARE v_now BIGINT DEFAULT {now_us};
  DECLARE v_found, v_sharers BIGINT;
  DECLARE v_released, v_other BIGINT DEFAULT 0;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  START TRANSACTION;
  SELECT COUNT(*), MAX(sharers) INTO v_found, v_sharers FROM {t} WHERE lock_key = p_key FOR UPDATE;
  IF v_found > 0 THEN
    UPDATE {t} SET owner = NULL, expires_us = NULL
      WHERE lock_key = p_key AND owner = p_owner AND (expires_us > v_now OR {until} <= v_now);
    SET v_released = ROW_COUNT();
    IF v_sharers > 0 THEN
      DELETE FROM {h} WHERE lock_key = p_key AND owner = p_owner
        AND (expires_us > v_now OR {until} <= v_now);
      SET v_released = v_released + ROW_COUNT();
      DELETE FROM {h} WHERE lock_key = p_key AND {until} <= v_now;
      UPDATE {t} SET sharers = (SELECT COUNT(*) FROM {h} WHERE lock_key = p_key)
        WHERE lock_key = p_key;
    END IF;
    DELETE FROM {q} WHERE lock_key = p_key AND (owner = p_owner OR expires_us <= v_now);
    IF ROW_COUNT() > 0 THEN
      UPDATE {t} SET waiters = {count_places} WHERE lock_key = p_key;
    END IF;
    SELECT (SELECT COUNT(*) FROM {t} WHERE lock_key = p_key AND owner <> p_owner
                                         AND expires_us > v_now)
         + (SELECT COUNT(*) FROM {h} WHERE lock_key = p_key AND owner <> p_owner
                                         AND expires_us > v_now)
      INTO v_other;
  END IF;
  COMMIT;
  DO RELEASE_LOCK(CONCAT('dlock/', p_owner));
  SELECT v_released, v_other;
END)sql";

// Renew: every due lease of a client in one call. Only a live holding of
// the same owner is extended (an expired one may be taken over at any
// moment: it is lost). Answers the (hex key, owner) of each lease renewed.
// JSON_TABLE drives the joins (STRAIGHT_JOIN) so that each lease is one
// primary-key lookup, whatever the tables' size.
constexpr const char* kRenewSql = R"sql(
CREATE OR REPLACE PROCEDURE {p_renew}(IN p_leases LONGTEXT)
  MODIFIES SQL DATA SQL SECURITY INVOKER COMMENT '{version}'
BEGIN
  DECLARE v_now BIGINT DEFAULT {now_us};
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  START TRANSACTION;
  UPDATE {leases} STRAIGHT_JOIN {t} AS l ON l.lock_key = UNHEX(r.k) AND l.owner = r.o
    SET l.expires_us = v_now + r.ttl * 1000, l.ttl_ms = r.ttl
    WHERE l.expires_us > v_now;
  UPDATE {leases} STRAIGHT_JOIN {h} AS l ON l.lock_key = UNHEX(r.k) AND l.owner = r.o
    SET l.expires_us = v_now + r.ttl * 1000, l.ttl_ms = r.ttl
    WHERE l.expires_us > v_now;
  SELECT LOWER(HEX(l.lock_key)), l.owner
    FROM {leases} STRAIGHT_JOIN {t} AS l ON l.lock_key = UNHEX(r.k) AND l.owner = r.o
    WHERE l.expires_us = v_now + r.ttl * 1000
  UNION ALL
  SELECT LOWER(HEX(l.lock_key)), l.owner
    FROM {leases} STRAIGHT_JOIN {h} AS l ON l.lock_key = UNHEX(r.k) AND l.owner = r.o
    WHERE l.expires_us = v_now + r.ttl * 1000;
  COMMIT;
END)sql";

// Run-once records: only a live holder of the key may set one (its holding
// read under the key's row lock and FOR UPDATE: the latest versions). A
// record past its retention is not done; up to 16 of them go with each new
// record, the rest with the sweep.
constexpr const char* kMarkDoneSql = R"sql(
CREATE OR REPLACE PROCEDURE {p_mark_done}(IN p_key VARBINARY(1024),
    IN p_owner CHAR(32) CHARACTER SET ascii, IN p_keep_ms BIGINT)
  MODIFIES SQL DATA SQL SECURITY INVOKER COMMENT '{version}'
BEGIN
  DECLARE v_now BIGINT DEFAULT {now_us};
  DECLARE v_token BIGINT UNSIGNED;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  START TRANSACTION;
  SELECT MAX(holder_token) INTO v_token FROM {t}
    WHERE lock_key = p_key AND owner = p_owner AND expires_us > v_now FOR UPDATE;
  IF v_token IS NULL THEN
    SELECT MAX(token) INTO v_token FROM {h}
      WHERE lock_key = p_key AND owner = p_owner AND expires_us > v_now FOR UPDATE;
  END IF;
  IF v_token IS NOT NULL THEN
    INSERT INTO {d} (lock_key, owner, token, done_us, keep_until_us)
      VALUES (p_key, p_owner, v_token, v_now, v_now + p_keep_ms * 1000)
      ON DUPLICATE KEY UPDATE owner = VALUES(owner), token = VALUES(token),
                              done_us = VALUES(done_us), keep_until_us = VALUES(keep_until_us);
    DELETE FROM {d} WHERE keep_until_us <= v_now LIMIT 16;
  END IF;
  COMMIT;
  SELECT v_token IS NOT NULL;
END)sql";

// A break record (at_us and keep_until_us by the server's clock), and up to
// 16 records past their retention with it.
constexpr const char* kRecordBreakSql = R"sql(
CREATE OR REPLACE PROCEDURE {p_record_break}(IN p_key VARBINARY(1024),
    IN p_owner CHAR(32) CHARACTER SET ascii, IN p_token BIGINT UNSIGNED,
    IN p_label VARBINARY(256), IN p_by VARBINARY(1024), IN p_break_token BIGINT UNSIGNED,
    IN p_keep_ms BIGINT)
  MODIFIES SQL DATA SQL SECURITY INVOKER COMMENT '{version}'
BEGIN
  DECLARE v_now BIGINT DEFAULT {now_us};
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  START TRANSACTION;
  DELETE FROM {b} WHERE keep_until_us <= v_now LIMIT 16;
  INSERT INTO {b} (lock_key, at_us, owner, token, label, broken_by, break_token, keep_until_us)
    VALUES (p_key, v_now, p_owner, p_token, p_label, p_by, p_break_token,
            v_now + p_keep_ms * 1000);
  COMMIT;
END)sql";

// The sweep deletes the rows of keys nobody holds, shares or waits for,
// what lapsed without anybody to clean it up (a holder that crashed, a
// waiter that died) and records past their retention. It walks the locks
// table a stretch at a time: the p_batch rows after p_after in key order,
// which the primary key serves, so a call costs the same whatever the
// table's size (a cursor over the whole table, a UNION of the three tables,
// materialised all three on every call and fell behind: docs/decisions.md,
// "MariaDB: the sweep"). One transaction per call, one commit for the lot:
//  - rows of free keys are locked FOR UPDATE SKIP LOCKED (a key busy now,
//    a grant waiting on its row, is left to the next pass) and deleted;
//  - rows with further holders or places (lapsed ones counted too) are
//    visited one by one under their lock (skipped when busy): the lapsed
//    ones go, the counts are recomputed, and the row goes when nothing is
//    left;
//  - before the commit, the sequence is raised to the largest counter among
//    the rows deleted (SETVAL only raises; it is not rolled back, which only
//    skips values; it takes literals only, hence EXECUTE IMMEDIATE), so a
//    key's next row starts above them.
// Answers (rows visited, the last key visited): fewer than p_batch rows
// means the end of the table; the caller starts again from ''.
constexpr const char* kSweepFromSql = R"sql(
CREATE OR REPLACE PROCEDURE {p_sweep_from}(IN p_after VARBINARY(1024), IN p_batch INT)
  MODIFIES SQL DATA SQL SECURITY INVOKER COMMENT '{version}'
BEGIN
  DECLARE v_now BIGINT DEFAULT {now_us};
  DECLARE v_key, v_last VARBINARY(1024);
  DECLARE v_counter, v_raise BIGINT UNSIGNED DEFAULT 0;
  DECLARE v_end, v_seen, v_locked INT DEFAULT 0;
  DECLARE freed CURSOR FOR
    SELECT lock_key, COALESCE(token, 0) FROM {t}
      WHERE lock_key > p_after AND lock_key <= v_last AND lock_key <> {ping_key}
        AND (owner IS NULL OR {until} <= v_now) AND sharers = 0 AND waiters = 0
        AND NOT EXISTS (SELECT 1 FROM {q} WHERE {q}.lock_key = {t}.lock_key)
      FOR UPDATE SKIP LOCKED;
  DECLARE crowded CURSOR FOR
    SELECT lock_key FROM {t}
      WHERE lock_key > p_after AND lock_key <= v_last AND (sharers > 0 OR waiters > 0);
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_end = 1;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  DELETE FROM {d} WHERE keep_until_us <= v_now LIMIT 1000;
  DELETE FROM {b} WHERE keep_until_us <= v_now LIMIT 1000;
  SELECT COUNT(*), MAX(lock_key) INTO v_seen, v_last
    FROM (SELECT lock_key FROM {t} WHERE lock_key > p_after ORDER BY lock_key LIMIT p_batch) AS r;
  START TRANSACTION;
  OPEN freed;
  free: LOOP
    FETCH freed INTO v_key, v_counter;
    IF v_end THEN LEAVE free; END IF;
    DELETE FROM {t} WHERE lock_key = v_key;
    SET v_raise = GREATEST(v_raise, v_counter);
  END LOOP;
  CLOSE freed;
  SET v_end = 0;
  OPEN crowded;
  crowd: LOOP
    FETCH crowded INTO v_key;
    IF v_end THEN LEAVE crowd; END IF;
    SELECT COUNT(*), COALESCE(MAX(token), 0) INTO v_locked, v_counter
      FROM {t} WHERE lock_key = v_key FOR UPDATE SKIP LOCKED;
    IF v_locked > 0 THEN
      DELETE FROM {h} WHERE lock_key = v_key AND {until} <= v_now;
      DELETE FROM {q} WHERE lock_key = v_key AND expires_us <= v_now;
      UPDATE {t} SET sharers = (SELECT COUNT(*) FROM {h} WHERE lock_key = v_key),
                     waiters = (SELECT COUNT(*) FROM {q} WHERE lock_key = v_key)
        WHERE lock_key = v_key;
      DELETE FROM {t} WHERE lock_key = v_key AND (owner IS NULL OR {until} <= v_now)
        AND sharers = 0 AND waiters = 0;
      IF ROW_COUNT() > 0 THEN SET v_raise = GREATEST(v_raise, v_counter); END IF;
    END IF;
  END LOOP;
  CLOSE crowded;
  IF v_raise > 0 THEN
    EXECUTE IMMEDIATE CONCAT('DO SETVAL({s}, ', v_raise, ')');
  END IF;
  COMMIT;
  SELECT v_seen, v_last;
END)sql";

// The sweep of dlock before the one above, kept for a dlock of that
// version still running against this store: one stretch from the start.
constexpr const char* kSweepSql = R"sql(
CREATE OR REPLACE PROCEDURE {p_sweep}(IN p_batch INT)
  MODIFIES SQL DATA SQL SECURITY INVOKER COMMENT '{version}'
BEGIN
  CALL {p_sweep_from}('', p_batch);
END)sql";

// The lean acquire: the usual attempt, exclusive (limit 1) on a key whose
// row exists and has no further holders, as one upsert of that row,
// prepared once per session (the parser's cost is a good part of a round
// trip here) and executed with its arguments (:name, in the order of their
// first use; see Lean below). It grants (or re-grants a live holding of
// ours: same token) when no holding counts and the key has no places in
// its queue (the row counts them, so the test is on the row's latest
// version under its lock, like the rest), and then takes the owner's
// wake-up name, before the grant
// commits. Its token is the row's counter + 1 (NEXTVAL for a row that
// never granted, drawn under the row's lock). A key without a row gets one
// and no grant (counter NULL in the answer): a token drawn before the row
// exists could be drawn before an
// earlier grant of the key that committed meanwhile; the caller runs it
// again. Anything else it leaves to the general form (sharers or waiters
// > 0 in the answer, or a refused waiting attempt): waiters counts places,
// lapsed ones too, so only the general form judges whose are live.
constexpr const char* kLeanAcquireSql = R"sql(
INSERT INTO {t} (lock_key) VALUES (:key) ON DUPLICATE KEY UPDATE
  token = IF(@dlock_granted :=
               (sharers = 0 AND ((owner <=> :owner AND expires_us > {now_us})
                 OR ((owner IS NULL OR {until} <= {now_us}) AND waiters = 0)))
               AND (IS_USED_LOCK(CONCAT('dlock/', :owner)) <=> CONNECTION_ID()
                    OR GET_LOCK(CONCAT('dlock/', :owner), 0) IS NOT NULL),
             IF(owner <=> :owner AND expires_us > {now_us}, token,
                IF(token IS NULL, NEXTVAL({s}), token + 1)), token),
  holder_token = IF(@dlock_granted AND NOT (owner <=> :owner AND expires_us > {now_us}),
                    token, holder_token),
  acquired_us = IF(@dlock_granted AND NOT (owner <=> :owner AND expires_us > {now_us}),
                   {now_us}, acquired_us),
  owner = IF(@dlock_granted, :owner, owner),
  expires_us = IF(@dlock_granted, {now_us} + :ttl_ms * 1000, expires_us),
  ttl_ms = IF(@dlock_granted, :ttl_ms, ttl_ms),
  lock_delay_ms = IF(@dlock_granted, :delay_ms, lock_delay_ms),
  holder_limit = IF(@dlock_granted, 1, holder_limit),
  label = IF(@dlock_granted, :label, label)
RETURNING owner, holder_token, CEIL(({until} - {now_us}) / 1000), sharers, waiters, token)sql";

// The lean release: our exclusive holding, of a row without further
// holders, freed in one statement (not one inside its lock-delay), which
// also lets go of the wake-up name: the waiter it wakes waits for this
// row's lock, so it finds the key free. When it frees nothing (the client
// reads the affected rows), the general form says why (another owner's,
// nobody's, shared, a waiter's) and lets go of the name.
constexpr const char* kLeanReleaseSql = R"sql(
UPDATE {t} SET owner = NULL, expires_us = NULL,
               label = IF(RELEASE_LOCK(CONCAT('dlock/', :owner)) IS NULL, label, label)
  WHERE lock_key = :key AND owner = :owner AND sharers = 0
    AND (expires_us > {now_us} OR {until} <= {now_us}))sql";

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

std::string Quote(std::string_view name) { return "`" + std::string(name) + "`"; }

// A holding's end as the sharing rule counts it (its lease, then its
// lock-delay), and whether the first holder's counts, in a procedure.
constexpr const char* kUntil = "(expires_us + lock_delay_ms * 1000)";
constexpr const char* kCounts = "(owner IS NOT NULL AND expires_us + lock_delay_ms * 1000 > v_now)";
// The renew procedure's batch as a table: ["<hex key>", "<owner>", ttl_ms].
constexpr const char* kLeases =
    "JSON_TABLE(p_leases, '$[*]' COLUMNS (k VARCHAR(2048) CHARACTER SET ascii PATH '$[0]', "
    "o CHAR(32) CHARACTER SET ascii PATH '$[1]', ttl BIGINT PATH '$[2]')) AS r";

std::string Fill(const SchemaNames& n, const char* sql,
                 std::map<std::string, std::string> more = {}) {
  more.insert({{"t", n.locks},
               {"h", n.sharers},
               {"q", n.queue},
               {"d", n.done},
               {"b", n.breaks},
               {"s", n.tokens},
               {"p_acquire", n.acquire},
               {"p_release", n.release},
               {"p_renew", n.renew},
               {"p_mark_done", n.mark_done},
               {"p_record_break", n.record_break},
               {"p_sweep", n.sweep},
               {"p_sweep_from", n.sweep_from},
               {"until", kUntil},
               {"count_places", "(SELECT COUNT(*) FROM " + n.queue + " WHERE lock_key = p_key)"},
               {"counts", kCounts},
               {"leases", kLeases},
               {"now_us", kNowUs},
               {"ping_key", HexLiteral(kPingKey)},
               {"version", kSchemaComment}});
  return Substitute(sql, more);
}

// "lock_key >= X'..' AND lock_key < X'..'" (no end: `to` is "NULL").
std::string KeyRange(const std::string& from, const std::string& to) {
  std::string range = "lock_key >= " + from;
  if (to != "NULL") range += " AND lock_key < " + to;
  return range;
}

}  // namespace

SchemaNames::SchemaNames(std::string_view table) {
  const std::string t(table);
  tables = {t, t + "_sharers", t + "_queue", t + "_done", t + "_breaks", t + "_tokens"};
  procedures = {t + "_acquire", t + "_release", t + "_renew", t + "_mark_done",
                t + "_record_break", t + "_sweep", t + "_sweep_from"};
  locks = Quote(tables[0]);
  sharers = Quote(tables[1]);
  queue = Quote(tables[2]);
  done = Quote(tables[3]);
  breaks = Quote(tables[4]);
  tokens = Quote(tables[5]);
  acquire = Quote(procedures[0]);
  release = Quote(procedures[1]);
  renew = Quote(procedures[2]);
  mark_done = Quote(procedures[3]);
  record_break = Quote(procedures[4]);
  sweep = Quote(procedures[5]);
  sweep_from = Quote(procedures[6]);
}

std::string SessionSql(int lock_wait_s) {
  return "SET SESSION time_zone = '+00:00', tx_isolation = 'READ-COMMITTED', autocommit = 1, "
         "innodb_lock_wait_timeout = " +
         std::to_string(lock_wait_s) +
         ", sql_mode = 'STRICT_ALL_TABLES,NO_ZERO_DATE,NO_ENGINE_SUBSTITUTION,"
         "ERROR_FOR_DIVISION_BY_ZERO'";
}

std::string FindSchemaSql(const SchemaNames& names) {
  auto list = [](const std::vector<std::string>& items) {
    std::string out;
    for (const std::string& i : items) out += (out.empty() ? "'" : ", '") + i + "'";
    return out;
  };
  return "SELECT TABLE_NAME, TABLE_COMMENT FROM information_schema.TABLES "
         "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN (" + list(names.tables) + ") "
         "UNION ALL SELECT ROUTINE_NAME, ROUTINE_COMMENT FROM information_schema.ROUTINES "
         "WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_TYPE = 'PROCEDURE' "
         "AND ROUTINE_NAME IN (" + list(names.procedures) + ")";
}

std::vector<std::string> CreateSchemaSql(const SchemaNames& n) {
  std::vector<std::string> out;
  for (const char* sql : {kLocksSql, kSharersSql, kQueueSql, kDoneSql, kBreaksTableSql,
                          kTokensSql, kAcquireSql, kReleaseSql, kRenewSql, kMarkDoneSql,
                          kRecordBreakSql, kSweepFromSql, kSweepSql}) {
    out.push_back(Fill(n, sql));
  }
  return out;
}

std::string CallAcquire(const SchemaNames& n, const std::string& key, const std::string& owner,
                        long long ttl_ms, long long lock_delay_ms, const std::string& label,
                        long long limit, long long queue_ttl_ms) {
  return "CALL " + n.acquire + "(" + key + ", " + owner + ", " + std::to_string(ttl_ms) + ", " +
         std::to_string(lock_delay_ms) + ", " + label + ", " + std::to_string(limit) + ", " +
         std::to_string(queue_ttl_ms) + ")";
}

std::string CallRelease(const SchemaNames& n, const std::string& key, const std::string& owner) {
  return "CALL " + n.release + "(" + key + ", " + owner + ")";
}

std::string CallRenew(const SchemaNames& n, const std::string& leases) {
  return "CALL " + n.renew + "('" + leases + "')";
}

std::string CallMarkDone(const SchemaNames& n, const std::string& key, const std::string& owner,
                         const std::string& keep_ms) {
  return "CALL " + n.mark_done + "(" + key + ", " + owner + ", " + keep_ms + ")";
}

std::string CallRecordBreak(const SchemaNames& n, const std::string& key, const std::string& owner,
                            unsigned long long token, const std::string& label,
                            const std::string& by, unsigned long long break_token,
                            const std::string& keep_ms) {
  return "CALL " + n.record_break + "(" + key + ", " + owner + ", " + std::to_string(token) +
         ", " + label + ", " + by + ", " + std::to_string(break_token) + ", " + keep_ms + ")";
}

namespace {

// A lean form as prepared text: each ":name" becomes "?", and the names in
// that order are what EXECUTE ... USING passes.
struct Lean {
  std::string text;
  std::vector<std::string> order;
};

Lean Parameterise(const std::string& sql) {
  Lean lean;
  for (std::size_t i = 0; i < sql.size(); ++i) {
    if (sql[i] != ':' || i + 1 >= sql.size() || !std::islower(static_cast<unsigned char>(sql[i + 1]))) {
      lean.text += sql[i];
      continue;
    }
    std::size_t end = i + 1;
    while (end < sql.size() && (std::islower(static_cast<unsigned char>(sql[end])) || sql[end] == '_')) ++end;
    lean.order.push_back(sql.substr(i + 1, end - i - 1));
    lean.text += '?';
    i = end - 1;
  }
  return lean;
}

const Lean& LeanAcquire() {
  static const Lean lean = Parameterise(kLeanAcquireSql);
  return lean;
}

const Lean& LeanRelease() {
  static const Lean lean = Parameterise(kLeanReleaseSql);
  return lean;
}

std::string Execute(const char* statement, const Lean& lean,
                    const std::map<std::string, std::string>& literals) {
  std::string sql = std::string("EXECUTE ") + statement + " USING ";
  for (std::size_t i = 0; i < lean.order.size(); ++i) {
    sql += (i > 0 ? ", " : "") + literals.at(lean.order[i]);
  }
  return sql;
}

}  // namespace

std::string PrepareLeanSql(const SchemaNames& n) {
  return "PREPARE dlock_lean_acquire FROM \"" + Fill(n, LeanAcquire().text.c_str()) +
         "\";\nPREPARE dlock_lean_release FROM \"" + Fill(n, LeanRelease().text.c_str()) + "\"";
}

std::string LeanAcquireSql(const std::string& key, const std::string& owner, long long ttl_ms,
                           long long lock_delay_ms, const std::string& label) {
  return Execute("dlock_lean_acquire", LeanAcquire(),
                 {{"key", HexLiteral(key)}, {"owner", "'" + owner + "'"},
                  {"ttl_ms", std::to_string(ttl_ms)}, {"delay_ms", std::to_string(lock_delay_ms)},
                  {"label", HexLiteral(label)}});
}

std::string LeanReleaseSql(const std::string& key, const std::string& owner) {
  return Execute("dlock_lean_release", LeanRelease(),
                 {{"key", HexLiteral(key)}, {"owner", "'" + owner + "'"}});
}

std::string CallSweepFrom(const SchemaNames& n, const std::string& after, int batch,
                          std::chrono::milliseconds limit) {
  const long long ms = std::max<long long>(1, limit.count());
  return "SET STATEMENT max_statement_time = " + std::to_string(ms / 1000) + "." +
         std::to_string(1000 + ms % 1000).substr(1) + " FOR CALL " + n.sweep_from + "(" + after +
         ", " + std::to_string(batch) + ")";
}

std::string SweeperLockSql(const SchemaNames& n, bool take) {
  return std::string(take ? "SELECT GET_LOCK(" : "DO RELEASE_LOCK(") +
         "CONCAT('dlock sweep ', SHA1(CONCAT(DATABASE(), '.', " + HexLiteral(n.tables[0]) +
         ")))" + (take ? ", 0)" : ")");
}

// The floor a lock cycle is measured against: one durable single-row write,
// on a row no lock can use.
std::string PingSql(const SchemaNames& n) {
  return "INSERT INTO " + n.locks + " (lock_key, next_place) VALUES (" + HexLiteral(kPingKey) +
         ", 0) ON DUPLICATE KEY UPDATE next_place = next_place % 1000000000 + 1";
}

std::string ListSql(const SchemaNames& n, const std::string& from, const std::string& to) {
  const std::string range = KeyRange(from, to);
  const char* columns = R"sql(
SELECT lock_key, owner, {token}, CEIL((expires_us - c.now) / 1000), ttl_ms,
       FLOOR((c.now - acquired_us) / 1000), label, holder_limit
FROM )sql";
  return Fill(n, columns, {{"token", "holder_token"}}) + n.locks +
         Fill(n, ", (SELECT {now_us} AS now) AS c WHERE ") + range +
         " AND owner IS NOT NULL AND expires_us > c.now UNION ALL" +
         Fill(n, columns, {{"token", "token"}}) +
         n.sharers + Fill(n, ", (SELECT {now_us} AS now) AS c WHERE ") + range +
         " AND expires_us > c.now ORDER BY 1, 3";
}

std::string WaitersSql(const SchemaNames& n, const std::string& from, const std::string& to) {
  return Fill(n, R"sql(
SELECT lock_key, owner, holder_limit, label, FLOOR((c.now - enqueued_us) / 1000)
FROM {q}, (SELECT {now_us} AS now) AS c
WHERE )sql") + KeyRange(from, to) + " AND expires_us > c.now ORDER BY lock_key, place";
}

std::string CountSql(const SchemaNames& n, const std::string& from, const std::string& to) {
  const std::string range = KeyRange(from, to);
  return "SELECT (SELECT COUNT(*) FROM " + n.locks + " WHERE " + range +
         " AND lock_key <> " + HexLiteral(kPingKey) + ") + (SELECT COUNT(*) FROM " + n.sharers +
         " WHERE " + range + ") + (SELECT COUNT(*) FROM " + n.queue + " WHERE " + range +
         ") + (SELECT COUNT(*) FROM " + n.done + " WHERE " + range +
         ") + (SELECT COUNT(*) FROM " + n.breaks + " WHERE " + range + ")";
}

std::string BreaksSql(const SchemaNames& n, const std::string& from, const std::string& to) {
  return Fill(n, R"sql(
SELECT lock_key, owner, token, label, broken_by, break_token, FLOOR(at_us / 1000)
FROM {b}, (SELECT {now_us} AS now) AS c
WHERE )sql") + KeyRange(from, to) +
         " AND (keep_until_us IS NULL OR keep_until_us > c.now) ORDER BY lock_key, at_us, id";
}

std::string IsDoneSql(const SchemaNames& n, const std::string& key) {
  return Fill(n, "SELECT 1 FROM {d} WHERE lock_key = ") + key +
         Fill(n, " AND (keep_until_us IS NULL OR keep_until_us > {now_us})");
}

}  // namespace dlock::mariadb
