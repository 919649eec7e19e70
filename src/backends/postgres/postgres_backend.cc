#include "backends/postgres/postgres_backend.h"

#include <libpq-fe.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stop_token>

#include "backends/postgres/pg_listener.h"
#include "backends/postgres/pg_util.h"
#include "backends/postgres/pg_values.h"
#include "backends/postgres/postgres_backend_impl.h"
#include "backends/postgres/postgres_sql.h"
#include "core/duration.h"
#include "core/key_range.h"
#include "core/tls_files.h"

namespace dlock::postgres {
namespace {

using std::chrono::milliseconds;

// A renewal waits at most this fraction of its shortest TTL (and at least
// kMinRenewBudget): a renewal answered later is useless anyway (the core
// retries at ttl/10), and one stuck for long would hold up loss detection.
constexpr int kRenewBudgetDivisor = 10;
constexpr milliseconds kMinRenewBudget{20};

// Whether kCheckSql's answer names a table that exists with no comment.
bool FoundWithoutComment(const PGresult* r) {
  for (const auto& [exists, comment] : {std::pair{0, 1}, {2, 3}, {5, 6}, {7, 8}}) {
    if (Value(r, 0, exists) == "t" && Value(r, 0, comment).empty()) return true;
  }
  return false;
}

// The last batch of the sweep (pg_sweeper.h), as the backend closes: at
// most this long.
constexpr milliseconds kLastSweepWithin{200};

// A table name as a quoted SQL identifier (IsTableName admits no '"').
std::string QuoteIdentifier(std::string_view name) { return "\"" + std::string(name) + "\""; }

// Runs `sql` on a connection being set up (before any PREPARE), with text
// parameters.
Result<PgResultHandle> Exec(PGconn* conn, const std::string& sql,
                            const std::vector<std::string>& args, SteadyTime deadline,
                            const std::string& what, std::string_view where) {
  std::vector<const char*> values;
  for (const std::string& a : args) values.push_back(a.c_str());
  const int sent = args.empty()
                       ? PQsendQuery(conn, sql.c_str())
                       : PQsendQueryParams(conn, sql.c_str(), static_cast<int>(values.size()),
                                           nullptr, values.data(), nullptr, nullptr, 0);
  if (sent == 0) return FromPg(conn, nullptr, what, where);
  return Await(conn, deadline, what, where);
}

}  // namespace

PostgresBackend::PostgresBackend(PostgresOptions options)
    : options_(std::move(options)),
      clock_(options_.clock ? options_.clock : DefaultClock()),
      tables_{QuoteIdentifier(options_.table), QuoteIdentifier(options_.table + "_queue"),
              QuoteIdentifier(options_.table + "_done"),
              QuoteIdentifier(options_.table + "_tokens"),
              QuoteIdentifier(options_.table + "_breaks")},
      sweeper_(options_.conninfo, SweepSql(tables_, kSweepBatch, kSweepEvery),
               "sweep free rows from " + tables_.locks, options_.connect_timeout,
               options_.describe),
      listener_(options_.conninfo, options_.table, options_.connect_timeout, options_.describe,
                &sweeper_) {}

PostgresBackend::~PostgresBackend() {
  listener_.Stop();  // and with it the sweep's rounds
  LastSweep();
}

Status PostgresBackend::Init() {
  std::unique_lock lock(mu_);
  DLOCK_RETURN_IF_ERROR(
      EnsureConnectedLocked(SteadyClock::now() + options_.connect_timeout, "open the lock store"));
  return Status::Ok();
}

Status PostgresBackend::SetUpSessionLocked(PGconn* conn, SteadyTime deadline) {
  DLOCK_ASSIGN_OR_RETURN(const bool create, CheckTablesLocked(conn, deadline));
  if (create) {
    DLOCK_RETURN_IF_ERROR(CreateTablesLocked(conn, deadline));
  }
  return Exec(conn, PrepareStatementsSql(tables_), {}, deadline, "prepare statements",
              options_.describe)
      .status();
}

Result<bool> PostgresBackend::CheckTablesLocked(PGconn* conn, SteadyTime deadline) {
  const std::string& where = options_.describe;
  PgResultHandle check;
  // A table another client has just created can be in the catalog
  // (to_regclass) before this statement's snapshot sees its comment; a
  // second look, with a new snapshot, sees both. A table without a comment
  // the second time is not dlock's.
  for (int look = 0; look < 2; ++look) {
    DLOCK_ASSIGN_OR_RETURN(
        check, Exec(conn, kCheckSql, {tables_.locks, tables_.queue, tables_.done, tables_.breaks},
                    deadline, "check the lock tables", where));
    DLOCK_RETURN_IF_ERROR(CheckShape(check.get(), 9, 1, "check the lock tables", where));
    if (!FoundWithoutComment(check.get())) break;
  }
  const PGresult* r = check.get();
  const bool have_locks = Value(r, 0, 0) == "t";
  const bool have_queue = Value(r, 0, 2) == "t";
  const bool have_done = Value(r, 0, 5) == "t";
  const bool have_breaks = Value(r, 0, 7) == "t";
  // Tables of earlier schemas are migrated (CreateTablesSql).
  const bool old_locks = have_locks && (Value(r, 0, 1) == kLocksCommentV1 ||
                                        Value(r, 0, 1) == kLocksCommentV2);
  const bool old_queue = have_queue && Value(r, 0, 3) == kQueueCommentV1;
  const bool old_done = have_done && Value(r, 0, 6) == kDoneCommentV2;
  auto verify = [&](bool exists, int col, const char* comment, const std::string& name) {
    const std::string found = Value(r, 0, col);
    if (exists && found != comment && found != kLocksCommentV1 && found != kLocksCommentV2 &&
        found != kQueueCommentV1 && found != kDoneCommentV2) {
      return FailedPreconditionError(
          "table " + name + " on " + where + " exists but is not a dlock table ('" + comment +
          "' expected as its comment, found '" + found + "'); choose another with ?table=NAME");
    }
    return Status::Ok();
  };
  DLOCK_RETURN_IF_ERROR(verify(have_locks, 1, kLocksComment, tables_.locks));
  DLOCK_RETURN_IF_ERROR(verify(have_queue, 3, kQueueComment, tables_.queue));
  DLOCK_RETURN_IF_ERROR(verify(have_done, 6, kDoneComment, tables_.done));
  DLOCK_RETURN_IF_ERROR(verify(have_breaks, 8, kBreaksComment, tables_.breaks));
  return !have_locks || !have_queue || !have_done || !have_breaks || old_locks || old_queue ||
         old_done;
}

Status PostgresBackend::CreateTablesLocked(PGconn* conn, SteadyTime deadline) {
  const std::string& where = options_.describe;
  const std::uint64_t lock_id = KeyHash("dlock schema " + options_.table) >> 1;
  auto created = Exec(conn, CreateTablesSql(tables_, lock_id), {}, deadline,
                      "create the lock tables " + tables_.locks, where);
  if (created.ok()) return Status::Ok();
  // A failed statement inside BEGIN leaves the transaction open.
  (void)Exec(conn, "ROLLBACK", {}, deadline, "roll back", where);
  return created.status();
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

Result<std::unique_lock<TimedMutex>> PostgresBackend::TakeConnection(SteadyTime deadline,
                                                                     const std::string& what) {
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
  return lock;
}

Result<PgResultHandle> PostgresBackend::Run(const char* name, const Params& params,
                                            SteadyTime deadline, const std::string& what) {
  DLOCK_ASSIGN_OR_RETURN(std::unique_lock<TimedMutex> lock, TakeConnection(deadline, what));
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

Result<PipelineOutcome> PostgresBackend::RunMany(std::span<const PreparedCall> calls,
                                                 SteadyTime deadline, const std::string& what) {
  DLOCK_ASSIGN_OR_RETURN(std::unique_lock<TimedMutex> lock, TakeConnection(deadline, what));
  auto outcome = RunPipeline(conn_.get(), calls, deadline, what, options_.describe);
  // Cut off mid-pipeline, the connection is in no state to reuse.
  if (!outcome.ok()) conn_.reset();
  return outcome;
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

Result<Attempt> ReadAttempt(const PGresult* r, int columns, const std::string& what,
                            const std::string& where) {
  DLOCK_RETURN_IF_ERROR(CheckShape(r, columns, 1, what, where));
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

Params PostgresBackend::AttemptParams(const LeaseRequest& request, const QueueArgs* queue) const {
  Params params;
  params.Bytes(request.key)
      .Text(request.owner.ToString())
      .Int(request.ttl.count())
      .Int(request.lock_delay.count())
      .Text(request.label)
      .Int(static_cast<std::int64_t>(request.limit));
  if (queue != nullptr) {
    params.Int(request.queue_ttl.count())
        .Text(ChannelName(options_.table, queue->key_hash))
        .Text(KeyHashText(queue->key_hash))
        .Text(queue->may_nudge ? "t" : "f");
  }
  return params;
}

SingleForm FirstSingleForm(const LeaseRequest& request) {
  return request.limit == 1 ? SingleForm::kLean : SingleForm::kFresh;
}

SingleForm NextSingleForm(SingleForm form) {
  return form == SingleForm::kLean ? SingleForm::kFresh : SingleForm::kTemplate;
}

const char* SingleStatement(SingleForm form) {
  switch (form) {
    case SingleForm::kLean: return "dlock_acquire_once_lean";
    case SingleForm::kFresh: return "dlock_acquire_once_fresh";
    case SingleForm::kTemplate: break;
  }
  return "dlock_acquire_once";
}

Result<std::optional<Attempt>> ReadSingle(SingleForm form, const PGresult* r,
                                          const std::string& what, const std::string& where) {
  switch (form) {
    case SingleForm::kLean:
      DLOCK_RETURN_IF_ERROR(CheckShape(r, 3, 1, what, where));
      if (Value(r, 0, 2) == "t") return std::optional<Attempt>();  // no row, or sharers
      break;
    case SingleForm::kFresh: {
      DLOCK_RETURN_IF_ERROR(CheckShape(r, 1, 0, what, where));
      if (PQntuples(r) == 0) return std::optional<Attempt>();  // a row, or waiters
      Attempt granted;
      granted.granted = true;
      granted.token = static_cast<FencingToken>(IntValue(r, 0, 0));
      return std::optional<Attempt>(granted);
    }
    case SingleForm::kTemplate:
      break;
  }
  DLOCK_ASSIGN_OR_RETURN(Attempt attempt,
                         ReadAttempt(r, form == SingleForm::kLean ? 3 : 2, what, where));
  return std::optional<Attempt>(attempt);
}

Result<Attempt> PostgresBackend::RunAttempt(const LeaseRequest& request, const QueueArgs* queue) {
  const Params params = AttemptParams(request, queue);
  const std::string what = "acquire " + request.key;
  const SteadyTime deadline = CallDeadline();
  if (queue == nullptr) {
    for (SingleForm form = FirstSingleForm(request);; form = NextSingleForm(form)) {
      DLOCK_ASSIGN_OR_RETURN(PgResultHandle r, Run(SingleStatement(form), params, deadline, what));
      DLOCK_ASSIGN_OR_RETURN(std::optional<Attempt> decided,
                             ReadSingle(form, r.get(), what, options_.describe));
      if (decided) return *decided;
    }
  }
  if (request.limit == 1) {
    // The lean form first; the template when it cannot decide (no row for
    // the key yet, or sharers in it).
    DLOCK_ASSIGN_OR_RETURN(PgResultHandle lean, Run("dlock_acquire_lean", params, deadline, what));
    DLOCK_RETURN_IF_ERROR(CheckShape(lean.get(), 3, 1, what, options_.describe));
    if (Value(lean.get(), 0, 2) != "t") return ReadAttempt(lean.get(), 3, what, options_.describe);
  }
  DLOCK_ASSIGN_OR_RETURN(PgResultHandle full, Run("dlock_acquire", params, deadline, what));
  return ReadAttempt(full.get(), 2, what, options_.describe);
}

Params PostgresBackend::ReleaseParams(std::string_view key, const std::string& owner) const {
  const std::uint64_t hash = KeyHash(key);
  Params params;
  params.Bytes(key).Text(owner).Text(ChannelName(options_.table, hash)).Text(KeyHashText(hash));
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
    NoteReleaseForSweep();
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
  return ReadRelease(result.get(), what);
}

Status PostgresBackend::ReadRelease(const PGresult* r, const std::string& what) {
  NoteReleaseForSweep();
  DLOCK_RETURN_IF_ERROR(CheckShape(r, 2, 1, what, options_.describe));
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

bool PostgresAcquisition::Notify(std::function<void()> wake) {
  if (!waiting() || granted_) return false;
  return backend_.listener_.Notify(waiter_, std::move(wake));
}

void PostgresAcquisition::StopNotify() {
  if (waiting()) backend_.listener_.StopNotify(waiter_);
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

// A session the server ended is opened again before the renewal's own
// short budget starts, with the time left until the first of `leases` runs
// out (at least `budget`, at most connect_timeout). Under load a new
// session (a server process forked, authentication, dlock's statements
// prepared) can take longer than that budget; cut off there, every retry
// would start one from nothing, and the leases were lost with the server
// up all along (PostgresFaultTest.KilledSessionIsReplacedAndTheLeaseKept
// beside a CPU hog).
Status PostgresBackend::ReconnectForRenewal(std::span<const LeaseRequest> leases,
                                            milliseconds budget) {
  const SteadyTime now = SteadyClock::now();
  TimePoint first_out = TimePoint::max();
  for (const LeaseRequest& l : leases) first_out = std::min(first_out, l.deadline);
  SteadyTime deadline = now + options_.connect_timeout;
  if (first_out != TimePoint::max()) {
    deadline = std::min(deadline, now + std::chrono::duration_cast<SteadyClock::duration>(
                                            first_out - clock_->Now()));
  }
  auto lock = TakeConnection(std::max(deadline, now + budget), "renew");
  return lock.status();
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
  if (Status connected = ReconnectForRenewal(leases, budget); !connected.ok()) {
    for (Status& r : result) {
      if (r.ok()) r = connected;
    }
    return result;
  }
  const SteadyTime deadline = SteadyClock::now() + budget;
  std::set<std::pair<std::string, std::string>> done;
  Status failure;
  for (const Round& round : rounds) {
    Params params;
    params.Text(ArrayLiteral(round.keys))
        .Text(ArrayLiteral(round.owners))
        .Text(ArrayLiteral(round.ttls));
    auto renewed = Run("dlock_renew", params, deadline, "renew");
    const Status answered = renewed.ok()
                                ? CheckShape(renewed->get(), 2, 0, "renew", options_.describe)
                                : renewed.status();
    if (!answered.ok()) {
      // One statement: when it failed, none of its renewals happened.
      failure = answered;
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
  const std::optional<std::string> end = internal::PrefixEnd(prefix);
  Params params;
  params.Bytes(prefix);
  if (end) {
    params.Bytes(*end);
    return Run(statement, params, CallDeadline(), what);
  }
  params.Null();
  return Run((std::string(statement) + "_to_end").c_str(), params, CallDeadline(), what);
}

Result<std::uint64_t> PostgresBackend::StoredObjects(std::string_view prefix) {
  const std::string what = "count the rows for '" + std::string(prefix) + "'";
  DLOCK_ASSIGN_OR_RETURN(PgResultHandle result, RunForPrefix("dlock_count", prefix, what));
  DLOCK_RETURN_IF_ERROR(CheckShape(result.get(), 1, 1, what, options_.describe));
  return static_cast<std::uint64_t>(IntValue(result.get(), 0, 0));
}

void PostgresBackend::NoteReleaseForSweep() {
  if (sweeper_.NoteRelease()) listener_.ChoreDue();
}

// A process that lives for one lock (`dlock exec`, `dlock once`) never
// reaches a round: one batch on the way out, so that what earlier such
// processes left goes with it, bounded so that exit stays quick. On the
// backend's connection unless the sweeper opened one: nothing else runs now.
void PostgresBackend::LastSweep() {
  if (!sweeper_.Released()) return;
  const SteadyTime deadline = SteadyClock::now() + kLastSweepWithin;
  if (sweeper_.LastBatch(deadline)) return;
  std::unique_lock busy(mu_, std::defer_lock);
  if (!busy.try_lock_until(deadline) || awaiting_stale_reply_ || !conn_) return;
  // Usually there is nothing to sweep: ask first with a small prepared
  // statement rather than have the server compile the sweep's DO block
  // while the next `dlock exec` in line is being granted.
  if (!SweepDueLocked(deadline)) return;
  (void)sweeper_.BatchOn(conn_, deadline);
}

bool PostgresBackend::SweepDueLocked(SteadyTime deadline) {
  Params params;
  params.Int(kSweepEvery.count());
  std::vector<const char*> values;
  std::vector<int> lengths;
  params.Fill(&values, &lengths);
  if (PQsendQueryPrepared(conn_.get(), "dlock_sweep_due", params.size(), values.data(),
                          lengths.data(), params.formats(), 0) == 0) {
    return false;
  }
  auto due = Await(conn_.get(), deadline, "ask whether to sweep", options_.describe);
  // Cut off or failed: the connection goes with the backend anyway.
  return due.ok() && PQntuples(due->get()) == 1 && PQnfields(due->get()) == 1 &&
         Value(due->get(), 0, 0) == "t";
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
  DLOCK_ASSIGN_OR_RETURN(PgResultHandle result, RunForPrefix("dlock_list", prefix, what));
  const PGresult* r = result.get();
  DLOCK_RETURN_IF_ERROR(CheckShape(r, 8, 0, what, options_.describe));
  std::vector<HolderInfo> holders;
  for (int row = 0; row < PQntuples(r); ++row) {
    HolderInfo info;
    DLOCK_RETURN_IF_ERROR(ReadKeyAndOwner(r, row, tables_.locks, what, &info.key, &info.owner));
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
  DLOCK_ASSIGN_OR_RETURN(PgResultHandle result, RunForPrefix("dlock_waiters", prefix, what));
  const PGresult* r = result.get();
  DLOCK_RETURN_IF_ERROR(CheckShape(r, 5, 0, what, options_.describe));
  std::vector<WaiterInfo> waiters;
  for (int row = 0; row < PQntuples(r); ++row) {
    WaiterInfo info;
    DLOCK_RETURN_IF_ERROR(ReadKeyAndOwner(r, row, tables_.queue, what, &info.key, &info.owner));
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
  DLOCK_ASSIGN_OR_RETURN(PgResultHandle result, Run("dlock_is_done", params, CallDeadline(),
                                                    "read the done mark of " + std::string(key)));
  return PQntuples(result.get()) > 0;
}

// Committed durably (the session's synchronous_commit is on) before it
// returns OK.
Status PostgresBackend::MarkDone(std::string_view key, const OwnerId& owner,
                                 std::chrono::milliseconds keep) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(key));
  const std::string what = "mark " + std::string(key) + " done";
  Params params;
  params.Bytes(key).Text(owner.ToString());
  if (keep == kKeepDoneForever) {
    params.Null();
  } else {
    params.Text(std::to_string(keep.count()));
  }
  NoteReleaseForSweep();  // records expire by sweep
  DLOCK_ASSIGN_OR_RETURN(PgResultHandle result,
                         Run("dlock_mark_done", params, CallDeadline(), what));
  if (PQntuples(result.get()) == 0) {
    return NotOwnerError(what + ": this owner no longer holds the lock");
  }
  return Status::Ok();
}

Status PostgresBackend::RecordBreak(const BreakRecord& record, std::chrono::milliseconds keep) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(record.key));
  Params params;
  params.Bytes(record.key).Text(record.owner.ToString()).Text(std::to_string(record.token))
      .Text(record.label).Text(record.by).Text(std::to_string(record.break_token));
  if (keep == kKeepDoneForever) {
    params.Null();
  } else {
    params.Text(std::to_string(keep.count()));
  }
  return Run("dlock_record_break", params, CallDeadline(),
             "record the break of " + std::string(record.key))
      .status();
}

Result<std::vector<BreakRecord>> PostgresBackend::Breaks(std::string_view prefix) {
  const std::string what = "list the breaks of '" + std::string(prefix) + "'";
  DLOCK_ASSIGN_OR_RETURN(PgResultHandle result, RunForPrefix("dlock_breaks", prefix, what));
  const PGresult* r = result.get();
  DLOCK_RETURN_IF_ERROR(CheckShape(r, 7, 0, what, options_.describe));
  std::vector<BreakRecord> records;
  for (int row = 0; row < PQntuples(r); ++row) {
    BreakRecord b;
    DLOCK_RETURN_IF_ERROR(ReadKeyAndOwner(r, row, tables_.breaks, what, &b.key, &b.owner));
    b.token = static_cast<FencingToken>(IntValue(r, row, 2));
    b.label = Value(r, row, 3);
    b.by = Value(r, row, 4);
    b.break_token = static_cast<FencingToken>(IntValue(r, row, 5));
    b.at_unix_ms = IntValue(r, row, 6);
    records.push_back(std::move(b));
  }
  return records;
}

namespace {

// [a-z_][a-z0-9_]{0,55}: a plain identifier that needs no quoting rules
// beyond double quotes, and leaves room for the "_tokens" suffix.
bool IsTableName(std::string_view name) {
  if (name.empty() || name.size() > 56) return false;
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

Status BadUri(const internal::Uri& uri, const std::string& why) {
  return InvalidArgumentError("bad PostgreSQL URI '" + uri.Redacted() + "': " + why);
}

// One item of a host list, "h", "h:5432", "[::1]" or "[::1]:5433".
Status SplitHostPort(const internal::Uri& uri, std::string_view item, std::string_view* host,
                     std::string_view* port) {
  *host = item;
  *port = {};
  if (!item.empty() && item.front() == '[') {
    const std::size_t close = item.find(']');
    if (close == std::string_view::npos) {
      return BadUri(uri, "unclosed '[' in host '" + std::string(item) + "'");
    }
    *host = item.substr(1, close - 1);
    if (close + 1 < item.size()) {
      if (item[close + 1] != ':') {
        return BadUri(uri, "junk after ']' in host '" + std::string(item) + "'");
      }
      *port = item.substr(close + 2);
    }
  } else if (const std::size_t colon = item.rfind(':'); colon != std::string_view::npos) {
    *host = item.substr(0, colon);
    *port = item.substr(colon + 1);
  }
  if (!port->empty() && !std::all_of(port->begin(), port->end(), ::isdigit)) {
    return BadUri(uri, "port '" + std::string(*port) + "' is not a number");
  }
  return Status::Ok();
}

// "h1:5432,[::1]:5433,h3" -> host "h1,::1,h3", port "5432,5433,".
Status AddHosts(const internal::Uri& uri, ConnInfo* info) {
  if (uri.hosts.empty()) return Status::Ok();
  std::string hosts, ports;
  bool any_port = false;
  std::size_t start = 0;
  while (start <= uri.hosts.size()) {
    std::size_t comma = uri.hosts.find(',', start);
    if (comma == std::string::npos) comma = uri.hosts.size();
    std::string_view host, port;
    DLOCK_RETURN_IF_ERROR(SplitHostPort(
        uri, std::string_view(uri.hosts.data() + start, comma - start), &host, &port));
    if (start > 0) {
      hosts += ',';
      ports += ',';
    }
    hosts += host;
    ports += port;
    any_port = any_port || !port.empty();
    start = comma + 1;
  }
  info->emplace_back("host", hosts);
  if (any_port) info->emplace_back("port", ports);
  return Status::Ok();
}

// dlock's TLS file names (every store's: cacert=, cert=, key=) and libpq's
// own for the same files; libpq reads them at each connect, so a rotated
// certificate is used from the next connection on.
constexpr std::pair<const char*, const char*> kTlsNames[] = {
    {"cacert", "sslrootcert"}, {"cert", "sslcert"}, {"key", "sslkey"}};

// cacert=, cert=, key= as libpq's keywords. Naming a CA asks for the
// server's certificate and name to be checked: sslmode=verify-full unless
// the URI says otherwise.
Status AddTlsFiles(const internal::Uri& uri, ConnInfo* info) {
  DLOCK_ASSIGN_OR_RETURN(internal::TlsFiles files, internal::TlsFilesFromUri(uri, true, "postgres"));
  for (const auto& [ours, libpq] : kTlsNames) {
    if (uri.Param(ours) != nullptr && uri.Param(libpq) != nullptr) {
      return BadUri(uri, std::string(ours) + "= and " + libpq + "= name the same file: give one");
    }
  }
  if (!files.ca_file.empty()) info->emplace_back("sslrootcert", files.ca_file);
  if (!files.cert_file.empty()) {
    info->emplace_back("sslcert", files.cert_file);
    info->emplace_back("sslkey", files.key_file);
  }
  if (!files.ca_file.empty() && uri.Param("sslmode") == nullptr) {
    info->emplace_back("sslmode", "verify-full");
  }
  return Status::Ok();
}

bool IsTlsName(std::string_view k) {
  return std::any_of(std::begin(kTlsNames), std::end(kTlsNames),
                     [&](const auto& names) { return k == names.first; });
}

// The URI's parameters: `table`, dlock's, and libpq's keywords, passed
// through, with dlock's defaults for those it left out.
Status AddParameters(const internal::Uri& uri, PostgresOptions* options) {
  static const std::set<std::string> keywords = LibpqKeywords();
  ConnInfo& info = options->conninfo;
  DLOCK_RETURN_IF_ERROR(AddTlsFiles(uri, &info));
  bool have_application_name = false, have_keepalives_idle = false;
  for (const auto& [k, v] : uri.query) {
    if (IsTlsName(k)) continue;
    if (k == "table") {
      if (!IsTableName(v)) {
        return BadUri(uri, "table name '" + v +
                               "' is not accepted: use a lower-case identifier, a letter or '_' "
                               "and then up to 56 letters, digits or '_' (dlock adds '_queue' to "
                               "it for the wait queue)");
      }
      options->table = v;
      continue;
    }
    if (keywords.count(k) == 0 || k == "dbname" || k == "replication") {
      return BadUri(uri, "unknown parameter '" + k +
                             "': accepted: table, cacert, cert, key, and libpq's connection "
                             "parameters (sslmode, application_name, target_session_attrs, ...)");
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
  return Status::Ok();
}

}  // namespace

Result<PostgresOptions> OptionsFromUri(const internal::Uri& uri) {
  if (uri.scheme != "postgres" && uri.scheme != "postgresql") {
    return BadUri(uri, "the scheme is not postgres or postgresql");
  }
  PostgresOptions options;
  options.describe = uri.Redacted();
  ConnInfo& info = options.conninfo;
  if (!uri.user.empty()) info.emplace_back("user", uri.user);
  if (uri.has_password) info.emplace_back("password", uri.password);
  DLOCK_RETURN_IF_ERROR(AddHosts(uri, &info));
  if (uri.path.size() > 1) info.emplace_back("dbname", uri.path.substr(1));
  DLOCK_RETURN_IF_ERROR(AddParameters(uri, &options));
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
  DLOCK_ASSIGN_OR_RETURN(PostgresOptions options, OptionsFromUri(uri));
  options.connect_timeout = params.connect_timeout;
  options.clock = params.clock;
  return Open(options);
}

}  // namespace dlock::postgres
