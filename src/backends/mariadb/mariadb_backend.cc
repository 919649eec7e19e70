#include "backends/mariadb/mariadb_backend.h"

#include <algorithm>
#include <condition_variable>
#include <map>
#include <optional>
#include <utility>

#include "backends/mariadb/mariadb_backend_impl.h"
#include "backends/mariadb/mariadb_schema.h"
#include "core/duration.h"
#include "core/key_range.h"

namespace dlock::mariadb {
namespace {

using std::chrono::milliseconds;

// A renewal waits at most this fraction of its shortest TTL (and at least
// kMinRenewBudget): one stuck for long would hold up loss detection. A
// fifth, not PostgreSQL's tenth: a call that misses its deadline costs
// its connection here (Connector/C closes it), so a budget too tight for a
// loaded machine turns one slow reply into a reconnect; a fifth still
// leaves the core two more tries before valid_until.
constexpr int kRenewBudgetDivisor = 5;
constexpr milliseconds kMinRenewBudget{20};

// The sweep (mariadb_sql.cc): how often a round starts, and how many rows
// of the locks table a call visits (in one transaction: the free ones' row
// locks are held until its commit). A round goes on, call after call,
// until it reaches the table's end or has run kSweepEvery; the next round
// then starts at once, from where it stopped: the sweep keeps up with any
// rate of grants, since a row costs it a share of one commit where a grant
// costs one of its own.
constexpr milliseconds kSweepEvery{5000};
constexpr int kSweepBatch = 500;

// The one result set of a statement or procedure, or an internal error.
Result<const std::vector<Row>*> OnlySet(const ResultSets& sets, const std::string& what) {
  if (sets.size() != 1) {
    return InternalError(what + ": the server answered " + std::to_string(sets.size()) +
                         " result sets, 1 expected");
  }
  return &sets.front();
}

Status BadReply(const std::string& what) {
  return InternalError(what + ": the server's answer has an unexpected shape");
}

std::int64_t IntOr(const std::optional<std::string>& cell, std::int64_t fallback) {
  std::int64_t value = 0;
  return CellInt(cell, &value) ? value : fallback;
}

Status ValidateRequest(const LeaseRequest& request) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(request.key));
  DLOCK_RETURN_IF_ERROR(ValidateTtl(request.ttl));
  DLOCK_RETURN_IF_ERROR(ValidateLabel(request.label));
  if (request.owner.empty()) return InvalidArgumentError("acquire: the owner id is empty");
  if (request.limit == 0) return InvalidArgumentError("acquire: the limit is 0");
  if (request.lock_delay < milliseconds(0) || request.lock_delay > internal::kMaxDuration) {
    return InvalidArgumentError("acquire: lock_delay is out of range (0 to a year)");
  }
  if (request.queue_ttl < milliseconds(0) || request.queue_ttl > internal::kMaxDuration) {
    return InvalidArgumentError("acquire: queue_ttl is out of range (0 to a year)");
  }
  return Status::Ok();
}

// A retention as the procedures take it: NULL for ever.
std::string KeepLiteral(milliseconds keep) {
  if (keep == kKeepDoneForever) return "NULL";
  return IntLiteral(std::clamp<std::int64_t>(keep.count(), 0, internal::kMaxDuration.count()));
}

// The acquire procedure's rows: ('g', -, token) or ('r', -, -, ms) first,
// then, for a refused waiting attempt, ('h'|'d'|'w', owner, n, ms, limit).
Result<AttemptReply> ReadAttempt(const ResultSets& sets, const std::string& what) {
  DLOCK_ASSIGN_OR_RETURN(const std::vector<Row>* rows, OnlySet(sets, what));
  if (rows->empty() || (*rows)[0].size() != 5 || !(*rows)[0][0]) return BadReply(what);
  AttemptReply reply;
  const Row& first = (*rows)[0];
  std::int64_t value = 0;
  if (*first[0] == "g") {
    if (!CellInt(first[2], &value) || value <= 0) return BadReply(what);
    reply.attempt.granted = true;
    reply.attempt.token = static_cast<FencingToken>(value);
    return reply;
  }
  if (CellInt(first[3], &value) && value > 0) reply.attempt.holder_ttl_remaining = milliseconds(value);
  for (std::size_t i = 1; i < rows->size(); ++i) {
    const Row& row = (*rows)[i];
    if (row.size() != 5 || !row[0] || !row[1]) return BadReply(what);
    Ahead a;
    a.kind = *row[0] == "w" ? Ahead::Kind::kWaiter
                            : (*row[0] == "d" ? Ahead::Kind::kDelayed : Ahead::Kind::kHolding);
    a.owner = *row[1];
    a.limit = static_cast<std::uint32_t>(std::clamp<std::int64_t>(IntOr(row[4], 1), 1, kSharedLimit));
    reply.ahead.push_back(std::move(a));
  }
  return reply;
}

}  // namespace

MariaDbBackend::MariaDbBackend(MariaDbOptions options)
    : options_(std::move(options)),
      clock_(options_.clock ? options_.clock : DefaultClock()),
      names_(options_.table),
      waker_(options_.connect) {}

MariaDbBackend::~MariaDbBackend() {
  keeper_.request_stop();
  if (keeper_.joinable()) keeper_.join();
}

Status MariaDbBackend::Init() {
  const SteadyTime deadline = CallDeadline();
  std::unique_lock lock(mu_);
  const std::string what = "open the lock store";
  const int lock_wait_s = static_cast<int>(std::max<long long>(
      1, std::chrono::ceil<std::chrono::seconds>(options_.connect.connect_timeout).count()));
  auto conn = Connection::Open(options_.connect, deadline, SessionSql(lock_wait_s));
  if (!conn.ok()) return conn.status().WithContext(what);
  DLOCK_RETURN_IF_ERROR(CheckServer(**conn, options_.connect.describe));
  DLOCK_RETURN_IF_ERROR(
      EnsureSchema(**conn, names_, deadline, options_.connect.describe).WithContext(what));
  DLOCK_RETURN_IF_ERROR(
      (*conn)->Query(PrepareLeanSql(names_), deadline, what + ": prepare the lean forms").status());
  conn_ = std::move(*conn);
  keeper_ = std::jthread([this](std::stop_token stop) { KeeperLoop(std::move(stop)); });
  return Status::Ok();
}

Status MariaDbBackend::EnsureConnectedLocked(SteadyTime deadline, const std::string& what) {
  if (conn_ && conn_->Usable()) return Status::Ok();
  conn_.reset();
  const int lock_wait_s = static_cast<int>(std::max<long long>(
      1, std::chrono::ceil<std::chrono::seconds>(options_.connect.connect_timeout).count()));
  auto conn = Connection::Open(options_.connect, deadline,
                               SessionSql(lock_wait_s) + ";\n" + PrepareLeanSql(names_));
  if (!conn.ok()) return conn.status().WithContext(what);
  // The old session's wake-up names went with it: take them again, so that
  // those waiting on them are woken when they go.
  std::vector<std::string> held;
  {
    std::lock_guard names(names_mu_);
    held.assign(held_names_.begin(), held_names_.end());
  }
  for (std::size_t i = 0; i < held.size(); i += 64) {
    std::string sql = "DO 0";
    for (std::size_t j = i; j < std::min(held.size(), i + 64); ++j) {
      sql += ", GET_LOCK(" + HexLiteral(WakeName(held[j])) + ", 0)";
    }
    DLOCK_RETURN_IF_ERROR((*conn)->Query(sql, deadline, what + ": take the wake-up names again")
                              .status());
  }
  conn_ = std::move(*conn);
  return Status::Ok();
}

Status MariaDbBackend::TidyNamesLocked(SteadyTime deadline) {
  std::vector<std::string> drop;
  {
    std::lock_guard names(names_mu_);
    drop.swap(names_to_drop_);
  }
  if (drop.empty()) return Status::Ok();
  std::string sql = "DO 0";
  for (const std::string& owner : drop) sql += ", RELEASE_LOCK(" + HexLiteral(WakeName(owner)) + ")";
  return conn_->Query(sql, deadline, "let go of a dropped waiter's wake-up name").status();
}

Result<ResultSets> MariaDbBackend::Run(const std::string& sql, SteadyTime deadline,
                                       const std::string& what,
                                       std::vector<std::uint64_t>* affected) {
  std::unique_lock lock(mu_, std::defer_lock);
  if (!lock.try_lock_until(deadline)) {
    return UnavailableError(what + " (" + Describe() +
                            "): the connection stayed busy with another call past the time limit");
  }
  if ((!conn_ || !conn_->Usable()) &&
      deadline - SteadyClock::now() < options_.connect.connect_timeout / 2) {
    // A short call (a renewal, bounded by a tenth of its TTL) does not pay
    // for a new connection: the keeper thread makes it now, and the call,
    // tried again by the core, finds it ready.
    conn_.reset();
    RequestReconnect();
    return UnavailableError(what + " (" + Describe() + "): the connection is being replaced");
  }
  DLOCK_RETURN_IF_ERROR(EnsureConnectedLocked(deadline, what));
  used_since_sweep_.store(true, std::memory_order_relaxed);
  if (Status tidy = TidyNamesLocked(deadline); !tidy.ok() && !conn_->Usable()) {
    conn_.reset();
    return tidy.WithContext(what);
  }
  Result<ResultSets> result = conn_->Query(sql, deadline, what, -1, affected);
  if (!conn_->Usable()) {  // lost or timed out: replaced before the next call
    conn_.reset();
    RequestReconnect();
  }
  return result;
}

void MariaDbBackend::NoteHeld(const std::string& owner, bool held) {
  std::lock_guard names(names_mu_);
  if (held) {
    held_names_.insert(owner);
  } else {
    held_names_.erase(owner);
  }
}

void MariaDbBackend::DropName(const std::string& owner) {
  std::lock_guard names(names_mu_);
  held_names_.erase(owner);
  names_to_drop_.push_back(owner);
}

// The lean form's answer, when it decided: (owner, its token, ms the
// holding that stands in the way still counts, further holders, places,
// the row's counter).
std::optional<Attempt> MariaDbBackend::LeanAttempt(const LeaseRequest& request,
                                                  const ResultSets& sets, bool* fresh) {
  *fresh = false;
  if (sets.size() != 1 || sets.front().size() != 1 || sets.front().front().size() != 6) {
    return std::nullopt;  // an unexpected shape: the general form decides
  }
  const Row& row = sets.front().front();
  std::int64_t token = 0, sharers = 0, waiters = 0, left_ms = 0, counter = 0;
  Attempt attempt;
  if (row[0] == request.owner.ToString() && CellInt(row[1], &token)) {
    attempt.granted = true;
    attempt.token = static_cast<FencingToken>(token);
    return attempt;
  }
  if (!row[0] && !CellInt(row[5], &counter)) {
    *fresh = true;  // a row that never granted (just made): try again, under its lock
    return std::nullopt;
  }
  if (!CellInt(row[3], &sharers) || !CellInt(row[4], &waiters) || sharers > 0 || waiters > 0 ||
      request.queue_ttl > milliseconds(0)) {
    return std::nullopt;  // shared, queued (live or lapsed places), or a waiter who must queue
  }
  if (CellInt(row[2], &left_ms) && left_ms > 0) attempt.holder_ttl_remaining = milliseconds(left_ms);
  return attempt;
}

Result<AttemptReply> MariaDbBackend::RunAttempt(const LeaseRequest& request, bool lean_first) {
  const std::string owner = request.owner.ToString();
  const std::string what = "acquire " + request.key;
  const bool single = request.queue_ttl <= milliseconds(0);
  NoteHeld(owner, true);  // before sending: if the reply is lost, it may hold the name
  // The lean form first, for an exclusive attempt; twice when it had to
  // make the key's row.
  bool fresh = lean_first && request.limit == 1;
  for (int i = 0; i < 2 && fresh; ++i) {
    DLOCK_ASSIGN_OR_RETURN(
        ResultSets sets,
        Run(LeanAcquireSql(request.key, owner, request.ttl.count(), request.lock_delay.count(),
                           request.label),
            CallDeadline(), what));
    if (std::optional<Attempt> decided = LeanAttempt(request, sets, &fresh)) {
      if (!decided->granted) NoteHeld(owner, false);  // it takes the name only with a grant
      return AttemptReply{*decided, {}};
    }
  }
  DLOCK_ASSIGN_OR_RETURN(
      ResultSets sets,
      Run(CallAcquire(names_, HexLiteral(request.key), "'" + owner + "'", request.ttl.count(),
                      request.lock_delay.count(), HexLiteral(request.label),
                      static_cast<long long>(request.limit), request.queue_ttl.count()),
          CallDeadline(), what));
  DLOCK_ASSIGN_OR_RETURN(AttemptReply reply, ReadAttempt(sets, what));
  // A refused single attempt let go of its name in the procedure.
  if (!reply.attempt.granted && single) NoteHeld(owner, false);
  return reply;
}

Result<Attempt> MariaDbBackend::TryAcquire(const LeaseRequest& request) {
  DLOCK_RETURN_IF_ERROR(ValidateRequest(request));
  LeaseRequest single = request;
  single.queue_ttl = milliseconds(0);  // waiters queue only through Begin
  DLOCK_ASSIGN_OR_RETURN(AttemptReply reply, RunAttempt(single, true));
  return reply.attempt;
}

Status MariaDbBackend::Release(std::string_view key, const OwnerId& owner) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(key));
  const std::string what = "release " + std::string(key);
  const std::string owner_text = owner.ToString();
  // The lean form first: our exclusive holding, freed in one statement.
  std::vector<std::uint64_t> freed;
  DLOCK_RETURN_IF_ERROR(
      Run(LeanReleaseSql(std::string(key), owner_text), CallDeadline(), what, &freed).status());
  if (freed.size() == 1 && freed.front() == 1) {
    NoteHeld(owner_text, false);
    return Status::Ok();
  }
  // Nothing freed: another owner's, nobody's, a shared holding, or a
  // waiter's place.
  DLOCK_ASSIGN_OR_RETURN(ResultSets sets, Run(CallRelease(names_, HexLiteral(key), "'" + owner_text + "'"),
                                              CallDeadline(), what));
  NoteHeld(owner_text, false);
  DLOCK_ASSIGN_OR_RETURN(const std::vector<Row>* rows, OnlySet(sets, what));
  if (rows->size() != 1 || rows->front().size() != 2) return BadReply(what);
  if (IntOr(rows->front()[0], 0) > 0) return Status::Ok();
  if (IntOr(rows->front()[1], 0) > 0) return NotOwnerError(what + ": the lock is held by another owner");
  return Status::Ok();  // free or expired: releasing again is not an error
}

std::vector<Status> MariaDbBackend::Renew(std::span<const LeaseRequest> leases) {
  std::vector<Status> result(leases.size());
  std::string batch;
  milliseconds shortest = options_.connect.connect_timeout * kRenewBudgetDivisor;
  for (std::size_t i = 0; i < leases.size(); ++i) {
    result[i] = ValidateKey(leases[i].key);
    if (result[i].ok()) result[i] = ValidateTtl(leases[i].ttl);
    if (!result[i].ok()) continue;
    batch += std::string(batch.empty() ? "[" : ",") + "[\"" + HexEncode(leases[i].key) + "\",\"" +
             leases[i].owner.ToString() + "\"," + std::to_string(leases[i].ttl.count()) + "]";
    shortest = std::min(shortest, leases[i].ttl);
  }
  if (batch.empty()) return result;
  const milliseconds budget =
      std::clamp(shortest / kRenewBudgetDivisor, kMinRenewBudget,
                 std::max(kMinRenewBudget, options_.connect.connect_timeout));
  auto renewed = Run(CallRenew(names_, batch + "]"), SteadyClock::now() + budget, "renew");
  std::set<std::pair<std::string, std::string>> done;
  if (renewed.ok() && renewed->size() == 1) {
    for (const Row& row : renewed->front()) {
      if (row.size() == 2 && row[0] && row[1]) done.emplace(*row[0], *row[1]);
    }
  }
  for (std::size_t i = 0; i < leases.size(); ++i) {
    if (!result[i].ok()) continue;
    if (!renewed.ok()) {
      result[i] = renewed.status();  // one statement: none of it happened
    } else if (done.count({HexEncode(leases[i].key), leases[i].owner.ToString()}) == 0) {
      result[i] = NotOwnerError("lease on key " + leases[i].key + " is no longer held by this owner");
    }
  }
  return result;
}

Result<ResultSets> MariaDbBackend::RunForPrefix(
    std::string (*sql)(const SchemaNames&, const std::string&, const std::string&),
    std::string_view prefix, const std::string& what) {
  const std::optional<std::string> end = internal::PrefixEnd(prefix);
  return Run(sql(names_, HexLiteral(prefix), end ? HexLiteral(*end) : "NULL"), CallDeadline(), what);
}

Result<std::vector<HolderInfo>> MariaDbBackend::List(std::string_view prefix) {
  const std::string what = "list '" + std::string(prefix) + "'";
  DLOCK_ASSIGN_OR_RETURN(ResultSets sets, RunForPrefix(&ListSql, prefix, what));
  DLOCK_ASSIGN_OR_RETURN(const std::vector<Row>* rows, OnlySet(sets, what));
  std::vector<HolderInfo> holders;
  for (const Row& row : *rows) {
    if (row.size() != 8 || !row[0] || !row[1]) return BadReply(what);
    HolderInfo info;
    info.key = *row[0];
    Result<OwnerId> owner = OwnerId::Parse(*row[1]);
    if (!owner.ok()) return InternalError(what + ": a malformed owner id in " + names_.locks);
    info.owner = *owner;
    info.token = static_cast<FencingToken>(IntOr(row[2], 0));
    info.ttl_remaining = milliseconds(std::max<std::int64_t>(1, IntOr(row[3], 1)));
    info.ttl = milliseconds(IntOr(row[4], 0));
    info.held_for = milliseconds(std::max<std::int64_t>(0, IntOr(row[5], 0)));
    info.label = row[6].value_or("");
    info.limit = static_cast<std::uint32_t>(IntOr(row[7], 1));
    holders.push_back(std::move(info));
  }
  return holders;
}

Result<std::vector<WaiterInfo>> MariaDbBackend::Waiters(std::string_view prefix) {
  const std::string what = "list the waiters for '" + std::string(prefix) + "'";
  DLOCK_ASSIGN_OR_RETURN(ResultSets sets, RunForPrefix(&WaitersSql, prefix, what));
  DLOCK_ASSIGN_OR_RETURN(const std::vector<Row>* rows, OnlySet(sets, what));
  std::vector<WaiterInfo> waiters;
  for (const Row& row : *rows) {
    if (row.size() != 5 || !row[0] || !row[1]) return BadReply(what);
    WaiterInfo info;
    info.key = *row[0];
    Result<OwnerId> owner = OwnerId::Parse(*row[1]);
    if (!owner.ok()) return InternalError(what + ": a malformed owner id in " + names_.queue);
    info.owner = *owner;
    info.limit = static_cast<std::uint32_t>(IntOr(row[2], 1));
    info.label = row[3].value_or("");
    info.waited_for = milliseconds(std::max<std::int64_t>(0, IntOr(row[4], 0)));
    waiters.push_back(std::move(info));
  }
  return waiters;
}

Result<std::uint64_t> MariaDbBackend::StoredObjects(std::string_view prefix) {
  const std::string what = "count the rows for '" + std::string(prefix) + "'";
  DLOCK_ASSIGN_OR_RETURN(ResultSets sets, RunForPrefix(&CountSql, prefix, what));
  DLOCK_ASSIGN_OR_RETURN(const std::vector<Row>* rows, OnlySet(sets, what));
  std::int64_t count = 0;
  if (rows->size() != 1 || rows->front().size() != 1 || !CellInt(rows->front()[0], &count)) {
    return BadReply(what);
  }
  return static_cast<std::uint64_t>(count);
}

Status MariaDbBackend::Ping() {
  return Run(PingSql(names_), CallDeadline(), "ping").status();
}

Result<bool> MariaDbBackend::IsDone(std::string_view key) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(key));
  const std::string what = "read the done mark of " + std::string(key);
  DLOCK_ASSIGN_OR_RETURN(ResultSets sets, Run(IsDoneSql(names_, HexLiteral(key)), CallDeadline(), what));
  DLOCK_ASSIGN_OR_RETURN(const std::vector<Row>* rows, OnlySet(sets, what));
  return !rows->empty();
}

// Committed durably (InnoDB, one transaction) before it returns OK.
Status MariaDbBackend::MarkDone(std::string_view key, const OwnerId& owner, milliseconds keep) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(key));
  const std::string what = "mark " + std::string(key) + " done";
  DLOCK_ASSIGN_OR_RETURN(ResultSets sets,
                         Run(CallMarkDone(names_, HexLiteral(key), "'" + owner.ToString() + "'",
                                          KeepLiteral(keep)),
                             CallDeadline(), what));
  DLOCK_ASSIGN_OR_RETURN(const std::vector<Row>* rows, OnlySet(sets, what));
  if (rows->size() != 1 || rows->front().size() != 1) return BadReply(what);
  if (IntOr(rows->front()[0], 0) == 0) return NotOwnerError(what + ": this owner no longer holds the lock");
  return Status::Ok();
}

Status MariaDbBackend::RecordBreak(const BreakRecord& record, milliseconds keep) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(record.key));
  return Run(CallRecordBreak(names_, HexLiteral(record.key), "'" + record.owner.ToString() + "'",
                             record.token, HexLiteral(record.label), HexLiteral(record.by),
                             record.break_token, KeepLiteral(keep)),
             CallDeadline(), "record the break of " + record.key)
      .status();
}

Result<std::vector<BreakRecord>> MariaDbBackend::Breaks(std::string_view prefix) {
  const std::string what = "list the breaks of '" + std::string(prefix) + "'";
  DLOCK_ASSIGN_OR_RETURN(ResultSets sets, RunForPrefix(&BreaksSql, prefix, what));
  DLOCK_ASSIGN_OR_RETURN(const std::vector<Row>* rows, OnlySet(sets, what));
  std::vector<BreakRecord> records;
  for (const Row& row : *rows) {
    if (row.size() != 7 || !row[0] || !row[1]) return BadReply(what);
    BreakRecord b;
    b.key = *row[0];
    Result<OwnerId> owner = OwnerId::Parse(*row[1]);
    if (!owner.ok()) return InternalError(what + ": a malformed owner id in " + names_.breaks);
    b.owner = *owner;
    b.token = static_cast<FencingToken>(IntOr(row[2], 0));
    b.label = row[3].value_or("");
    b.by = row[4].value_or("");
    b.break_token = static_cast<FencingToken>(IntOr(row[5], 0));
    b.at_unix_ms = IntOr(row[6], 0);
    records.push_back(std::move(b));
  }
  return records;
}

void MariaDbBackend::RequestReconnect() {
  {
    std::lock_guard lock(keeper_mu_);
    reconnect_wanted_ = true;
  }
  keeper_cv_.notify_all();
}

void MariaDbBackend::ReconnectNow() {
  const SteadyTime deadline = CallDeadline();
  std::unique_lock lock(mu_, std::defer_lock);
  if (!lock.try_lock_until(deadline)) return;  // a call has it: it reconnects itself
  (void)EnsureConnectedLocked(deadline, "reconnect");
}

void MariaDbBackend::SweepOnce(std::unique_ptr<Connection>& conn, std::stop_token stop) {
  const SteadyTime round_end = SteadyClock::now() + kSweepEvery;
  if (!conn || !conn->Usable()) {
    auto opened = Connection::Open(options_.connect, CallDeadline(), SessionSql(1));
    if (!opened.ok()) return;
    conn = std::move(*opened);
  }
  // One sweeper per store: several would visit the same rows in the same
  // order, each waiting on the others' row locks. The name is the session's
  // and goes with it if the connection does.
  auto taken = conn->Query(SweeperLockSql(names_, true), CallDeadline(), "take the sweeper's name");
  if (!taken.ok() || taken->size() != 1 || taken->front().size() != 1 ||
      taken->front().front().size() != 1 || taken->front().front().front() != "1") {
    return;  // another backend sweeps this store (or the connection failed)
  }
  // A broken operations connection is replaced by this thread: a round
  // gives way to it (and goes on from the same key next time).
  auto reconnect_wanted = [this] {
    std::lock_guard lock(keeper_mu_);
    return reconnect_wanted_;
  };
  while (!stop.stop_requested() && SteadyClock::now() < round_end && !reconnect_wanted()) {
    const SteadyTime deadline = CallDeadline();
    // The server stops the call by itself at the deadline: one whose
    // caller gave up would otherwise run on, and the next round would
    // start another beside it on a new connection.
    const auto limit = std::chrono::floor<milliseconds>(deadline - SteadyClock::now());
    auto swept = conn->Query(CallSweepFrom(names_, HexLiteral(sweep_after_), kSweepBatch, limit),
                             deadline, "sweep");
    std::int64_t visited = 0;
    if (!swept.ok() || swept->size() != 1 || swept->front().size() != 1 ||
        swept->front().front().size() != 2 || !CellInt(swept->front().front()[0], &visited)) {
      break;  // the next round tries again from the same key
    }
    const std::optional<std::string>& last = swept->front().front()[1];
    if (visited < kSweepBatch || !last) {
      sweep_after_.clear();  // the table's end: the next round starts from the beginning
      break;
    }
    sweep_after_ = *last;
  }
  // Stopped short of the table's end (time, a reconnect): the next round
  // goes on from there, even if nothing uses this backend meanwhile.
  if (!sweep_after_.empty()) used_since_sweep_.store(true, std::memory_order_relaxed);
  if (conn->Usable()) {
    (void)conn->Query(SweeperLockSql(names_, false), CallDeadline(), "let go of the sweeper's name");
  } else {
    conn.reset();  // its session, and the name with it, end now, not at the next round
  }
}

void MariaDbBackend::KeeperLoop(std::stop_token stop) {
  std::unique_ptr<Connection> conn;  // its own: a sweep never holds up a renewal
  SteadyTime next_sweep = SteadyClock::now() + kSweepEvery;
  while (!stop.stop_requested()) {
    bool reconnect = false;
    {
      std::unique_lock lock(keeper_mu_);
      keeper_cv_.wait_until(lock, stop, next_sweep, [&] { return reconnect_wanted_; });
      reconnect = std::exchange(reconnect_wanted_, false);
    }
    if (stop.stop_requested()) break;
    if (reconnect) ReconnectNow();
    if (SteadyClock::now() < next_sweep) continue;
    next_sweep = SteadyClock::now() + kSweepEvery;
    if (used_since_sweep_.exchange(false)) SweepOnce(conn, stop);
  }
}

std::unique_ptr<Acquisition> MariaDbBackend::Begin(const LeaseRequest& request) {
  return MakeAcquisition(*this, request, ValidateRequest(request));
}

Result<std::unique_ptr<Backend>> Open(const MariaDbOptions& options) {
  if (options.connect.connect_timeout <= milliseconds(0)) {
    return InvalidArgumentError("connect timeout must be positive, got " +
                                internal::FormatDuration(options.connect.connect_timeout));
  }
  auto backend = std::make_unique<MariaDbBackend>(options);
  DLOCK_RETURN_IF_ERROR(backend->Init());
  return std::unique_ptr<Backend>(std::move(backend));
}

Result<std::unique_ptr<Backend>> Open(const internal::Uri& uri,
                                      const internal::BackendParams& params) {
  DLOCK_ASSIGN_OR_RETURN(MariaDbOptions options, OptionsFromUri(uri));
  options.connect.connect_timeout = params.connect_timeout;
  options.clock = params.clock;
  return Open(options);
}

}  // namespace dlock::mariadb
