#include "backends/postgres/pg_sweeper.h"

#include <utility>

#include "backends/postgres/pg_values.h"

namespace dlock::postgres {
namespace {

using SteadyClock = std::chrono::steady_clock;

SteadyTime::rep Ticks(SteadyTime t) { return t.time_since_epoch().count(); }
SteadyTime FromTicks(SteadyTime::rep ticks) { return SteadyTime(SteadyTime::duration(ticks)); }

// The number a sweep's answer carries (its last result).
Result<std::int64_t> SweptRows(const PGresult* last, const std::string& what,
                               std::string_view where) {
  DLOCK_RETURN_IF_ERROR(CheckShape(last, 1, 1, what, where));
  return IntValue(last, 0, 0);
}

}  // namespace

Sweeper::Sweeper(ConnInfo info, std::string sql, std::string what,
                 std::chrono::milliseconds call_timeout, std::string where)
    : info_(std::move(info)),
      // Durable as every dlock session (the sweep raises the token
      // sequence): said in each batch, so that opening the connection
      // needs no round trip of its own.
      sql_("SET synchronous_commit TO on;" + sql),
      what_(std::move(what)),
      call_timeout_(call_timeout),
      where_(std::move(where)) {}

bool Sweeper::NoteRelease() {
  const SteadyTime now = SteadyClock::now();
  released_at_.store(Ticks(now), std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  if (planned_) return false;
  planned_ = true;
  next_round_ = now + kSweepEvery;
  return true;
}

Listener::Chore::Next Sweeper::Step() {
  const SteadyTime now = SteadyClock::now();
  if (connecting_) return Connecting(now);
  if (in_flight_) return Collect(now);
  {
    std::lock_guard lock(mu_);
    if (!planned_) return {};
    if (now < next_round_) return {next_round_, -1};
  }
  // A row is swept once its key was last granted kSweepEvery ago: only a
  // round that began that long after the last release may be the last.
  round_released_ = released_at_.load();
  round_all_aged_ = now - FromTicks(round_released_) >= kSweepEvery;
  batches_ = 0;
  return SendBatch(now);
}

Listener::Chore::Next Sweeper::SendBatch(SteadyTime now) {
  if (!conn_) {
    conn_ = StartConnect(info_);
    if (!conn_ || PQstatus(conn_.get()) == CONNECTION_BAD) return Abandon(now);
    connecting_ = true;
    // As if PQconnectPoll had asked for writability (libpq's documented start).
    connect_status_ = PGRES_POLLING_WRITING;
    connect_deadline_ = now + call_timeout_;
    return Connecting(now);
  }
  if (PQsendQuery(conn_.get(), sql_.c_str()) == 0) return Abandon(now);
  in_flight_ = true;
  failed_ = false;
  batch_deadline_ = now + call_timeout_;
  ++batches_;
  return Flush(now);
}

Listener::Chore::Next Sweeper::Connecting(SteadyTime now) {
  for (;;) {
    if (connect_status_ == PGRES_POLLING_FAILED) return Abandon(now);
    if (connect_status_ == PGRES_POLLING_OK) break;
    // PQconnectPoll only once the socket is ready the way it asked.
    const short events = connect_status_ == PGRES_POLLING_READING ? POLLIN : POLLOUT;
    const int fd = PQsocket(conn_.get());
    if (fd >= 0 && PollFd(fd, events, now) == 0) {
      if (now >= connect_deadline_) return Abandon(now);
      return {connect_deadline_, fd, events};
    }
    connect_status_ = PQconnectPoll(conn_.get());
  }
  connecting_ = false;
  if (!FinishConnect(conn_.get())) return Abandon(now);
  return SendBatch(now);
}

Listener::Chore::Next Sweeper::Flush(SteadyTime now) {
  // Non-blocking: a query the socket did not take at once goes on later.
  const int unsent = PQflush(conn_.get());
  if (unsent < 0) return Abandon(now);
  if (unsent == 0) return {batch_deadline_, PQsocket(conn_.get()), POLLIN};
  if (now >= batch_deadline_) return Abandon(now);
  return {batch_deadline_, PQsocket(conn_.get()), POLLIN | POLLOUT};
}

Listener::Chore::Next Sweeper::Collect(SteadyTime now) {
  if (PQflush(conn_.get()) != 0) return Flush(now);
  if (PQconsumeInput(conn_.get()) == 0) return Abandon(now);
  // The sweep is three statements (the SET, its DO block, the count):
  // their results may come in different steps; all have come when
  // PQgetResult answers null.
  while (PQisBusy(conn_.get()) == 0) {
    PgResultHandle result(PQgetResult(conn_.get()));
    if (!result) return Collected(now);
    const ExecStatusType status = PQresultStatus(result.get());
    if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK) {
      last_ = std::move(result);
    } else {
      failed_ = true;
    }
  }
  if (now >= batch_deadline_) return Abandon(now);
  return {batch_deadline_, PQsocket(conn_.get()), POLLIN};
}

Listener::Chore::Next Sweeper::Collected(SteadyTime now) {
  in_flight_ = false;
  if (PQtransactionStatus(conn_.get()) != PQTRANS_IDLE) return Abandon(now);
  const Result<std::int64_t> swept = failed_ || !last_ ? Result<std::int64_t>(InternalError(what_))
                                                       : SweptRows(last_.get(), what_, where_);
  last_.reset();
  const bool more = swept.ok() && *swept == kSweepBatch;
  if (more && batches_ < kSweepBatchesPerRound) return SendBatch(now);
  // A sweep kept out (lock_timeout) or cut short is tried next round.
  return EndRound(now, !swept.ok() || more);
}

Listener::Chore::Next Sweeper::Abandon(SteadyTime now) {
  // Cut off, refused or timed out: the next round starts afresh. (A batch
  // the server is still running goes on to its end there.)
  conn_.reset();
  last_.reset();
  connecting_ = false;
  in_flight_ = false;
  return EndRound(now, true);
}

Listener::Chore::Next Sweeper::EndRound(SteadyTime now, bool failed) {
  SteadyTime::rep released = round_released_;
  const bool done = round_all_aged_ && !failed && released_at_.compare_exchange_strong(released, 0);
  std::lock_guard lock(mu_);
  // A release since the swap keeps the rounds going: its NoteRelease saw
  // planned_ and told nobody.
  if (done && released_at_.load() == 0) {
    planned_ = false;
    return {};
  }
  next_round_ = now + kSweepEvery;
  return {next_round_, -1};
}

bool Sweeper::LastBatch(SteadyTime deadline) {
  if (connecting_) conn_.reset();  // not worth finishing now
  connecting_ = false;
  if (!conn_) return false;
  if (!in_flight_) {
    (void)BatchOn(conn_, deadline);
    return true;
  }
  // The round's batch is the last one: its end, within the deadline. It
  // holds the table lock another batch would wait for.
  batch_deadline_ = std::min(batch_deadline_, deadline);
  batches_ = kSweepBatchesPerRound;  // and no other after it
  for (Next next = Collect(SteadyClock::now()); in_flight_; next = Collect(SteadyClock::now())) {
    PollFd(next.fd, next.events, next.at);
  }
  return true;
}

Result<std::int64_t> Sweeper::BatchOn(PgConnHandle& conn, SteadyTime deadline) {
  auto swept = PQsendQuery(conn.get(), sql_.c_str()) == 0
                   ? Result<PgResultHandle>(FromPg(conn.get(), nullptr, what_, where_))
                   : Await(conn.get(), deadline, what_, where_);
  if (PQstatus(conn.get()) != CONNECTION_OK || PQtransactionStatus(conn.get()) != PQTRANS_IDLE) {
    conn.reset();  // cut off or timed out mid-sweep: start the next one afresh
  }
  if (!swept.ok()) return swept.status();
  return SweptRows(swept->get(), what_, where_);
}

}  // namespace dlock::postgres
