#include "backends/etcd/etcd_backend.h"

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include "backends/etcd/etcd_connection.h"
#include "core/duration.h"

namespace dlock::etcd {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::string Quoted(std::string_view key) { return "'" + std::string(key) + "'"; }

// ---- Request builders

pb::RequestOp GetOp(const std::string& key) {
  pb::RequestOp op;
  op.mutable_request_range()->set_key(key);
  return op;
}

// The queue member with the lowest create_revision: the holder, unless it
// belongs to a longer name (checked by the caller).
pb::RequestOp FirstInQueueOp(const std::string& prefix) {
  pb::RequestOp op;
  pb::RangeRequest* r = op.mutable_request_range();
  r->set_key(prefix);
  r->set_range_end(PrefixRangeEnd(prefix));
  r->set_limit(1);
  r->set_sort_order(pb::RangeRequest::ASCEND);
  r->set_sort_target(pb::RangeRequest::CREATE);
  return op;
}

// The member created last before `revision`: the one to wait for.
pb::RangeRequest LastBefore(const std::string& prefix, std::int64_t revision) {
  pb::RangeRequest r;
  r.set_key(prefix);
  r.set_range_end(PrefixRangeEnd(prefix));
  r.set_limit(1);
  r.set_sort_order(pb::RangeRequest::DESCEND);
  r.set_sort_target(pb::RangeRequest::CREATE);
  r.set_max_create_revision(revision - 1);
  return r;
}

pb::Compare CreateRevisionIs(const std::string& key, std::int64_t revision) {
  pb::Compare c;
  c.set_key(key);
  c.set_target(pb::Compare::CREATE);
  c.set_result(pb::Compare::EQUAL);
  c.set_create_revision(revision);
  return c;
}

pb::Compare ValueIs(const std::string& key, const std::string& value) {
  pb::Compare c;
  c.set_key(key);
  c.set_target(pb::Compare::VALUE);
  c.set_result(pb::Compare::EQUAL);
  c.set_value(value);
  return c;
}

// Every key starting with `prefix`.
pb::RequestOp RangeOp(const std::string& prefix) {
  pb::RequestOp op;
  op.mutable_request_range()->set_key(prefix);
  op.mutable_request_range()->set_range_end(PrefixRangeEnd(prefix));
  return op;
}

pb::RequestOp DeleteOp(const std::string& key) {
  pb::RequestOp op;
  op.mutable_request_delete_range()->set_key(key);
  return op;
}

// ---- State

// One etcd lease kept alive for this client: every key it puts hangs on it.
// (Also the lease of one holding's lock-delay marker, kept alive with the
// session while the holding is.)
struct Session {
  std::int64_t id = 0;
  std::int64_t ttl_seconds = 0;  // as granted
  bool dead = false;             // known gone (expired, revoked, abandoned)
  // The send time (client clock) of its last successful keep-alive or
  // grant: etcd holds it at least until confirmed_at + TTL.
  TimePoint confirmed_at{};
};

// One owner's place in one lock's queue.
struct Entry {
  OwnerId owner;
  std::shared_ptr<Session> session;
  std::string key;             // queue member key; empty until a session is chosen
  std::string value;           // what the key holds (EncodeValue)
  std::uint32_t limit = 1;     // LeaseRequest::limit
  std::int64_t revision = 0;   // its create_revision; 0 until known
  bool granted = false;
  bool busy = false;           // an attempt is in flight: never reaped
  milliseconds ttl{0};         // the TTL reported to the core
  // After this (client clock) the core has given this entry up: it was
  // neither renewed (held) nor attempted again (waiting) in time.
  TimePoint alive_until{};
  // The member ahead to watch: one without whose going this entry cannot be
  // granted (the one just ahead for a limit-1 entry, the nearest limit-1
  // one ahead for a sharing entry).
  std::string predecessor;
  std::int64_t predecessor_revision = 0;
  // No such member (a semaphore waiter behind sharing members only): watch
  // the whole queue for the going of any of the `ahead_count` keys created
  // before ours (predecessor_revision: our revision - 1).
  bool watch_range = false;
  std::int64_t ahead_count = 0;
  // The store revision at which the predecessor was read (0: unknown).
  std::int64_t predecessor_seen_at = 0;
  // Only lock-delay markers whose members are gone stand in the way: watch
  // the name's markers for the going of any of the `markers_count` there
  // were at store revision `markers_seen_at`.
  bool watch_markers = false;
  std::int64_t markers_count = 0;
  std::int64_t markers_seen_at = 0;
  // With a lock-delay: this holding's marker (DelayKey; set before it is
  // put, so that a release whose reply is lost still deletes it) and its
  // own lease, kept alive with the session by Renew. One lease per holding,
  // not one per client: a lease shared by several holdings would keep the
  // marker of one that ended uncleanly alive through the others', and the
  // delay would never end while the client lives.
  std::string marker_key;
  std::shared_ptr<Session> marker_lease;
};

// A key to delete once the store answers again. Owner-checked by revision
// (or by value while the revision is unknown).
struct PendingDelete {
  std::string key;
  std::int64_t revision = 0;
  std::string value;
  std::int64_t lease = 0;
  // A clean release: the lock-delay marker goes with the key, in the same
  // transaction. Empty for a key that ends uncleanly (reaped): its marker
  // stays and closes the name for the delay.
  std::string marker;
};

using EntryId = std::pair<std::string, OwnerId>;  // lock name, owner

// The sharing rule over a queue read in create order: member i holds iff
// i + 1 <= the smallest limit among members 0..i. Holders are therefore
// always a prefix of the queue.
std::size_t HolderCount(const std::vector<EtcdBackend::QueueMember>& queue) {
  std::uint32_t limit = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < queue.size(); ++i) {
    limit = std::min(limit, queue[i].limit);
    if (i + 1 > limit) return i;
  }
  return queue.size();
}

EtcdBackend::QueueMember MemberOf(const mvccpb::KeyValue& kv) {
  MemberValue v = DecodeValue(kv.value());
  return {kv.key(), kv.create_revision(), kv.lease(), std::move(v.owner_hex), v.limit,
          std::move(v.label)};
}

// The members of `prefix`'s queue created before `revision`, oldest first.
pb::RangeRequest AheadOf(const std::string& prefix, std::int64_t revision) {
  pb::RangeRequest r;
  r.set_key(prefix);
  r.set_range_end(PrefixRangeEnd(prefix));
  r.set_sort_order(pb::RangeRequest::ASCEND);
  r.set_sort_target(pb::RangeRequest::CREATE);
  if (revision > 0) r.set_max_create_revision(revision - 1);
  return r;
}

class EtcdBackendImpl final : public EtcdBackend {
 public:
  explicit EtcdBackendImpl(EtcdOptions options)
      : options_(std::move(options)),
        conn_(options_.endpoints, options_.request_timeout) {}
  ~EtcdBackendImpl() override;

  Status Connect() {
    return conn_.Probe(MonotonicClock::now() + options_.connect_timeout);
  }

  Result<Attempt> TryAcquire(const LeaseRequest& request) override;
  Status Release(std::string_view key, const OwnerId& owner) override;
  std::vector<Status> Renew(std::span<const LeaseRequest> leases) override;
  Result<std::vector<HolderInfo>> List(std::string_view prefix) override;
  Result<std::vector<WaiterInfo>> Waiters(std::string_view prefix) override;
  bool SupportsSharing() const override { return true; }
  bool SupportsLockDelay() const override { return true; }
  Result<bool> IsDone(std::string_view key) override;
  Status MarkDone(std::string_view key, const OwnerId& owner) override;
  bool WaitForRelease(std::string_view key, TimePoint until, std::stop_token stop) override;
  std::string Describe() const override;
  // The floor for `dlock bench`: one Raft-replicated write (a put of a key
  // no lock uses), as a grant costs.
  Status Ping() override {
    pb::TxnRequest txn;
    pb::RequestOp put;
    put.mutable_request_put()->set_key(options_.root + ".dlock-ping");
    put.mutable_request_put()->set_value("ping");
    *txn.add_success() = put;
    return conn_.Txn(txn, OpDeadline()).status();
  }

  Result<std::vector<QueueMember>> Queue(std::string_view name) override {
    return ReadQueue(QueuePrefix(options_.root, name), OpDeadline());
  }
  Result<std::vector<QueueMember>> DelayMarkers(std::string_view name) override;
  std::vector<std::int64_t> SessionLeases() override {
    std::lock_guard l(mu_);
    std::vector<std::int64_t> ids;
    for (const auto& [secs, s] : sessions_) {
      if (!s->dead) ids.push_back(s->id);
    }
    return ids;
  }

 private:
  struct SessionChoice {
    std::shared_ptr<Session> session;
    bool fresh = false;  // granted by this call: no keep-alive needed
  };

  TimePoint Now() const { return options_.clock->Now(); }
  TimePoint OpDeadline() const { return MonotonicClock::now() + options_.request_timeout; }
  // The real-time deadline for an attempt whose caller waits until
  // `client_deadline` (client clock).
  TimePoint AttemptDeadline(TimePoint client_deadline) const {
    const TimePoint op = OpDeadline();
    if (client_deadline == TimePoint::max()) return op;
    return std::min(op, MonotonicClock::now() + (client_deadline - Now()));
  }

  Result<SessionChoice> GetSession(milliseconds ttl, TimePoint deadline);
  void MarkSessionDead(const std::shared_ptr<Session>& session);
  // The lease for this holding's lock-delay marker: the entry's, or a new
  // one (TTL: the session's plus the delay, in whole seconds, rounded up).
  Result<std::shared_ptr<Session>> MarkerLease(const LeaseRequest& request,
                                               const Session& session, TimePoint deadline);
  Result<Attempt> Attempt1(const LeaseRequest& request, TimePoint started, TimePoint deadline);
  Result<std::vector<QueueMember>> ReadQueue(const std::string& prefix, TimePoint deadline);
  // One lock's queue, in create order, and its ghosts: lock-delay markers
  // whose members are gone.
  struct Listing {
    std::vector<QueueMember> queue;
    std::vector<QueueMember> ghosts;
  };
  // How many members at the front of the queue hold: the sharing rule over
  // the ghosts and then the queue (a ghost takes a place like a holding).
  static std::size_t LiveHolderCount(const Listing& listing) {
    std::vector<QueueMember> all = listing.ghosts;
    all.insert(all.end(), listing.queue.begin(), listing.queue.end());
    const std::size_t n = HolderCount(all);
    return n > listing.ghosts.size() ? n - listing.ghosts.size() : 0;
  }
  // Every queue of names starting with `prefix`.
  Result<std::map<std::string, Listing>> ReadQueues(std::string_view prefix, TimePoint deadline);
  Result<std::optional<mvccpb::KeyValue>> Head(const std::string& prefix,
                                           const pb::RangeResponse& first, TimePoint deadline);
  Result<std::optional<mvccpb::KeyValue>> Predecessor(const std::string& prefix,
                                                  std::int64_t revision, TimePoint deadline);
  Status DeleteMember(const PendingDelete& d, TimePoint deadline);
  void FlushPending(TimePoint deadline);
  void ReapLocked(TimePoint now);
  void ChangedLocked(const std::string& name);
  // The entry of `name` if it still belongs to `owner`.
  Entry* FindLocked(const std::string& name, const OwnerId& owner) {
    auto it = entries_.find(EntryId(name, owner));
    return it != entries_.end() ? &it->second : nullptr;
  }

  const EtcdOptions options_;
  Connection conn_;

  std::mutex session_mu_;  // one session grant at a time; taken before mu_
  std::mutex mu_;          // guards everything below
  std::condition_variable_any changed_;
  std::uint64_t version_ = 0;  // bumped on every change of entries_
  std::map<EntryId, Entry> entries_;                                 // by lock name, owner
  std::map<std::int64_t, std::shared_ptr<Session>> sessions_;        // by whole seconds asked
  std::vector<PendingDelete> pending_;
  std::multimap<std::string, std::stop_source*, std::less<>> waits_;  // watches by lock name
};

EtcdBackendImpl::~EtcdBackendImpl() {
  // Whatever is still queued or held here belongs to nobody now (every Lease
  // is gone, or the core would still be alive): revoke those sessions, which
  // deletes their keys at once. Sessions without keys expire by themselves.
  std::vector<std::int64_t> revoke;
  {
    std::lock_guard l(mu_);
    for (const auto& [id, e] : entries_) {
      if (e.session && !e.session->dead) revoke.push_back(e.session->id);
    }
    for (const auto& d : pending_) revoke.push_back(d.lease);
  }
  std::sort(revoke.begin(), revoke.end());
  revoke.erase(std::unique(revoke.begin(), revoke.end()), revoke.end());
  for (std::int64_t id : revoke) {
    if (id == 0) continue;
    (void)conn_.LeaseRevoke(
        id, MonotonicClock::now() + std::min<milliseconds>(options_.request_timeout, seconds(2)));
  }
}

std::string EtcdBackendImpl::Describe() const {
  std::string s = "etcd://" + conn_.EndpointList();
  if (!options_.root.empty()) s += "/" + options_.root.substr(0, options_.root.size() - 1);
  return s;
}

void EtcdBackendImpl::ChangedLocked(const std::string& name) {
  ++version_;
  changed_.notify_all();
  auto [lo, hi] = waits_.equal_range(name);
  for (auto it = lo; it != hi; ++it) it->second->request_stop();
}

void EtcdBackendImpl::ReapLocked(TimePoint now) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    Entry& e = it->second;
    if (e.busy || e.alive_until == TimePoint{} || now < e.alive_until) {
      ++it;
      continue;
    }
    // The core stopped renewing or retrying this one: its key must not be
    // kept alive by the session's other keep-alives.
    if (!e.key.empty() && e.session && !e.session->dead) {
      pending_.push_back({e.key, e.revision, e.value, e.session->id});
    }
    const std::string name = it->first.first;
    it = entries_.erase(it);
    ChangedLocked(name);
  }
}

Status EtcdBackendImpl::DeleteMember(const PendingDelete& d, TimePoint deadline) {
  pb::TxnRequest txn;
  *txn.add_compare() =
      d.revision != 0 ? CreateRevisionIs(d.key, d.revision) : ValueIs(d.key, d.value);
  *txn.add_success() = DeleteOp(d.key);
  if (!d.marker.empty()) *txn.add_success() = DeleteOp(d.marker);
  return conn_.Txn(txn, deadline).status();
}

void EtcdBackendImpl::FlushPending(TimePoint deadline) {
  std::vector<PendingDelete> todo;
  {
    std::lock_guard l(mu_);
    if (pending_.empty()) return;
    if (conn_.LooksDown()) return;  // not now: the next call tries again
    todo.swap(pending_);
  }
  std::size_t done = 0;
  for (; done < todo.size(); ++done) {
    if (!DeleteMember(todo[done], deadline).ok()) break;
  }
  std::lock_guard l(mu_);
  pending_.insert(pending_.end(), todo.begin() + static_cast<std::ptrdiff_t>(done), todo.end());
}

Result<EtcdBackendImpl::SessionChoice> EtcdBackendImpl::GetSession(milliseconds ttl,
                                                                   TimePoint deadline) {
  // etcd counts TTLs in whole seconds; round up, never down.
  const std::int64_t secs =
      std::max<std::int64_t>(1, std::chrono::ceil<seconds>(ttl).count());
  std::lock_guard grant_lock(session_mu_);
  {
    std::lock_guard l(mu_);
    auto it = sessions_.find(secs);
    if (it != sessions_.end() && !it->second->dead) {
      const auto& s = it->second;
      bool in_use = false;
      for (const auto& [id, e] : entries_) in_use = in_use || e.session == s;
      // A session nothing kept alive for most of its TTL has expired (or
      // is about to): start a new one rather than learn it the slow way.
      if (in_use || Now() < s->confirmed_at + seconds(s->ttl_seconds) * 2 / 3) {
        return SessionChoice{s, false};
      }
      s->dead = true;
    }
  }
  const TimePoint sent = Now();
  auto granted = conn_.LeaseGrant(secs, deadline);
  if (!granted.ok()) return granted.status().WithContext("start an etcd session");
  if (!granted->error().empty()) {
    return UnavailableError("etcd refused to grant a session lease: " + granted->error());
  }
  auto s = std::make_shared<Session>();
  s->id = granted->id();
  s->ttl_seconds = granted->ttl();
  s->confirmed_at = sent;
  std::lock_guard l(mu_);
  sessions_[secs] = s;
  return SessionChoice{s, true};
}

void EtcdBackendImpl::MarkSessionDead(const std::shared_ptr<Session>& session) {
  std::lock_guard l(mu_);
  session->dead = true;
  for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
    if (it->second == session) {
      sessions_.erase(it);
      break;
    }
  }
  // Its keys are gone with it: held locks are lost, waiters queue anew.
  // Entries go (so that a lost Lease nobody released yet does not keep the
  // name from this client), except one with an attempt in flight.
  for (auto it = entries_.begin(); it != entries_.end();) {
    Entry& e = it->second;
    if (e.session != session) {
      ++it;
      continue;
    }
    const std::string name = it->first.first;
    if (e.busy) {
      e.revision = 0;
      e.granted = false;
      e.predecessor.clear();
      e.watch_range = false;
      ++it;
    } else {
      it = entries_.erase(it);
    }
    ChangedLocked(name);
  }
}

Result<std::shared_ptr<Session>> EtcdBackendImpl::MarkerLease(const LeaseRequest& request,
                                                              const Session& session,
                                                              TimePoint deadline) {
  const std::int64_t secs =
      session.ttl_seconds + std::chrono::ceil<seconds>(request.lock_delay).count();
  {
    std::lock_guard l(mu_);
    Entry* e = FindLocked(request.key, request.owner);
    if (!e) return UnavailableError("the attempt was abandoned meanwhile");
    // One granted for an earlier attempt of this holding whose marker did
    // not get put, unless it may have expired since (nothing keeps it alive
    // before the grant).
    if (const auto& m = e->marker_lease;
        m && m->ttl_seconds >= secs && Now() < m->confirmed_at + seconds(m->ttl_seconds) * 2 / 3) {
      return m;
    }
  }
  const TimePoint sent = Now();
  auto granted = conn_.LeaseGrant(secs, deadline);
  if (!granted.ok()) return granted.status().WithContext("grant a lock-delay marker's lease");
  if (!granted->error().empty()) {
    return UnavailableError("etcd refused to grant a lock-delay marker's lease: " +
                            granted->error());
  }
  auto m = std::make_shared<Session>();
  m->id = granted->id();
  m->ttl_seconds = granted->ttl();
  m->confirmed_at = sent;
  std::lock_guard l(mu_);
  Entry* e = FindLocked(request.key, request.owner);
  if (!e) return UnavailableError("the attempt was abandoned meanwhile");
  e->marker_lease = m;
  e->marker_key = DelayKey(DelayPrefix(options_.root, request.key),
                           QueuePrefix(options_.root, request.key), e->key);
  return m;
}

Result<std::vector<EtcdBackend::QueueMember>> EtcdBackendImpl::DelayMarkers(
    std::string_view name) {
  const std::string from = DelayPrefix(options_.root, name);
  pb::RangeRequest r = RangeOp(from).request_range();
  auto got = conn_.Range(r, OpDeadline());
  if (!got.ok()) return got.status();
  const std::string prefix = QueuePrefix(options_.root, name);
  std::vector<QueueMember> out;
  for (const auto& kv : got->kvs()) {
    MarkerValue m = DecodeMarker(kv.value());
    out.push_back({prefix + kv.key().substr(from.size()), m.member_revision, kv.lease(),
                   std::move(m.member.owner_hex), m.member.limit, std::move(m.member.label)});
  }
  return out;
}

Result<std::vector<EtcdBackend::QueueMember>> EtcdBackendImpl::ReadQueue(
    const std::string& prefix, TimePoint deadline) {
  pb::RangeRequest r;
  r.set_key(prefix);
  r.set_range_end(PrefixRangeEnd(prefix));
  r.set_sort_order(pb::RangeRequest::ASCEND);
  r.set_sort_target(pb::RangeRequest::CREATE);
  auto got = conn_.Range(r, deadline);
  if (!got.ok()) return got.status();
  std::vector<QueueMember> members;
  for (const auto& kv : got->kvs()) {
    if (!IsQueueMember(prefix, kv.key())) continue;  // a longer name's key
    members.push_back(MemberOf(kv));
  }
  return members;
}

// The holder, given the transaction's "first in queue" read. That read may
// have hit a longer name's key ("a/b/..." for "a"): then read the queue.
Result<std::optional<mvccpb::KeyValue>> EtcdBackendImpl::Head(const std::string& prefix,
                                                          const pb::RangeResponse& first,
                                                          TimePoint deadline) {
  if (first.kvs_size() == 0) return std::optional<mvccpb::KeyValue>();
  if (IsQueueMember(prefix, first.kvs(0).key())) return std::optional(first.kvs(0));
  auto members = ReadQueue(prefix, deadline);
  if (!members.ok()) return members.status();
  if (members->empty()) return std::optional<mvccpb::KeyValue>();
  mvccpb::KeyValue kv;
  kv.set_key(members->front().key);
  kv.set_create_revision(members->front().create_revision);
  kv.set_lease(members->front().lease);
  kv.set_value(members->front().value);
  return std::optional(kv);
}

Result<std::optional<mvccpb::KeyValue>> EtcdBackendImpl::Predecessor(const std::string& prefix,
                                                                 std::int64_t revision,
                                                                 TimePoint deadline) {
  // Serializable is enough here too: a stale view of the keys ahead is a
  // superset; watching one that is already gone returns at once.
  pb::RangeRequest before = LastBefore(prefix, revision);
  before.set_serializable(true);
  auto got = conn_.Range(before, deadline);
  if (!got.ok()) return got.status();
  if (got->kvs_size() == 0) return std::optional<mvccpb::KeyValue>();
  if (IsQueueMember(prefix, got->kvs(0).key())) return std::optional(got->kvs(0));
  auto members = ReadQueue(prefix, deadline);
  if (!members.ok()) return members.status();
  std::optional<mvccpb::KeyValue> ahead;
  for (const auto& m : *members) {
    if (m.create_revision >= revision) break;
    mvccpb::KeyValue kv;
    kv.set_key(m.key);
    kv.set_create_revision(m.create_revision);
    ahead = kv;
  }
  return ahead;
}

Result<Attempt> EtcdBackendImpl::TryAcquire(const LeaseRequest& request) {
  const TimePoint started = Now();
  const TimePoint deadline = AttemptDeadline(request.deadline);
  FlushPending(deadline);
  const EntryId id(request.key, request.owner);
  {
    std::lock_guard l(mu_);
    ReapLocked(started);
    auto it = entries_.find(id);
    if (it == entries_.end()) {
      it = entries_.emplace(id, Entry{}).first;
      it->second.owner = request.owner;
      ChangedLocked(request.key);
    }
    it->second.busy = true;
  }
  Result<Attempt> result = Attempt1(request, started, deadline);
  std::lock_guard l(mu_);
  auto it = entries_.find(id);
  if (it != entries_.end()) {
    Entry& e = it->second;
    e.busy = false;
    if (result.ok() && result->granted) {
      e.alive_until = std::max(started, result->valid_from) + e.ttl;
    } else if (result.ok()) {
      // Waiting: the place is kept for queue_ttl after this attempt, as the
      // contract says; after that the entry is reaped and its key deleted.
      e.alive_until = std::max(e.alive_until, Now() + request.queue_ttl);
    } else {
      // Unsure: kept at least a TTL, so that a retry finds its place.
      const milliseconds keep = std::max(request.queue_ttl, e.granted ? e.ttl : request.ttl);
      e.alive_until = std::max(e.alive_until, started + keep);
    }
    ChangedLocked(request.key);
  }
  if (!result.ok()) {
    return result.status().WithContext("acquire " + Quoted(request.key) + " on " + Describe());
  }
  return result;
}

// One attempt, with the entry marked busy. Tries again (a few times) when
// the session turns out to be gone, with a new one.
//
// A limit-1 request needs only "is anything ahead of ours" and the member
// just ahead (two limit-1 reads, as etcd's Mutex); a sharing request reads
// the whole queue, with the limits. Either also reads the name's lock-delay
// markers in the same transaction, so in the same snapshot: a marker whose
// member is gone (a ghost: a holding that ended uncleanly less than its
// lock-delay ago) takes a place like a holding, ahead of every member.
Result<Attempt> EtcdBackendImpl::Attempt1(const LeaseRequest& request, TimePoint started,
                                          TimePoint deadline) {
  const std::string& name = request.key;
  const std::string prefix = QueuePrefix(options_.root, name);
  const std::string delay_prefix = DelayPrefix(options_.root, name);
  const std::string owner_hex = request.owner.ToString();
  const std::uint32_t my_limit = std::max<std::uint32_t>(1, request.limit);
  const bool sharing = my_limit != 1;

  for (int round = 0; round < 3; ++round) {
    auto choice = GetSession(request.ttl, deadline);
    if (!choice.ok()) return choice.status();
    const std::shared_ptr<Session> session = choice->session;
    std::string key;
    std::string value;
    std::int64_t known_revision;
    bool keep_alive_due;
    {
      std::lock_guard l(mu_);
      // The grant holds from the session's last confirmation (the core
      // counts valid_until from there, Attempt::valid_from). Refresh it,
      // alongside the transaction, once a third of its TTL has gone by.
      keep_alive_due = !choice->fresh &&
                       started - session->confirmed_at > seconds(session->ttl_seconds) / 3;
      Entry* found = FindLocked(name, request.owner);
      if (!found) return UnavailableError("the attempt was abandoned meanwhile");
      Entry& e = *found;
      if (e.session != session) {
        e.session = session;
        // The Mutex's key, unless another acquisition of this name on this
        // session has it: then one with our owner id appended.
        const std::string base = MemberKey(prefix, session->id);
        bool taken = false;
        for (auto it = entries_.lower_bound(EntryId(name, OwnerId()));
             it != entries_.end() && it->first.first == name; ++it) {
          taken = taken || (&it->second != &e && it->second.key == base);
        }
        e.key = taken ? MemberKey(prefix, session->id, owner_hex) : base;
        e.value = EncodeValue(owner_hex, my_limit, request.label);
        e.limit = my_limit;
        e.revision = 0;
        e.granted = false;
        e.marker_key.clear();
        e.marker_lease.reset();
      }
      key = e.key;
      value = e.value;
      known_revision = e.revision;
    }
    const std::string my_marker = DelayKey(delay_prefix, prefix, key);
    // etcd restarts the lease's TTL when it handles the keep-alive, after
    // `started`. It travels while the transaction does.
    std::optional<KeepAliveCall> keep_alive;
    if (keep_alive_due) keep_alive = conn_.SendKeepAlive(session->id);

    std::int64_t revision = 0;
    std::optional<mvccpb::KeyValue> head;   // limit 1: the first member
    std::optional<mvccpb::KeyValue> ahead;  // the member to watch
    bool ahead_known = false;
    std::int64_t seen_at = 0;  // the revision `ahead` was read at
    // Sharing: the whole queue, every member created before ours, and how
    // many keys of the range (longer names' included) were created before
    // ours.
    std::vector<QueueMember> queue;
    std::optional<std::vector<QueueMember>> before;
    std::int64_t before_raw = 0;
    auto take_queue = [&](const pb::RangeResponse& range, std::int64_t below) {
      queue.clear();
      before.emplace();
      before_raw = 0;
      for (const auto& kv : range.kvs()) {
        const bool member = IsQueueMember(prefix, kv.key());
        if (member) queue.push_back(MemberOf(kv));
        if (kv.create_revision() >= below) continue;
        ++before_raw;
        if (member) before->push_back(queue.back());
      }
    };
    pb::RangeResponse markers;  // the name's lock-delay markers
    std::int64_t markers_seen_at = 0;
    if (known_revision != 0) {
      // Already queued: one read (no Raft write) says whether it is our turn.
      // A serializable read (served by the member alone, no quorum round) is
      // enough: the keys ahead of ours were all created before ours, so that
      // set only ever shrinks, and a stale view can only show more of them
      // (we wait again), never fewer. Nor can it hide a ghost: a holder puts
      // its marker while its member is still there (the put compares it) and
      // before it reports its grant, so any snapshot that lacks the member of
      // a reported holding has its marker, until the delay is over. The
      // session's confirmation vouches for our own key still being there.
      pb::TxnRequest txn;
      *txn.add_success() = GetOp(key);
      if (sharing) {
        *txn.add_success()->mutable_request_range() = AheadOf(prefix, 0);
      } else {
        *txn.add_success() = FirstInQueueOp(prefix);
        pb::RequestOp last;
        *last.mutable_request_range() = LastBefore(prefix, known_revision);
        *txn.add_success() = last;
      }
      *txn.add_success() = RangeOp(delay_prefix);
      for (auto& op : *txn.mutable_success()) op.mutable_request_range()->set_serializable(true);
      auto r = conn_.Txn(txn, deadline);
      if (!r.ok()) return r.status();
      const auto& mine = r->responses(0).response_range();
      if (mine.kvs_size() == 0 || mine.kvs(0).create_revision() != known_revision) {
        // Our key is gone (session expired, or deleted by hand): queue anew.
        std::lock_guard l(mu_);
        if (Entry* e = FindLocked(name, request.owner)) {
          e->revision = 0;
          e->granted = false;
        }
        continue;
      }
      revision = known_revision;
      seen_at = r->header().revision();
      markers = r->responses(r->responses_size() - 1).response_range();
      markers_seen_at = seen_at;
      if (sharing) {
        take_queue(r->responses(1).response_range(), revision);
      } else {
        auto h = Head(prefix, r->responses(1).response_range(), deadline);
        if (!h.ok()) return h.status();
        head = *h;
        const auto& b = r->responses(2).response_range();
        if (b.kvs_size() == 0 || IsQueueMember(prefix, b.kvs(0).key())) {
          if (b.kvs_size() > 0) ahead = b.kvs(0);
          ahead_known = true;
        }
      }
    } else {
      // The uncontended path, as etcd's Mutex: put our key unless it exists,
      // and read the head of the queue, in one transaction.
      pb::TxnRequest txn;
      *txn.add_compare() = CreateRevisionIs(key, 0);
      pb::RequestOp put;
      put.mutable_request_put()->set_key(key);
      put.mutable_request_put()->set_value(value);
      put.mutable_request_put()->set_lease(session->id);
      *txn.add_success() = put;
      if (sharing) {
        // The whole queue: ours is its newest member.
        *txn.add_success()->mutable_request_range() = AheadOf(prefix, 0);
      } else {
        *txn.add_success() = FirstInQueueOp(prefix);
        // The two newest members: ours and, if contended, the one to wait for.
        pb::RequestOp newest = FirstInQueueOp(prefix);
        newest.mutable_request_range()->set_sort_order(pb::RangeRequest::DESCEND);
        newest.mutable_request_range()->set_limit(2);
        *txn.add_success() = newest;
      }
      *txn.add_success() = RangeOp(delay_prefix);
      *txn.add_failure() = GetOp(key);
      *txn.add_failure() = FirstInQueueOp(prefix);
      if (sharing) *txn.add_failure()->mutable_request_range() = AheadOf(prefix, 0);
      *txn.add_failure() = RangeOp(delay_prefix);
      auto r = conn_.Txn(txn, deadline);
      if (!r.ok()) {
        if (r.status().code() == StatusCode::kNotOwner) {  // the lease is gone
          MarkSessionDead(session);
          continue;
        }
        return r.status();
      }
      markers = r->responses(r->responses_size() - 1).response_range();
      markers_seen_at = r->header().revision();
      if (r->succeeded()) {
        revision = r->header().revision();
        seen_at = r->header().revision();
        if (sharing) {
          take_queue(r->responses(1).response_range(), revision);
        } else {
          const auto& last = r->responses(2).response_range();
          if (last.kvs_size() >= 1 && last.kvs(0).create_revision() == revision &&
              (last.kvs_size() < 2 || IsQueueMember(prefix, last.kvs(1).key()))) {
            if (last.kvs_size() == 2) ahead = last.kvs(1);
            ahead_known = true;
          }
        }
      } else {
        const mvccpb::KeyValue& mine = r->responses(0).response_range().kvs(0);
        if (DecodeValue(mine.value()).owner_hex != owner_hex) {
          // Left by an earlier acquisition of this client whose release did
          // not get through: remove it, then queue anew.
          DLOCK_RETURN_IF_ERROR(
              DeleteMember({key, mine.create_revision(), "", session->id}, deadline));
          continue;
        }
        revision = mine.create_revision();  // a retry of ours: same place
        if (sharing) {
          seen_at = r->header().revision();
          take_queue(r->responses(2).response_range(), revision);
        }
      }
      {
        std::lock_guard l(mu_);
        if (Entry* e = FindLocked(name, request.owner)) e->revision = revision;
      }
      if (!sharing) {
        auto h = Head(prefix, r->responses(1).response_range(), deadline);
        if (!h.ok()) return h.status();
        head = *h;
      }
    }

    // The markers: ours (put by an earlier attempt of this holding whose
    // reply was lost), live holders' (sharing: their members are in the
    // queue; limit 1: only ever ahead of ours, which blocks us anyway), and
    // ghosts.
    bool own_marker = false;
    std::vector<QueueMember> ghosts;
    for (const auto& kv : markers.kvs()) {
      MarkerValue m = DecodeMarker(kv.value());
      if (kv.key() == my_marker && m.member_revision == revision) {
        own_marker = true;
        continue;
      }
      const std::string member = prefix + kv.key().substr(delay_prefix.size());
      if (sharing && std::any_of(queue.begin(), queue.end(), [&](const QueueMember& q) {
            return q.key == member && q.create_revision == m.member_revision;
          })) {
        continue;
      }
      ghosts.push_back({member, m.member_revision, kv.lease(), std::move(m.member.owner_hex),
                        m.member.limit, std::move(m.member.label)});
    }

    std::int64_t head_lease = 0;  // the first member's, for holder_ttl_remaining
    bool watch_range = false;
    bool granted = false;
    bool ghosts_only = false;  // only ghosts stand in the way: watch the markers
    if (!sharing) {
      const bool first = !head || head->create_revision() == revision;
      granted = first && ghosts.empty();
      ghosts_only = first && !granted;
      if (head) head_lease = head->lease();
    } else {
      std::uint32_t limit = my_limit;
      for (const auto& m : *before) limit = std::min(limit, m.limit);
      const bool fits = before->size() + 1 <= limit;
      for (const auto& g : ghosts) limit = std::min(limit, g.limit);
      granted = before->size() + ghosts.size() + 1 <= limit;
      ghosts_only = fits && !granted;
      if (!before->empty()) head_lease = before->front().lease;
      if (!granted && !ghosts_only) {
        // The nearest limit-1 member ahead: while it is there we cannot be
        // granted (a reader waits for the writer ahead of it, not for the
        // reader just ahead, with whom it will share). Without one (a
        // semaphore's waiter), no single member must go: watch them all.
        for (auto it = before->rbegin(); it != before->rend(); ++it) {
          if (it->limit != 1) continue;
          ahead.emplace();
          ahead->set_key(it->key);
          ahead->set_create_revision(it->create_revision);
          break;
        }
        watch_range = !ahead;
        ahead_known = true;
      }
    }
    // Waiting out a lock-delay: it ends when the marker's lease does.
    if (ghosts_only) head_lease = ghosts.front().lease;

    if (keep_alive) {
      auto ttl = conn_.AwaitKeepAlive(*keep_alive, deadline);
      if (!ttl.ok()) return ttl.status();  // the key stays; a retry finds it
      if (*ttl <= 0) {
        MarkSessionDead(session);
        continue;
      }
      std::lock_guard l(mu_);
      session->confirmed_at = std::max(session->confirmed_at, started);
    }

    if (granted && request.lock_delay > milliseconds(0) && !own_marker) {
      // Before the grant is reported, so before any write under it can be
      // in flight: the marker that keeps the name closed for the delay if
      // this holding ends uncleanly. Put only while our member is still
      // there: a holding lost before this was never reported.
      auto marker_lease = MarkerLease(request, *session, deadline);
      if (!marker_lease.ok()) return marker_lease.status();
      pb::TxnRequest txn;
      *txn.add_compare() = CreateRevisionIs(key, revision);
      pb::RequestOp put;
      put.mutable_request_put()->set_key(my_marker);
      put.mutable_request_put()->set_value(EncodeMarker(revision, value));
      put.mutable_request_put()->set_lease((*marker_lease)->id);
      *txn.add_success() = put;
      auto r = conn_.Txn(txn, deadline);
      std::lock_guard l(mu_);
      Entry* e = FindLocked(name, request.owner);
      if (!r.ok()) {
        // The marker's lease is gone (unseen for longer than its TTL): the
        // next round grants another.
        if (r.status().code() == StatusCode::kNotOwner) {
          if (e) e->marker_lease.reset();
          continue;
        }
        return r.status();
      }
      if (!r->succeeded()) {
        // Our key is gone (session expired, or deleted by hand): queue anew.
        if (e) {
          e->revision = 0;
          e->granted = false;
        }
        continue;
      }
    }

    if (granted) {
      std::lock_guard l(mu_);
      Entry* found = FindLocked(name, request.owner);
      if (!found) return UnavailableError("the attempt was abandoned meanwhile");
      Entry& e = *found;
      e.granted = true;
      e.ttl = seconds(session->ttl_seconds);
      e.predecessor.clear();
      e.watch_range = false;
      e.watch_markers = false;
      Attempt a;
      a.granted = true;
      a.token = static_cast<FencingToken>(revision);
      a.granted_ttl = e.ttl;
      a.valid_from = session->confirmed_at;
      // The marker outlives the holding by the delay only if it was kept
      // alive as recently as the session was.
      if (e.marker_lease) a.valid_from = std::min(a.valid_from, e.marker_lease->confirmed_at);
      return a;
    }

    Attempt a;
    if (request.queue_ttl == milliseconds(0)) {
      // A single attempt takes no place in the queue.
      const Status deleted = DeleteMember({key, revision, value, session->id}, deadline);
      {
        std::lock_guard l(mu_);
        if (!deleted.ok()) pending_.push_back({key, revision, value, session->id});
        entries_.erase(EntryId(name, request.owner));
        ChangedLocked(name);
      }
      if (head_lease != 0) {
        auto left = conn_.LeaseTimeToLive(head_lease, deadline);
        if (left.ok() && left->ttl() > 0) a.holder_ttl_remaining = seconds(left->ttl());
      }
      return a;
    }
    if (!ahead_known && !ghosts_only) {
      auto p = Predecessor(prefix, revision, deadline);
      if (!p.ok()) return p.status();
      ahead = *p;
      seen_at = 0;
    }
    std::lock_guard l(mu_);
    if (Entry* e = FindLocked(name, request.owner)) {
      e->granted = false;
      e->watch_range = watch_range;
      e->ahead_count = before_raw;
      e->predecessor_seen_at = seen_at;
      e->watch_markers = ghosts_only;
      e->markers_count = markers.kvs_size();
      e->markers_seen_at = markers_seen_at;
      if (ahead && !ghosts_only) {
        e->predecessor = ahead->key();
        e->predecessor_revision = ahead->create_revision();
      } else {
        // Everything ahead left between the reads (or, watch_range, the
        // whole queue is watched; or watch_markers, the markers are): the
        // next attempt may win.
        e->predecessor.clear();
      }
    }
    return a;
  }
  return UnavailableError("the etcd session lease kept disappearing (expired or revoked)");
}

Status EtcdBackendImpl::Release(std::string_view key, const OwnerId& owner) {
  const std::string name(key);
  const std::string prefix = QueuePrefix(options_.root, name);
  const std::string owner_hex = owner.ToString();
  const TimePoint deadline = OpDeadline();
  FlushPending(deadline);

  bool known = false;
  bool granted = false;
  PendingDelete mine;
  std::int64_t marker_lease = 0;
  {
    std::lock_guard l(mu_);
    auto it = entries_.find(EntryId(name, owner));
    if (it != entries_.end()) {
      known = true;
      granted = it->second.granted;
      if (!it->second.key.empty() && it->second.session) {
        mine = {it->second.key, it->second.revision, it->second.value, it->second.session->id,
                it->second.marker_key};
      }
      if (it->second.marker_lease) marker_lease = it->second.marker_lease->id;
      entries_.erase(it);
      ChangedLocked(name);
    }
  }
  auto context = [&](const Status& s) {
    return s.WithContext("release " + Quoted(name) + " on " + Describe());
  };

  if (known) {
    if (mine.key.empty()) return Status::Ok();  // never got as far as a key
    if (!granted && conn_.LooksDown()) {
      // A waiter giving up while etcd cannot answer: its key goes with the
      // next call that gets through, or with the session.
      std::lock_guard l(mu_);
      pending_.push_back(mine);
      return Status::Ok();
    }
    // A clean end: the key and its lock-delay marker go together. Only if
    // the key is still ours: a release that comes after the session expired
    // must not cut the delay short.
    pb::TxnRequest txn;
    *txn.add_compare() = mine.revision != 0 ? CreateRevisionIs(mine.key, mine.revision)
                                            : ValueIs(mine.key, mine.value);
    *txn.add_success() = DeleteOp(mine.key);
    if (!mine.marker.empty()) *txn.add_success() = DeleteOp(mine.marker);
    *txn.add_failure() = FirstInQueueOp(prefix);
    auto r = conn_.Txn(txn, deadline);
    if (!r.ok()) {
      std::lock_guard l(mu_);
      pending_.push_back(mine);
      return context(r.status());
    }
    if (r->succeeded()) {
      // Holding nothing now; it would expire by itself, but a lease per
      // grant should not pile up in etcd for a TTL and a delay.
      if (marker_lease != 0) (void)conn_.LeaseRevoke(marker_lease, deadline);
      return Status::Ok();
    }
    // Our key was gone already. Say whether somebody else holds the lock.
    auto head = Head(prefix, r->responses(0).response_range(), deadline);
    if (!head.ok()) return context(head.status());
    if (*head && DecodeValue((*head)->value()).owner_hex != owner_hex) {
      return NotOwnerError("key " + Quoted(name) +
                           " is held by another owner: this owner's session key was gone "
                           "(session lease expired or revoked, or the key was deleted)");
    }
    return Status::Ok();
  }

  // An owner this client does not know (another client's, or one already
  // released): look in the store.
  auto members = ReadQueue(prefix, deadline);
  if (!members.ok()) return context(members.status());
  for (const auto& m : *members) {
    if (m.value != owner_hex) continue;
    Status s = DeleteMember({m.key, m.create_revision, "", m.lease,
                             DelayKey(DelayPrefix(options_.root, name), prefix, m.key)},
                            deadline);
    return s.ok() ? s : context(s);
  }
  if (!members->empty()) {
    return NotOwnerError("key " + Quoted(name) + " is held by another owner");
  }
  return Status::Ok();
}

std::vector<Status> EtcdBackendImpl::Renew(std::span<const LeaseRequest> leases) {
  const TimePoint started = Now();
  std::vector<Status> out(leases.size());
  struct Check {
    std::size_t index;
    std::string name;
    OwnerId owner;
    std::string key;
    std::int64_t revision;
    std::shared_ptr<Session> session;
    std::shared_ptr<Session> marker;  // the lock-delay marker's lease, if any
  };
  std::vector<Check> checks;
  milliseconds shortest = options_.request_timeout;
  {
    std::lock_guard l(mu_);
    ReapLocked(started);
    for (std::size_t i = 0; i < leases.size(); ++i) {
      auto it = entries_.find(EntryId(leases[i].key, leases[i].owner));
      const Entry* e = it == entries_.end() ? nullptr : &it->second;
      if (!e || !e->granted || !e->session || e->session->dead) {
        out[i] = NotOwnerError("etcd no longer holds key " + Quoted(leases[i].key) +
                               " for this owner: its session lease expired or was revoked, or "
                               "the key was deleted");
        continue;
      }
      checks.push_back(
          {i, it->first.first, leases[i].owner, e->key, e->revision, e->session, e->marker_lease});
      shortest = std::min(shortest, leases[i].ttl);
    }
  }
  if (checks.empty()) return out;
  // A renewal that takes longer than a quarter of the TTL is not worth
  // waiting for: the core tries again (at ttl/10) well before valid_until.
  const TimePoint deadline =
      MonotonicClock::now() +
      std::clamp<milliseconds>(shortest / 4, milliseconds(100), options_.request_timeout);
  FlushPending(deadline);

  // One keep-alive per session (usually one for the whole client), and one
  // per lock-delay marker, sent while a read checks that each key is still
  // there. A lock is renewed only if its marker's lease is too: the delay
  // then runs at least from the end of the validity the core counts.
  std::map<std::shared_ptr<Session>, KeepAliveCall> keep_alives;
  for (const auto& c : checks) {
    if (!keep_alives.contains(c.session)) keep_alives[c.session] = conn_.SendKeepAlive(c.session->id);
    if (c.marker && !keep_alives.contains(c.marker)) {
      keep_alives[c.marker] = conn_.SendKeepAlive(c.marker->id);
    }
  }
  // Serializable: the keep-alive settles the session; this only catches a
  // key deleted by hand, for which a few milliseconds of staleness are moot.
  pb::TxnRequest txn;
  for (const auto& c : checks) {
    pb::RequestOp op = GetOp(c.key);
    op.mutable_request_range()->set_serializable(true);
    *txn.add_success() = op;
  }
  auto read = conn_.Txn(txn, deadline);
  std::map<std::shared_ptr<Session>, Result<std::int64_t>> ttls;
  for (auto& [s, call] : keep_alives) ttls.emplace(s, conn_.AwaitKeepAlive(call, deadline));

  std::vector<std::shared_ptr<Session>> dead;
  {
    std::lock_guard l(mu_);
    for (std::size_t j = 0; j < checks.size(); ++j) {
      const Check& c = checks[j];
      const Result<std::int64_t>& ttl = ttls.at(c.session);
      const Result<std::int64_t>* marker_ttl = c.marker ? &ttls.at(c.marker) : nullptr;
      Status& result = out[c.index];
      if (!ttl.ok()) {
        result = ttl.status();
      } else if (*ttl <= 0) {
        result = NotOwnerError("the etcd session lease of key " + Quoted(c.name) +
                               " expired or was revoked");
        dead.push_back(c.session);
      } else if (marker_ttl && !marker_ttl->ok()) {
        result = marker_ttl->status();
      } else if (marker_ttl && **marker_ttl <= 0) {
        // Revoked by hand (it cannot expire before the session): the delay
        // this lock promised is gone, so the lock is given up.
        result = NotOwnerError("the lease of the lock-delay marker of key " + Quoted(c.name) +
                               " expired or was revoked");
        auto it = entries_.find(EntryId(c.name, c.owner));
        if (it != entries_.end() && it->second.revision == c.revision) {
          pending_.push_back({c.key, c.revision, it->second.value, c.session->id});
          entries_.erase(it);
          ChangedLocked(c.name);
        }
      } else if (!read.ok()) {
        result = read.status();
      } else {
        const auto& kvs = read->responses(static_cast<int>(j)).response_range();
        auto it = entries_.find(EntryId(c.name, c.owner));
        const bool same = it != entries_.end() && it->second.revision == c.revision;
        if (kvs.kvs_size() == 0 || kvs.kvs(0).create_revision() != c.revision) {
          result = NotOwnerError("the etcd key of " + Quoted(c.name) + " was deleted");
          if (same) {
            entries_.erase(it);
            ChangedLocked(c.name);
          }
        } else {
          c.session->confirmed_at = std::max(c.session->confirmed_at, started);
          if (c.marker) c.marker->confirmed_at = std::max(c.marker->confirmed_at, started);
          if (same) {
            it->second.alive_until = std::max(it->second.alive_until, started + it->second.ttl);
          }
        }
      }
      if (result.code() == StatusCode::kUnavailable) {
        result = result.WithContext("renew " + Quoted(c.name) + " on " + Describe());
      }
    }
  }
  for (const auto& s : dead) MarkSessionDead(s);
  return out;
}

Result<std::map<std::string, EtcdBackendImpl::Listing>> EtcdBackendImpl::ReadQueues(
    std::string_view prefix, TimePoint deadline) {
  const std::string from = options_.root + std::string(prefix);
  pb::TxnRequest txn;
  pb::RangeRequest* r = txn.add_success()->mutable_request_range();
  // An empty key cannot be sent; "\0" to "\0" is every key.
  r->set_key(from.empty() ? std::string(1, '\0') : from);
  r->set_range_end(PrefixRangeEnd(from));
  r->set_sort_order(pb::RangeRequest::ASCEND);
  r->set_sort_target(pb::RangeRequest::CREATE);
  // The markers, in the same snapshot: which of them are ghosts depends on
  // which members are there.
  *txn.add_success() = RangeOp(DelayListPrefix(options_.root, prefix));
  auto got = conn_.Txn(txn, deadline);
  if (!got.ok()) return got.status();
  std::map<std::string, Listing> queues;  // in create order
  for (const auto& kv : got->responses(0).response_range().kvs()) {
    auto name = LockNameOf(options_.root, kv.key());
    if (!name || name->compare(0, prefix.size(), prefix) != 0) continue;
    queues[*name].queue.push_back(MemberOf(kv));
  }
  for (const auto& kv : got->responses(1).response_range().kvs()) {
    auto name = DelayLockNameOf(options_.root, kv.key());
    if (!name || name->compare(0, prefix.size(), prefix) != 0) continue;
    const std::string delay_prefix = DelayPrefix(options_.root, *name);
    const std::string member =
        QueuePrefix(options_.root, *name) + kv.key().substr(delay_prefix.size());
    MarkerValue m = DecodeMarker(kv.value());
    Listing& listing = queues[*name];
    if (std::any_of(listing.queue.begin(), listing.queue.end(), [&](const QueueMember& q) {
          return q.key == member && q.create_revision == m.member_revision;
        })) {
      continue;  // a live holder's
    }
    listing.ghosts.push_back({member, m.member_revision, kv.lease(),
                              std::move(m.member.owner_hex), m.member.limit,
                              std::move(m.member.label)});
  }
  return queues;
}

Result<std::vector<HolderInfo>> EtcdBackendImpl::List(std::string_view prefix) {
  const TimePoint deadline = OpDeadline();
  auto queues = ReadQueues(prefix, deadline);
  if (!queues.ok()) {
    return queues.status().WithContext("list " + Quoted(prefix) + " on " + Describe());
  }
  std::vector<HolderInfo> out;
  // By lease: time left and the TTL etcd granted it.
  std::map<std::int64_t, std::pair<milliseconds, milliseconds>> leases;
  for (const auto& [name, listing] : *queues) {
    const auto& queue = listing.queue;
    // A holding inside its lock-delay is not listed (as on the other
    // stores: it holds nothing), but it still takes its place.
    const std::size_t holders = LiveHolderCount(listing);
    for (std::size_t i = 0; i < holders; ++i) {
      const QueueMember& m = queue[i];
      HolderInfo h;
      h.key = name;
      if (auto owner = OwnerId::Parse(m.value); owner.ok()) h.owner = *owner;
      h.token = static_cast<FencingToken>(m.create_revision);
      h.limit = m.limit;
      h.label = m.label;
      // held_for stays empty: etcd keeps no time with a key, and a waiter
      // becomes a holder without a write when the members ahead go.
      if (m.lease != 0) {
        if (!leases.contains(m.lease)) {
          auto ttl = conn_.LeaseTimeToLive(m.lease, deadline);
          leases[m.lease] = ttl.ok() && ttl->ttl() > 0
                                ? std::pair<milliseconds, milliseconds>(seconds(ttl->ttl()),
                                                                        seconds(ttl->grantedttl()))
                                : std::pair<milliseconds, milliseconds>();
        }
        h.ttl_remaining = leases[m.lease].first;
        h.ttl = leases[m.lease].second;
      }
      out.push_back(std::move(h));
    }
  }
  return out;
}

Result<std::vector<WaiterInfo>> EtcdBackendImpl::Waiters(std::string_view prefix) {
  const TimePoint deadline = OpDeadline();
  {
    // This client's own waiters that the core gave up on go first.
    std::lock_guard l(mu_);
    ReapLocked(Now());
  }
  FlushPending(deadline);
  auto queues = ReadQueues(prefix, deadline);
  if (!queues.ok()) {
    return queues.status().WithContext("list waiters " + Quoted(prefix) + " on " + Describe());
  }
  std::vector<WaiterInfo> out;
  for (const auto& [name, listing] : *queues) {
    const auto& queue = listing.queue;
    for (std::size_t i = LiveHolderCount(listing); i < queue.size(); ++i) {
      const QueueMember& m = queue[i];
      WaiterInfo w;
      w.key = name;
      if (auto owner = OwnerId::Parse(m.value); owner.ok()) w.owner = *owner;
      w.limit = m.limit;
      w.label = m.label;
      out.push_back(std::move(w));  // waited_for: etcd keeps no time with a key
    }
  }
  return out;
}

// Run-once records: DoneKey (etcd_keys.h), a key without a lease.
Result<bool> EtcdBackendImpl::IsDone(std::string_view key) {
  pb::RangeRequest r;
  r.set_key(DoneKey(options_.root, key));
  r.set_keys_only(true);
  // Linearizable (the default): a record another client just wrote is seen.
  auto got = conn_.Range(r, OpDeadline());
  if (!got.ok()) {
    return got.status().WithContext("read the done mark of " + Quoted(key) + " on " +
                                    Describe());
  }
  return got->kvs_size() > 0;
}

// One transaction: the record is written only if this owner's queue key is
// still the one it was granted with (same create_revision). A granted key
// stays a holder for as long as it exists (the keys ahead of it only ever
// go), so "it still exists" is "it still holds"; its session expiring, or a
// hand deleting it, makes the compare fail and nothing is written.
Status EtcdBackendImpl::MarkDone(std::string_view key, const OwnerId& owner) {
  const std::string name(key);
  std::string member;
  std::int64_t revision = 0;
  {
    std::lock_guard l(mu_);
    const Entry* e = FindLocked(name, owner);
    if (!e || !e->granted || e->key.empty() || e->revision == 0 || !e->session ||
        e->session->dead) {
      return NotOwnerError("this owner does not hold " + Quoted(name) + " on " + Describe() +
                           ": its run is not recorded as done");
    }
    member = e->key;
    revision = e->revision;
  }
  pb::TxnRequest txn;
  *txn.add_compare() = CreateRevisionIs(member, revision);
  pb::RequestOp put;
  put.mutable_request_put()->set_key(DoneKey(options_.root, name));
  put.mutable_request_put()->set_value(owner.ToString() + "\n" + std::to_string(revision));
  *txn.add_success() = put;
  auto r = conn_.Txn(txn, OpDeadline());
  if (!r.ok()) {
    return r.status().WithContext("mark " + Quoted(name) + " done on " + Describe());
  }
  if (!r->succeeded()) {
    return NotOwnerError("etcd no longer holds " + Quoted(name) +
                         " for this owner (its session lease expired or was revoked, or the "
                         "key was deleted): its run is not recorded as done");
  }
  return Status::Ok();
}

bool EtcdBackendImpl::WaitForRelease(std::string_view key, TimePoint until, std::stop_token stop) {
  const std::string name(key);
  // What to watch for a deletion: one key (range_end empty; `revision` its
  // create_revision) or a range (`revision` the newest create_revision that
  // counts, `expected` how many such keys there were at `seen_at`).
  std::string watch_key;
  std::string range_end;
  std::int64_t revision = 0;
  std::int64_t expected = 0;
  std::int64_t seen_at = 0;
  std::stop_source local;
  {
    std::unique_lock l(mu_);
    // The waiting acquisition of this name; if this client has several, the
    // oldest: what it waits for, every later one waits for too (holders are
    // a prefix of the queue).
    const Entry* waiting = nullptr;
    bool any = false;
    bool unknown = false;  // one has nothing to watch (yet)
    for (auto it = entries_.lower_bound(EntryId(name, OwnerId()));
         it != entries_.end() && it->first.first == name; ++it) {
      any = true;
      const Entry& e = it->second;
      if (e.granted) continue;
      if (e.revision == 0 || (e.predecessor.empty() && !e.watch_range && !e.watch_markers)) {
        unknown = true;
      } else if (!waiting || e.revision < waiting->revision) {
        waiting = &e;
      }
    }
    if (!any) return false;  // nothing queued: let the core poll
    if (!waiting || unknown) {
      // An attempt in flight, or everything ahead just left: wait briefly
      // for a change here; the next attempt may win.
      const TimePoint limit = std::min(until, MonotonicClock::now() + milliseconds(5));
      const std::uint64_t seen = version_;
      changed_.wait_until(l, stop, limit, [&] { return version_ != seen; });
      return true;
    }
    if (waiting->watch_markers) {
      // Only lock-delays stand in the way: they end when etcd expires the
      // markers' leases, by its clock, and deletes the markers.
      watch_key = DelayPrefix(options_.root, name);
      range_end = PrefixRangeEnd(watch_key);
      revision = waiting->markers_seen_at;
      expected = waiting->markers_count;
      seen_at = waiting->markers_seen_at;
    } else if (waiting->watch_range) {
      watch_key = QueuePrefix(options_.root, name);
      range_end = PrefixRangeEnd(watch_key);
      revision = waiting->revision - 1;
      expected = waiting->ahead_count;
      seen_at = waiting->predecessor_seen_at;
    } else {
      watch_key = waiting->predecessor;
      revision = waiting->predecessor_revision;
      seen_at = waiting->predecessor_seen_at;
    }
    waits_.emplace(name, &local);
  }
  {
    std::stop_callback forward(stop, [&local] { local.request_stop(); });
    if (!range_end.empty()) {
      (void)conn_.WaitForDeleteIn(watch_key, range_end, revision, expected, seen_at, until,
                                  local.get_token());
    } else {
      (void)conn_.WaitForDelete(watch_key, revision, seen_at, until, local.get_token());
    }
  }
  std::lock_guard l(mu_);
  for (auto [lo, hi] = waits_.equal_range(name); lo != hi; ++lo) {
    if (lo->second == &local) {
      waits_.erase(lo);
      break;
    }
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<EtcdBackend>> OpenEtcd(EtcdOptions options) {
  if (options.endpoints.empty()) return InvalidArgumentError("etcd: no endpoints");
  if (!options.clock) options.clock = DefaultClock();
  auto backend = std::make_unique<EtcdBackendImpl>(std::move(options));
  if (Status s = backend->Connect(); !s.ok()) {
    return UnavailableError("cannot connect to " + backend->Describe() + ": " + s.message());
  }
  return std::unique_ptr<EtcdBackend>(std::move(backend));
}

Result<std::unique_ptr<Backend>> Open(const internal::Uri& uri,
                                      const internal::BackendParams& params) {
  auto options = OptionsFromUri(uri);
  if (!options.ok()) return options.status();
  options->clock = params.clock;
  options->connect_timeout = params.connect_timeout;
  auto backend = OpenEtcd(std::move(*options));
  if (!backend.ok()) return backend.status();
  return std::unique_ptr<Backend>(std::move(*backend));
}

}  // namespace dlock::etcd
