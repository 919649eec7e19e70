// Sweeper: deletes the rows of keys nobody holds (postgres_sql.cc,
// SweepSql) for one PostgreSQL backend, so that a key leaves nothing
// behind, without a thread of its own.
//
// Every kSweepEvery while the backend released something not yet swept, a
// round sends batches (each deletes at most kSweepBatch rows) while they
// come back full, a bounded number per round. The backend's Listener thread
// drives it as its chore (Listener::Chore): Step() connects, sends a batch
// and reads its answer without ever waiting on the server, and the thread
// polls the sweep's socket beside its LISTEN socket, so a sweep never holds
// up a hand-off's wake-up. The sweep runs on a connection of its own,
// opened at its first round and again after a failure (a renewal must
// never queue behind a sweep for the backend's operations connection).
//
// Thread-safety: NoteRelease() and Released() from any thread; Step() on
// the listener's thread; LastBatch() once that thread has stopped.
#ifndef DLOCK_SRC_BACKENDS_POSTGRES_PG_SWEEPER_H_
#define DLOCK_SRC_BACKENDS_POSTGRES_PG_SWEEPER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

#include "backends/postgres/pg_listener.h"
#include "backends/postgres/pg_util.h"

namespace dlock::postgres {

// How often, and how much at a time. A batch keeps grants out for as long
// as its DELETE of at most kSweepBatch rows by primary key takes
// (milliseconds).
inline constexpr std::chrono::milliseconds kSweepEvery{5000};
inline constexpr int kSweepBatch = 200;
inline constexpr int kSweepBatchesPerRound = 50;

class Sweeper final : public Listener::Chore {
 public:
  // `sql`: SweepSql for the backend's tables, kSweepBatch, kSweepEvery.
  Sweeper(ConnInfo info, std::string sql, std::string what, std::chrono::milliseconds call_timeout,
          std::string where);

  // The backend freed a row (a release, or a record that expires): a round
  // is due kSweepEvery from now. True when no round was planned, so the
  // listener must be told (Listener::ChoreDue).
  bool NoteRelease();
  // Whether something released is not yet swept.
  bool Released() const { return released_at_.load() != 0; }

  Next Step() override;

  // As the backend closes: one batch, before `deadline`, on the sweeper's
  // own connection, or the end of the one in flight there. False, having
  // done nothing, when it has no connection.
  bool LastBatch(SteadyTime deadline);
  // One batch on another connection (the backend's), waiting for it: how
  // many rows it deleted. `conn` is dropped (reset) when the batch left it
  // in an unknown state.
  Result<std::int64_t> BatchOn(PgConnHandle& conn, SteadyTime deadline);

 private:
  // Sends the next batch of the round, connecting first if needed.
  Next SendBatch(SteadyTime now);
  // Opening the connection: as far as its socket allows now.
  Next Connecting(SteadyTime now);
  // The batch's query is (partly) sent: the rest, then its answer.
  Next Flush(SteadyTime now);
  // A batch is in flight: its answer, or keep polling.
  Next Collect(SteadyTime now);
  // Every result of the batch has come.
  Next Collected(SteadyTime now);
  // The round ended (failed: a batch failed or rows were left over).
  Next EndRound(SteadyTime now, bool failed);
  // Drops the connection and ends the round as failed.
  Next Abandon(SteadyTime now);

  const ConnInfo info_;
  const std::string sql_;
  const std::string what_;
  const std::chrono::milliseconds call_timeout_;
  const std::string where_;

  // When the backend last freed a row (steady clock ticks); 0 when every
  // row it freed has been swept since.
  std::atomic<SteadyTime::rep> released_at_{0};
  std::mutex mu_;         // guards the two below
  bool planned_ = false;  // a round is planned or runs, and will see a new release
  SteadyTime next_round_{};

  // The listener's thread's alone (LastBatch's once it stopped).
  PgConnHandle conn_;
  bool connecting_ = false;  // conn_ is being opened
  PostgresPollingStatusType connect_status_ = PGRES_POLLING_WRITING;
  SteadyTime connect_deadline_{};
  bool in_flight_ = false;
  PgResultHandle last_;  // the batch's last good result so far
  bool failed_ = false;  // ... and whether one was an error
  SteadyTime batch_deadline_{};
  int batches_ = 0;                     // in this round
  SteadyTime::rep round_released_ = 0;  // released_at_ as the round began
  bool round_all_aged_ = false;         // ... and it was kSweepEvery old
};

}  // namespace dlock::postgres

#endif  // DLOCK_SRC_BACKENDS_POSTGRES_PG_SWEEPER_H_
