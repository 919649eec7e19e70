#include "backends/etcd/etcd_acquisition.h"

#include <algorithm>
#include <utility>

namespace dlock::etcd {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// What a read of the last key before ours says of our predecessor. Unknown
// when that key belongs to a longer name.
struct PredecessorRead {
  bool known = false;
  std::optional<QueueMember> member;
};

PredecessorRead FromLastBefore(const std::string& prefix, const pb::RangeResponse& last) {
  if (last.kvs_size() == 0) return {true, std::nullopt};
  if (!IsQueueMember(prefix, last.kvs(0).key())) return {};
  return {true, MemberOf(last.kvs(0))};
}

// From the two newest keys of the queue's range, read in the transaction
// that put ours at `revision`: ours and, if contended, its predecessor.
PredecessorRead FromNewestTwo(const std::string& prefix, std::int64_t revision,
                              const pb::RangeResponse& newest) {
  if (newest.kvs_size() == 0 || newest.kvs(0).create_revision() != revision) return {};
  if (newest.kvs_size() < 2) return {true, std::nullopt};
  if (!IsQueueMember(prefix, newest.kvs(1).key())) return {};
  return {true, MemberOf(newest.kvs(1))};
}

std::optional<Attempt> AnotherRound() { return std::nullopt; }

}  // namespace

EtcdAcquisition::EtcdAcquisition(EtcdBackendImpl& backend, const LeaseRequest& request)
    : backend_(backend),
      request_(request),
      id_(request.key, request.owner),
      prefix_(QueuePrefix(backend.options_.root, request.key)),
      delay_prefix_(DelayPrefix(backend.options_.root, request.key)),
      owner_hex_(request.owner.ToString()),
      limit_(std::max<std::uint32_t>(1, request.limit)) {
  std::lock_guard l(backend_.mu_);
  backend_.acquisitions_.emplace(request_.key, this);
  // A place this owner left (a retry after a lost answer) or a holding it
  // has (a retry of a grant): start from its member.
  Place place = backend_.AdoptLocked(id_);
  member_ = std::move(place.member);
  if (!place.granted) keep_until_ = place.alive_until;
}

EtcdAcquisition::~EtcdAcquisition() {
  // Nothing of this acquisition may be woken once it is gone.
  StopNotify();
  std::lock_guard l(backend_.mu_);
  for (auto [it, end] = backend_.acquisitions_.equal_range(request_.key); it != end; ++it) {
    if (it->second == this) {
      backend_.acquisitions_.erase(it);
      break;
    }
  }
  if (!granted_ && !member_.key.empty()) backend_.LeaveLocked(id_, member_, keep_until_);
}

Result<Attempt> EtcdAcquisition::Try() {
  const TimePoint started = backend_.Now();
  const TimePoint deadline = backend_.AttemptDeadline(request_.deadline);
  granted_ = false;
  backend_.FlushPending(deadline);
  {
    std::lock_guard l(backend_.mu_);
    backend_.ReapLocked(started);
  }
  return Ended(started, Rounds(started, deadline, nullptr));
}

Result<EtcdAcquisition::FirstRound> EtcdAcquisition::StartTry(TimePoint started,
                                                              TimePoint deadline) {
  granted_ = false;
  DLOCK_ASSIGN_OR_RETURN(Round r, StartRound(started, deadline));
  const bool queued = member_.revision != 0;
  pb::TxnRequest txn = queued ? ReadTxn() : PutTxn(r);
  return FirstRound{std::move(r), queued, std::move(txn)};
}

Result<Attempt> EtcdAcquisition::FinishTry(TimePoint started, Result<FirstRound> first,
                                           Result<pb::TxnResponse> answer,
                                           std::map<std::int64_t, milliseconds>* time_left) {
  time_left_ = time_left;
  if (!first.ok()) return Ended(started, first.status());
  const TimePoint deadline = first->round.deadline;
  Answered sent{std::move(first->round), first->queued, std::move(answer)};
  return Ended(started, Rounds(started, deadline, &sent));
}

Result<Attempt> EtcdAcquisition::Ended(TimePoint started, Result<Attempt> result) {
  std::lock_guard l(backend_.mu_);
  if (!result.ok()) {
    // Unsure (the put may have happened): if dropped, the place is kept at
    // least a TTL, so that a retry by this owner finds it.
    keep_until_ = std::max(keep_until_, started + std::max(request_.queue_ttl, request_.ttl));
    has_place_ = false;
    return result.status().WithContext("acquire " + Quoted(request_.key) + " on " +
                                       backend_.Describe());
  }
  // Waiting: the place is kept for queue_ttl after this attempt, as the
  // contract says.
  if (!result->granted) keep_until_ = std::max(keep_until_, backend_.Now() + request_.queue_ttl);
  has_place_ = !result->granted && !member_.key.empty() && member_.revision != 0;
  return result;
}

bool EtcdAcquisition::KeepPlaceLocked(const OwnerId& owner, TimePoint until) {
  // has_place_, not granted_: a Try may be running on another thread, and
  // only what it settled under mu_ is read here.
  if (request_.owner != owner || !has_place_) return false;
  if (!member_.session || member_.session->dead) return false;  // the key went with it
  keep_until_ = std::max(keep_until_, until);
  return true;
}

// Starts over (a few times) when the session or our key turns out to be
// gone, with a new one.
Result<Attempt> EtcdAcquisition::Rounds(TimePoint started, TimePoint deadline, Answered* first) {
  for (int round = 0; round < 3; ++round) {
    std::optional<Answered> sent;
    if (round == 0 && first != nullptr) {
      sent.emplace(std::move(*first));
    } else {
      DLOCK_ASSIGN_OR_RETURN(Round r, StartRound(started, deadline));
      const bool queued = member_.revision != 0;
      Result<pb::TxnResponse> got =
          backend_.conn_.Txn(queued ? ReadTxn() : PutTxn(r), r.deadline);
      sent.emplace(Answered{std::move(r), queued, std::move(got)});
    }
    DLOCK_ASSIGN_OR_RETURN(std::optional<QueueView> view,
                           sent->queued ? FromRead(*sent) : FromPut(*sent));
    if (!view) continue;
    DLOCK_ASSIGN_OR_RETURN(std::optional<Attempt> attempt,
                           Act(sent->round, *view, Decide(*view, limit_)));
    if (attempt) return *attempt;
  }
  return UnavailableError("the etcd session lease kept disappearing (expired or revoked)");
}

Result<EtcdAcquisition::Round> EtcdAcquisition::StartRound(TimePoint started, TimePoint deadline) {
  DLOCK_ASSIGN_OR_RETURN(auto choice, backend_.GetSession(request_.ttl, deadline));
  Round r{choice.session, started, deadline, std::nullopt};
  bool keep_alive_due;
  {
    std::lock_guard l(backend_.mu_);
    // The grant holds from the session's last confirmation (the core
    // counts valid_until from there, Attempt::valid_from). Refresh it,
    // alongside the transaction, once a third of its TTL has gone by.
    keep_alive_due =
        !choice.fresh && started - r.session->confirmed_at > seconds(r.session->ttl_seconds) / 3;
    if (member_.session != r.session) TakeKeyLocked(r.session);
  }
  // etcd restarts the lease's TTL when it handles the keep-alive, after
  // `started`. It travels while the transaction does.
  if (keep_alive_due) r.keep_alive = backend_.conn_.SendKeepAlive(r.session->id);
  return r;
}

void EtcdAcquisition::TakeKeyLocked(std::shared_ptr<Session> session) {
  // The Mutex's key, unless another acquisition of this name on this
  // session has it: then one with our owner id appended.
  const std::string base = MemberKey(prefix_, session->id);
  const bool taken = backend_.KeyTakenLocked(id_, base, *this);
  member_ = Member{};
  member_.key = taken ? MemberKey(prefix_, session->id, owner_hex_) : base;
  member_.value = EncodeValue(owner_hex_, limit_, request_.label);
  member_.session = std::move(session);
}

// ---- Read

// Already queued: one read (no Raft write) says whether it is our turn. A
// serializable read (served by the member alone, no quorum round) is
// enough: the keys ahead of ours were all created before ours, so that set
// only ever shrinks, and a stale view can only show more of them (we wait
// again), never fewer. Nor can it hide a delayed holding: a holder puts its
// marker while its member is still there (the put compares it) and before
// it reports its grant, so any snapshot that lacks the member of a reported
// holding has its marker, until the delay is over. The session's
// confirmation vouches for our own key still being there.
// Already queued: one read (no Raft write) says whether it is our turn. A
// serializable read (served by the member alone, no quorum round) is
// enough: the keys ahead of ours were all created before ours, so that set
// only ever shrinks, and a stale view can only show more of them (we wait
// again), never fewer. Nor can it hide a delayed holding: a holder puts its
// marker while its member is still there (the put compares it) and before
// it reports its grant, so any snapshot that lacks the member of a reported
// holding has its marker, until the delay is over. The session's
// confirmation vouches for our own key still being there.
pb::TxnRequest EtcdAcquisition::ReadTxn() const {
  pb::TxnRequest txn;
  *txn.add_success() = GetOp(member_.key);
  if (sharing()) {
    *txn.add_success()->mutable_request_range() = WholeQueue(prefix_);
  } else {
    *txn.add_success() = FirstInQueueOp(prefix_);
    *txn.add_success()->mutable_request_range() = LastBefore(prefix_, member_.revision);
  }
  *txn.add_success() = RangeOp(delay_prefix_);
  for (auto& op : *txn.mutable_success()) op.mutable_request_range()->set_serializable(true);
  return txn;
}

Result<std::optional<QueueView>> EtcdAcquisition::FromRead(Answered& sent) {
  DLOCK_ASSIGN_OR_RETURN(pb::TxnResponse got, std::move(sent.answer));
  const auto& mine = got.responses(0).response_range();
  if (mine.kvs_size() == 0 || mine.kvs(0).create_revision() != member_.revision) {
    // Our key is gone (session expired, or deleted by hand): queue anew.
    member_.revision = 0;
    return std::optional<QueueView>();
  }
  const std::int64_t read_at = got.header().revision();
  const auto& markers = got.responses(got.responses_size() - 1).response_range();
  if (sharing()) {
    return std::optional(SharingView(read_at, got.responses(1).response_range(), markers));
  }
  const PredecessorRead last = FromLastBefore(prefix_, got.responses(2).response_range());
  DLOCK_ASSIGN_OR_RETURN(QueueView view,
                         WriterView(read_at, got.responses(1).response_range(), last.known,
                                    last.member, markers, sent.round.deadline));
  return std::optional(std::move(view));
}

// The uncontended path, as etcd's Mutex: put our key unless it exists, and
// read the head of the queue, in one transaction (PutTxn).
Result<std::optional<QueueView>> EtcdAcquisition::FromPut(Answered& sent) {
  const Round& round = sent.round;
  if (!sent.answer.ok() && sent.answer.status().code() == StatusCode::kNotOwner) {
    backend_.MarkSessionDead(round.session);  // the lease is gone
    return std::optional<QueueView>();
  }
  const bool into_empty = IntoEmptyQueue();  // PutTxn's shape, before this answer
  DLOCK_ASSIGN_OR_RETURN(pb::TxnResponse got, std::move(sent.answer));
  const std::int64_t read_at = got.header().revision();
  std::int64_t revision = read_at;
  const auto& markers = got.responses(got.responses_size() - 1).response_range();
  if (got.succeeded() && into_empty) {
    member_.revision = revision;  // the only member: nobody ahead
    QueueView view;
    view.revision = revision;
    view.read_at = read_at;
    SortMarkers(view, MarkersOf(markers), member_.key, {});
    return std::optional(std::move(view));
  }
  if (!got.succeeded() && got.responses(0).response_range().kvs_size() == 0) {
    return RefusedUnput(read_at, got, round.deadline);
  }
  if (!got.succeeded()) {
    const mvccpb::KeyValue& mine = got.responses(0).response_range().kvs(0);
    if (DecodeValue(mine.value()).owner_hex != owner_hex_) {
      // Left by an earlier acquisition of this client whose release did
      // not get through: remove it, then queue anew.
      DLOCK_RETURN_IF_ERROR(backend_.DeleteMember(
          {member_.key, mine.create_revision(), "", round.session->id}, round.deadline));
      return std::optional<QueueView>();
    }
    revision = mine.create_revision();  // a retry of ours: same place
  }
  member_.revision = revision;
  if (sharing()) {
    const int queue = got.succeeded() ? 1 : 2;
    return std::optional(SharingView(read_at, got.responses(queue).response_range(), markers));
  }
  const PredecessorRead last =
      got.succeeded() ? FromNewestTwo(prefix_, revision, got.responses(2).response_range())
                      : PredecessorRead{};
  DLOCK_ASSIGN_OR_RETURN(QueueView view,
                         WriterView(read_at, got.responses(1).response_range(), last.known,
                                    last.member, markers, round.deadline));
  return std::optional(std::move(view));
}

// A single attempt refused without a put: the queue had a key. The view of
// a member that never was (revision 0) behind the head, so that Act leaves
// the queue (deleting nothing) and says how long the head may hold. A head
// that is a longer name's key says nothing of this name's queue: another
// round, with a plain put.
Result<std::optional<QueueView>> EtcdAcquisition::RefusedUnput(std::int64_t read_at,
                                                                const pb::TxnResponse& got,
                                                                TimePoint deadline) {
  DLOCK_ASSIGN_OR_RETURN(std::optional<QueueMember> head,
                         backend_.Head(prefix_, got.responses(1).response_range(), deadline));
  if (!head) {
    plain_put_ = true;
    return std::optional<QueueView>();
  }
  QueueView view;
  view.read_at = read_at;
  SetWriterAhead(view, head, /*predecessor_known=*/true, head);
  const auto& markers = got.responses(got.responses_size() - 1).response_range();
  SortMarkers(view, MarkersOf(markers), member_.key, {});
  return std::optional(std::move(view));
}

bool EtcdAcquisition::IntoEmptyQueue() const {
  return request_.queue_ttl == milliseconds(0) && !sharing() && !plain_put_;
}

pb::TxnRequest EtcdAcquisition::PutTxn(const Round& round) const {
  pb::TxnRequest txn;
  *txn.add_compare() = CreateRevisionIs(member_.key, 0);
  *txn.add_success() = PutOp(member_.key, member_.value, round.session->id);
  if (IntoEmptyQueue()) {
    // A single exclusive attempt puts only into an empty queue: in any
    // other it could not hold, and would delete its key again at once (a
    // second Raft write). "No key of the range was ever created": etcd
    // holds a condition on a range for every key in it, and for none when
    // it is empty. A longer name's key ("a/b/..." for "a") fails it too:
    // FromPut then asks for a plain put. Put, ours is the only member, and
    // only the markers are left to read.
    pb::Compare* empty = txn.add_compare();
    *empty = CreateRevisionIs(prefix_, 0);
    empty->set_range_end(PrefixRangeEnd(prefix_));
  } else if (sharing()) {
    // The whole queue (ours is its newest member): the limits ahead count.
    *txn.add_success()->mutable_request_range() = WholeQueue(prefix_);
  } else {
    *txn.add_success() = FirstInQueueOp(prefix_);
    // The two newest members: ours and, if contended, the one to wait for.
    pb::RequestOp newest = FirstInQueueOp(prefix_);
    newest.mutable_request_range()->set_sort_order(pb::RangeRequest::DESCEND);
    newest.mutable_request_range()->set_limit(2);
    *txn.add_success() = newest;
  }
  *txn.add_success() = RangeOp(delay_prefix_);
  *txn.add_failure() = GetOp(member_.key);
  *txn.add_failure() = FirstInQueueOp(prefix_);
  if (sharing()) *txn.add_failure()->mutable_request_range() = WholeQueue(prefix_);
  *txn.add_failure() = RangeOp(delay_prefix_);
  return txn;
}

// A sharing request's view: every member ahead, with its limit, and how
// many keys of the range (longer names' too) came before ours.
QueueView EtcdAcquisition::SharingView(std::int64_t read_at, const pb::RangeResponse& range,
                                       const pb::RangeResponse& markers) const {
  QueueView view;
  view.revision = member_.revision;
  view.read_at = read_at;
  std::vector<QueueMember> queue;
  for (const auto& kv : range.kvs()) {
    const bool member = IsQueueMember(prefix_, kv.key());
    if (member) queue.push_back(MemberOf(kv));
    if (kv.create_revision() >= view.revision) continue;
    ++view.keys_ahead;
    if (member) view.ahead.push_back(queue.back());
  }
  SortMarkers(view, MarkersOf(markers), member_.key, queue);
  return view;
}

// A limit-1 request's view: the head and, when known, the predecessor.
Result<QueueView> EtcdAcquisition::WriterView(std::int64_t read_at, const pb::RangeResponse& first,
                                              bool predecessor_known,
                                              const std::optional<QueueMember>& predecessor,
                                              const pb::RangeResponse& markers,
                                              TimePoint deadline) {
  QueueView view;
  view.revision = member_.revision;
  view.read_at = read_at;
  DLOCK_ASSIGN_OR_RETURN(std::optional<QueueMember> head, backend_.Head(prefix_, first, deadline));
  SetWriterAhead(view, head, predecessor_known, predecessor);
  SortMarkers(view, MarkersOf(markers), member_.key, {});
  return view;
}

std::vector<QueueMember> EtcdAcquisition::MarkersOf(const pb::RangeResponse& markers) const {
  std::vector<QueueMember> out;
  for (const auto& kv : markers.kvs()) out.push_back(MarkerOf(delay_prefix_, prefix_, kv));
  return out;
}

// ---- Act

EtcdAcquisition::RoundResult EtcdAcquisition::Act(Round& round, const QueueView& view,
                                                  const QueueStep& step) {
  if (round.keep_alive) {
    DLOCK_ASSIGN_OR_RETURN(const bool alive, ConfirmSession(round));
    if (!alive) return AnotherRound();
  }
  if (step.kind == QueueStep::Kind::kGranted) {
    if (request_.lock_delay > milliseconds(0) && !view.own_marker) {
      DLOCK_ASSIGN_OR_RETURN(const bool put, PutMarker(round));
      if (!put) return AnotherRound();
    }
    return std::optional(Grant(round));
  }
  if (request_.queue_ttl == milliseconds(0)) return std::optional(LeaveQueue(round, step));
  DLOCK_RETURN_IF_ERROR(RecordWatch(round, view, step));
  return std::optional(Attempt{});
}

// The keep-alive sent with this round's read. False when the session is
// gone: the next round starts a new one.
Result<bool> EtcdAcquisition::ConfirmSession(Round& round) {
  // An error leaves the key; a retry finds it.
  DLOCK_ASSIGN_OR_RETURN(const std::int64_t ttl,
                         backend_.conn_.AwaitKeepAlive(*round.keep_alive, round.deadline));
  if (ttl <= 0) {
    backend_.MarkSessionDead(round.session);
    return false;
  }
  std::lock_guard l(backend_.mu_);
  round.session->confirmed_at = std::max(round.session->confirmed_at, round.started);
  return true;
}

// Before the grant is reported, so before any write under it can be in
// flight: the marker that keeps the name closed for the delay if this
// holding ends uncleanly. Put only while our member is still there: a
// holding lost before this was never reported. False: another round.
Result<bool> EtcdAcquisition::PutMarker(const Round& round) {
  DLOCK_ASSIGN_OR_RETURN(std::shared_ptr<Session> lease,
                         MarkerLease(*round.session, round.deadline));
  pb::TxnRequest txn;
  *txn.add_compare() = CreateRevisionIs(member_.key, member_.revision);
  *txn.add_success() =
      PutOp(member_.marker_key, EncodeMarker(member_.revision, member_.value), lease->id);
  Result<pb::TxnResponse> put = backend_.conn_.Txn(txn, round.deadline);
  if (!put.ok() && put.status().code() == StatusCode::kNotOwner) {
    // The marker's lease is gone (unseen for longer than its TTL): the
    // next round grants another.
    member_.marker_lease.reset();
    return false;
  }
  DLOCK_ASSIGN_OR_RETURN(pb::TxnResponse got, std::move(put));
  if (!got.succeeded()) {
    // Our key is gone (session expired, or deleted by hand): queue anew.
    member_.revision = 0;
    return false;
  }
  return true;
}

// The lease for this holding's marker: one granted for an earlier round
// whose marker did not get put, unless it may have expired since (nothing
// keeps it alive before the grant), else a new one (TTL: the session's plus
// the delay, in whole seconds, rounded up).
Result<std::shared_ptr<Session>> EtcdAcquisition::MarkerLease(const Session& session,
                                                              TimePoint deadline) {
  const std::int64_t secs =
      session.ttl_seconds + std::chrono::ceil<seconds>(request_.lock_delay).count();
  {
    std::lock_guard l(backend_.mu_);
    if (const auto& m = member_.marker_lease;
        m && m->ttl_seconds >= secs &&
        backend_.Now() < m->confirmed_at + seconds(m->ttl_seconds) * 2 / 3) {
      return m;
    }
  }
  DLOCK_ASSIGN_OR_RETURN(std::shared_ptr<Session> lease,
                         backend_.GrantLease(secs, "a lock-delay marker's lease", deadline));
  member_.marker_lease = lease;
  member_.marker_key = DelayKey(delay_prefix_, prefix_, member_.key);
  return lease;
}

Attempt EtcdAcquisition::Grant(const Round& round) {
  granted_ = true;
  watch_ = WatchTarget{};
  Attempt a;
  a.granted = true;
  a.token = static_cast<FencingToken>(member_.revision);
  a.granted_ttl = seconds(round.session->ttl_seconds);
  std::lock_guard l(backend_.mu_);
  a.valid_from = round.session->confirmed_at;
  // The marker outlives the holding by the delay only if it was kept alive
  // as recently as the session was.
  if (member_.marker_lease) {
    a.valid_from = std::min(a.valid_from, member_.marker_lease->confirmed_at);
  }
  backend_.HoldLocked(id_, member_, a.granted_ttl,
                      std::max(round.started, a.valid_from) + a.granted_ttl);
  return a;
}

// A single attempt takes no place in the queue: it deletes its key, and
// says how long what stands in its way may last.
Attempt EtcdAcquisition::LeaveQueue(const Round& round, const QueueStep& step) {
  // Revision 0: refused without a put (PutTxn's first condition).
  if (member_.revision != 0) {
    const PendingDelete mine{member_.key, member_.revision, member_.value, round.session->id};
    const Status deleted = backend_.DeleteMember(mine, round.deadline);
    if (!deleted.ok()) {
      std::lock_guard l(backend_.mu_);
      backend_.pending_.push_back(mine);
    }
  }
  {
    std::lock_guard l(backend_.mu_);
    member_ = Member{};
  }
  Attempt a;
  if (step.blocker_lease != 0) a.holder_ttl_remaining = TimeLeft(step.blocker_lease, round);
  return a;
}

// What `lease` has left by etcd's clock (zero when unknown): asked once per
// lease in a batch (TryAcquireMany), whose attempts are mostly refused by
// the same holder.
milliseconds EtcdAcquisition::TimeLeft(std::int64_t lease, const Round& round) {
  if (time_left_ != nullptr) {
    if (auto it = time_left_->find(lease); it != time_left_->end()) return it->second;
  }
  milliseconds left{0};
  auto got = backend_.conn_.LeaseTimeToLive(lease, round.deadline);
  if (got.ok() && got->ttl() > 0) left = seconds(got->ttl());
  if (time_left_ != nullptr && got.ok()) (*time_left_)[lease] = left;
  return left;
}

Status EtcdAcquisition::RecordWatch(const Round& round, const QueueView& view,
                                    const QueueStep& step) {
  using Kind = QueueStep::Kind;
  watch_ = WatchTarget{};
  switch (step.kind) {
    case Kind::kGranted:
      break;
    case Kind::kFindPredecessor: {
      DLOCK_ASSIGN_OR_RETURN(std::optional<QueueMember> p,
                             backend_.Predecessor(prefix_, view.revision, round.deadline));
      // None: everything ahead left between the reads; the next try may win.
      if (p) watch_ = {p->key, "", p->create_revision, 0, 0};
      break;
    }
    case Kind::kWatchMember:
      watch_ = {step.member.key, "", step.member.create_revision, 0, view.read_at};
      break;
    case Kind::kWatchQueue:
      // No single member must go: any key created before ours going may
      // let us in.
      watch_ = {prefix_, PrefixRangeEnd(prefix_), view.revision - 1, view.keys_ahead, view.read_at};
      break;
    case Kind::kWatchMarkers:
      // Only lock-delays stand in the way: they end when etcd expires the
      // markers' leases, by its clock, and deletes the markers.
      watch_ = {delay_prefix_, PrefixRangeEnd(delay_prefix_), view.read_at, view.markers,
                view.read_at};
      break;
  }
  return Status::Ok();
}

// ---- Wait, Abandon

bool EtcdAcquisition::Wait(TimePoint until, std::stop_token stop) {
  if (member_.key.empty()) return false;  // no place (a single attempt): the core polls
  if (watch_.key.empty()) return true;    // nothing ahead any more: try again
  std::stop_source woken;
  {
    std::lock_guard l(backend_.mu_);
    if (!member_.session || member_.session->dead) return true;  // our key went with it
    waking_ = &woken;
  }
  {
    std::stop_callback forward(stop, [&woken] { woken.request_stop(); });
    Connection& conn = backend_.conn_;
    if (watch_.range_end.empty()) {
      (void)conn.WaitForDelete(watch_.key, watch_.revision, watch_.seen_at, until,
                               woken.get_token());
    } else {
      (void)conn.WaitForDeleteIn(watch_.key, watch_.range_end, watch_.revision, watch_.expected,
                                 watch_.seen_at, until, woken.get_token());
    }
  }
  std::lock_guard l(backend_.mu_);
  waking_ = nullptr;
  return true;
}

// The same watch as Wait's, with the same revisions: a deletion after the
// Try's read is seen however late the watch starts, so none is lost
// between Try and Notify. The watch is on the key just ahead (a limit-1
// waiter), so a hand-off wakes one waiter.
bool EtcdAcquisition::Notify(std::function<void()> wake) {
  if (member_.key.empty()) return false;  // no place (a single attempt): the core polls
  // Nothing ahead any more: the next Try may win at once. Said by polling,
  // which tries again soon, since `wake` may not run inside this call.
  if (watch_.key.empty()) return false;
  Connection& conn = backend_.conn_;
  DeleteNotice notice =
      watch_.range_end.empty()
          ? conn.NotifyOnDelete(watch_.key, watch_.revision, watch_.seen_at, std::move(wake))
          : conn.NotifyOnDeleteIn(watch_.key, watch_.range_end, watch_.revision, watch_.expected,
                                  watch_.seen_at, std::move(wake));
  if (!notice) return false;
  {
    std::lock_guard l(backend_.mu_);
    // A session known alive now is one whose death wakes this (WakeLocked).
    if (member_.session && !member_.session->dead) {
      notice_ = std::move(notice);
      return true;
    }
  }
  // Our key went with the session: no wake-up to wait for.
  std::function<void()> dropped = conn.StopNotice(notice);
  return false;
}

void EtcdAcquisition::StopNotify() {
  DeleteNotice notice;
  {
    std::lock_guard l(backend_.mu_);
    notice = std::exchange(notice_, {});
  }
  // Destroyed here, outside mu_: it is the core's.
  std::function<void()> dropped = backend_.conn_.StopNotice(notice);
}

void EtcdAcquisition::Abandon() {
  StopNotify();
  // Granted: the lease is the core's now, released through the Backend.
  if (granted_ || member_.key.empty()) return;
  const Member mine = member_;
  {
    std::lock_guard l(backend_.mu_);
    member_ = Member{};
    has_place_ = false;
    // A holding of this owner on the same key (this acquisition started
    // from it) goes too: giving up releases a grant got unseen.
    if (auto it = backend_.places_.find(id_);
        it != backend_.places_.end() && it->second.member.key == mine.key) {
      backend_.places_.erase(it);
    }
  }
  watch_ = WatchTarget{};
  const TimePoint deadline = backend_.OpDeadline();
  backend_.FlushPending(deadline);
  (void)backend_.ReleaseMember(request_.key, owner_hex_, mine, /*granted=*/false, deadline);
}

}  // namespace dlock::etcd
