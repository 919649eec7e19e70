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
  r->set_range_end(PrefixEnd(prefix));
  r->set_limit(1);
  r->set_sort_order(pb::RangeRequest::ASCEND);
  r->set_sort_target(pb::RangeRequest::CREATE);
  return op;
}

// The member created last before `revision`: the one to wait for.
pb::RangeRequest LastBefore(const std::string& prefix, std::int64_t revision) {
  pb::RangeRequest r;
  r.set_key(prefix);
  r.set_range_end(PrefixEnd(prefix));
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

pb::RequestOp DeleteOp(const std::string& key) {
  pb::RequestOp op;
  op.mutable_request_delete_range()->set_key(key);
  return op;
}

// ---- State

// One etcd lease kept alive for this client: every key it puts hangs on it.
struct Session {
  std::int64_t id = 0;
  std::int64_t ttl_seconds = 0;  // as granted
  bool dead = false;             // known gone (expired, revoked, abandoned)
  // The send time (client clock) of its last successful keep-alive or
  // grant: etcd holds it at least until confirmed_at + TTL.
  TimePoint confirmed_at{};
};

// This client's one place in one lock's queue.
struct Entry {
  OwnerId owner;
  std::shared_ptr<Session> session;
  std::string key;             // queue member key; empty until a session is chosen
  std::int64_t revision = 0;   // its create_revision; 0 until known
  bool granted = false;
  bool busy = false;           // an attempt is in flight: never reaped
  milliseconds ttl{0};         // the TTL reported to the core
  // After this (client clock) the core has given this entry up: it was
  // neither renewed (held) nor attempted again (waiting) in time.
  TimePoint alive_until{};
  std::string predecessor;     // the member just ahead, to watch
  std::int64_t predecessor_revision = 0;
  // The predecessor was the only member ahead (it was also the head) when
  // last read; once it is seen gone, nobody is ahead any more: the members
  // ahead were all created before ours, so that set only ever shrinks.
  bool predecessor_is_head = false;
  bool predecessor_gone = false;
  // The store revision at which the predecessor was read (0: unknown).
  std::int64_t predecessor_seen_at = 0;
};

// A key to delete once the store answers again. Owner-checked by revision
// (or by value while the revision is unknown).
struct PendingDelete {
  std::string key;
  std::int64_t revision = 0;
  std::string owner_hex;
  std::int64_t lease = 0;
};

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
  Result<Attempt> Attempt1(const LeaseRequest& request, TimePoint started, TimePoint deadline);
  Result<std::vector<QueueMember>> ReadQueue(const std::string& prefix, TimePoint deadline);
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
    auto it = entries_.find(name);
    return it != entries_.end() && it->second.owner == owner ? &it->second : nullptr;
  }

  const EtcdOptions options_;
  Connection conn_;

  std::mutex session_mu_;  // one session grant at a time; taken before mu_
  std::mutex mu_;          // guards everything below
  std::condition_variable_any changed_;
  std::uint64_t version_ = 0;  // bumped on every change of entries_
  std::map<std::string, Entry, std::less<>> entries_;                // by lock name
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
    for (const auto& [name, e] : entries_) {
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
      pending_.push_back({e.key, e.revision, e.owner.ToString(), e.session->id});
    }
    const std::string name = it->first;
    it = entries_.erase(it);
    ChangedLocked(name);
  }
}

Status EtcdBackendImpl::DeleteMember(const PendingDelete& d, TimePoint deadline) {
  pb::TxnRequest txn;
  *txn.add_compare() =
      d.revision != 0 ? CreateRevisionIs(d.key, d.revision) : ValueIs(d.key, d.owner_hex);
  *txn.add_success() = DeleteOp(d.key);
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
      for (const auto& [name, e] : entries_) in_use = in_use || e.session == s;
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
    const std::string name = it->first;
    if (e.busy) {
      e.revision = 0;
      e.granted = false;
      e.predecessor.clear();
      ++it;
    } else {
      it = entries_.erase(it);
    }
    ChangedLocked(name);
  }
}

Result<std::vector<EtcdBackend::QueueMember>> EtcdBackendImpl::ReadQueue(
    const std::string& prefix, TimePoint deadline) {
  pb::RangeRequest r;
  r.set_key(prefix);
  r.set_range_end(PrefixEnd(prefix));
  r.set_sort_order(pb::RangeRequest::ASCEND);
  r.set_sort_target(pb::RangeRequest::CREATE);
  auto got = conn_.Range(r, deadline);
  if (!got.ok()) return got.status();
  std::vector<QueueMember> members;
  for (const auto& kv : got->kvs()) {
    if (!IsQueueMember(prefix, kv.key())) continue;  // a longer name's key
    members.push_back({kv.key(), kv.create_revision(), kv.lease(), kv.value()});
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
  {
    std::lock_guard l(mu_);
    ReapLocked(started);
    auto it = entries_.find(request.key);
    if (it != entries_.end() && it->second.owner != request.owner) {
      // This client already holds or waits for the name under another
      // acquisition: it has one place per queue, so this one waits here.
      return Attempt{};
    }
    if (it == entries_.end()) {
      it = entries_.emplace(request.key, Entry{}).first;
      it->second.owner = request.owner;
      ChangedLocked(request.key);
    }
    it->second.busy = true;
  }
  Result<Attempt> result = Attempt1(request, started, deadline);
  std::lock_guard l(mu_);
  auto it = entries_.find(request.key);
  if (it != entries_.end() && it->second.owner == request.owner) {
    Entry& e = it->second;
    e.busy = false;
    if (result.ok() && result->granted) {
      e.alive_until = std::max(started, result->valid_from) + e.ttl;
    } else {
      // Waiting (or unsure): kept for queue_ttl after this attempt, as the
      // contract says, and at least a TTL if the outcome was unknown.
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
Result<Attempt> EtcdBackendImpl::Attempt1(const LeaseRequest& request, TimePoint started,
                                          TimePoint deadline) {
  const std::string& name = request.key;
  const std::string prefix = QueuePrefix(options_.root, name);
  const std::string owner_hex = request.owner.ToString();

  for (int round = 0; round < 3; ++round) {
    auto choice = GetSession(request.ttl, deadline);
    if (!choice.ok()) return choice.status();
    const std::shared_ptr<Session> session = choice->session;
    std::string key;
    std::int64_t known_revision;
    bool keep_alive_due;
    bool skip_read;
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
        e.key = MemberKey(prefix, session->id);
        e.revision = 0;
        e.granted = false;
      }
      key = e.key;
      known_revision = e.revision;
      // The watch saw the only member ahead of ours go: our turn, without
      // another read (a hand-off is then one Raft write and one event).
      skip_read = known_revision != 0 && e.predecessor_is_head && e.predecessor_gone;
      e.predecessor_gone = false;
    }
    // etcd restarts the lease's TTL when it handles the keep-alive, after
    // `started`. It travels while the transaction does.
    std::optional<KeepAliveCall> keep_alive;
    if (keep_alive_due) keep_alive = conn_.SendKeepAlive(session->id);

    std::int64_t revision = 0;
    std::optional<mvccpb::KeyValue> head;
    std::optional<mvccpb::KeyValue> ahead;
    bool ahead_known = false;
    std::int64_t seen_at = 0;  // the revision `ahead` was read at
    if (skip_read) {
      revision = known_revision;
      head.emplace();
      head->set_key(key);
      head->set_create_revision(revision);
    } else if (known_revision != 0) {
      // Already queued: one read (no Raft write) says whether it is our turn.
      // A serializable read (served by the member alone, no quorum round) is
      // enough: the keys ahead of ours were all created before ours, so that
      // set only ever shrinks, and a stale view can only show more of them
      // (we wait again), never fewer. The session's confirmation vouches for
      // our own key still being there.
      pb::TxnRequest txn;
      *txn.add_success() = GetOp(key);
      *txn.add_success() = FirstInQueueOp(prefix);
      pb::RequestOp before;
      *before.mutable_request_range() = LastBefore(prefix, known_revision);
      *txn.add_success() = before;
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
      auto h = Head(prefix, r->responses(1).response_range(), deadline);
      if (!h.ok()) return h.status();
      head = *h;
      const auto& b = r->responses(2).response_range();
      if (b.kvs_size() == 0 || IsQueueMember(prefix, b.kvs(0).key())) {
        if (b.kvs_size() > 0) ahead = b.kvs(0);
        ahead_known = true;
        seen_at = r->header().revision();
      }
    } else {
      // The uncontended path, as etcd's Mutex: put our key unless it exists,
      // and read the head of the queue, in one transaction.
      pb::TxnRequest txn;
      *txn.add_compare() = CreateRevisionIs(key, 0);
      pb::RequestOp put;
      put.mutable_request_put()->set_key(key);
      put.mutable_request_put()->set_value(owner_hex);
      put.mutable_request_put()->set_lease(session->id);
      *txn.add_success() = put;
      *txn.add_success() = FirstInQueueOp(prefix);
      // The two newest members: ours and, if contended, the one to wait for.
      pb::RequestOp newest = FirstInQueueOp(prefix);
      newest.mutable_request_range()->set_sort_order(pb::RangeRequest::DESCEND);
      newest.mutable_request_range()->set_limit(2);
      *txn.add_success() = newest;
      *txn.add_failure() = GetOp(key);
      *txn.add_failure() = FirstInQueueOp(prefix);
      auto r = conn_.Txn(txn, deadline);
      if (!r.ok()) {
        if (r.status().code() == StatusCode::kNotOwner) {  // the lease is gone
          MarkSessionDead(session);
          continue;
        }
        return r.status();
      }
      if (r->succeeded()) {
        revision = r->header().revision();
        const auto& last = r->responses(2).response_range();
        if (last.kvs_size() >= 1 && last.kvs(0).create_revision() == revision &&
            (last.kvs_size() < 2 || IsQueueMember(prefix, last.kvs(1).key()))) {
          if (last.kvs_size() == 2) ahead = last.kvs(1);
          ahead_known = true;
          seen_at = r->header().revision();
        }
      } else {
        const mvccpb::KeyValue& mine = r->responses(0).response_range().kvs(0);
        if (mine.value() != owner_hex) {
          // Left by an earlier acquisition of this client whose release did
          // not get through: remove it, then queue anew.
          DLOCK_RETURN_IF_ERROR(
              DeleteMember({key, mine.create_revision(), "", session->id}, deadline));
          continue;
        }
        revision = mine.create_revision();  // a retry of ours: same place
      }
      {
        std::lock_guard l(mu_);
        if (Entry* e = FindLocked(name, request.owner)) e->revision = revision;
      }
      auto h = Head(prefix, r->responses(1).response_range(), deadline);
      if (!h.ok()) return h.status();
      head = *h;
    }
    const bool granted = !head || head->create_revision() == revision;

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

    if (granted) {
      std::lock_guard l(mu_);
      Entry* found = FindLocked(name, request.owner);
      if (!found) return UnavailableError("the attempt was abandoned meanwhile");
      Entry& e = *found;
      e.granted = true;
      e.ttl = seconds(session->ttl_seconds);
      e.predecessor.clear();
      Attempt a;
      a.granted = true;
      a.token = static_cast<FencingToken>(revision);
      a.granted_ttl = e.ttl;
      a.valid_from = session->confirmed_at;
      return a;
    }

    Attempt a;
    if (request.queue_ttl == milliseconds(0)) {
      // A single attempt takes no place in the queue.
      const Status deleted = DeleteMember({key, revision, owner_hex, session->id}, deadline);
      {
        std::lock_guard l(mu_);
        if (!deleted.ok()) pending_.push_back({key, revision, owner_hex, session->id});
        entries_.erase(name);
        ChangedLocked(name);
      }
      if (head->lease() != 0) {
        auto left = conn_.LeaseTimeToLive(head->lease(), deadline);
        if (left.ok() && left->ttl() > 0) a.holder_ttl_remaining = seconds(left->ttl());
      }
      return a;
    }
    if (!ahead_known) {
      auto p = Predecessor(prefix, revision, deadline);
      if (!p.ok()) return p.status();
      ahead = *p;
    }
    std::lock_guard l(mu_);
    if (Entry* e = FindLocked(name, request.owner)) {
      e->granted = false;
      e->predecessor_gone = false;
      if (ahead) {
        e->predecessor = ahead->key();
        e->predecessor_revision = ahead->create_revision();
        e->predecessor_seen_at = seen_at;
        e->predecessor_is_head = head && head->key() == ahead->key() &&
                                 head->create_revision() == ahead->create_revision();
      } else {
        // Everything ahead left between the reads: the next attempt wins.
        e->predecessor.clear();
        e->predecessor_is_head = false;
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
  {
    std::lock_guard l(mu_);
    auto it = entries_.find(name);
    if (it != entries_.end() && it->second.owner == owner) {
      known = true;
      granted = it->second.granted;
      if (!it->second.key.empty() && it->second.session) {
        mine = {it->second.key, it->second.revision, owner_hex, it->second.session->id};
      }
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
    pb::TxnRequest txn;
    *txn.add_compare() = mine.revision != 0 ? CreateRevisionIs(mine.key, mine.revision)
                                            : ValueIs(mine.key, owner_hex);
    *txn.add_success() = DeleteOp(mine.key);
    *txn.add_failure() = FirstInQueueOp(prefix);
    auto r = conn_.Txn(txn, deadline);
    if (!r.ok()) {
      std::lock_guard l(mu_);
      pending_.push_back(mine);
      return context(r.status());
    }
    if (r->succeeded()) return Status::Ok();
    // Our key was gone already. Say whether somebody else holds the lock.
    auto head = Head(prefix, r->responses(0).response_range(), deadline);
    if (!head.ok()) return context(head.status());
    if (*head && (*head)->value() != owner_hex) {
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
    Status s = DeleteMember({m.key, m.create_revision, owner_hex, m.lease}, deadline);
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
    std::string key;
    std::int64_t revision;
    std::shared_ptr<Session> session;
  };
  std::vector<Check> checks;
  milliseconds shortest = options_.request_timeout;
  {
    std::lock_guard l(mu_);
    ReapLocked(started);
    for (std::size_t i = 0; i < leases.size(); ++i) {
      auto it = entries_.find(leases[i].key);
      const Entry* e = it == entries_.end() ? nullptr : &it->second;
      if (!e || e->owner != leases[i].owner || !e->granted || !e->session || e->session->dead) {
        out[i] = NotOwnerError("etcd no longer holds key " + Quoted(leases[i].key) +
                               " for this owner: its session lease expired or was revoked, or "
                               "the key was deleted");
        continue;
      }
      checks.push_back({i, it->first, e->key, e->revision, e->session});
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

  // One keep-alive per session (usually one for the whole client), sent
  // while a read checks that each key is still there.
  std::map<std::shared_ptr<Session>, KeepAliveCall> keep_alives;
  for (const auto& c : checks) {
    if (!keep_alives.contains(c.session)) keep_alives[c.session] = conn_.SendKeepAlive(c.session->id);
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
      Status& result = out[c.index];
      if (!ttl.ok()) {
        result = ttl.status();
      } else if (*ttl <= 0) {
        result = NotOwnerError("the etcd session lease of key " + Quoted(c.name) +
                               " expired or was revoked");
        dead.push_back(c.session);
      } else if (!read.ok()) {
        result = read.status();
      } else {
        const auto& kvs = read->responses(static_cast<int>(j)).response_range();
        auto it = entries_.find(c.name);
        const bool same = it != entries_.end() && it->second.revision == c.revision;
        if (kvs.kvs_size() == 0 || kvs.kvs(0).create_revision() != c.revision) {
          result = NotOwnerError("the etcd key of " + Quoted(c.name) + " was deleted");
          if (same) {
            entries_.erase(it);
            ChangedLocked(c.name);
          }
        } else {
          c.session->confirmed_at = std::max(c.session->confirmed_at, started);
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

Result<std::vector<HolderInfo>> EtcdBackendImpl::List(std::string_view prefix) {
  const TimePoint deadline = OpDeadline();
  const std::string from = options_.root + std::string(prefix);
  pb::RangeRequest r;
  // An empty key cannot be sent; "\0" to "\0" is every key.
  r.set_key(from.empty() ? std::string(1, '\0') : from);
  r.set_range_end(PrefixEnd(from));
  auto got = conn_.Range(r, deadline);
  if (!got.ok()) return got.status().WithContext("list " + Quoted(prefix) + " on " + Describe());
  // Per lock name, the member with the lowest create_revision holds it.
  std::map<std::string, mvccpb::KeyValue> holders;
  for (const auto& kv : got->kvs()) {
    auto name = LockNameOf(options_.root, kv.key());
    if (!name || name->compare(0, prefix.size(), prefix) != 0) continue;
    auto [it, inserted] = holders.emplace(*name, kv);
    if (!inserted && kv.create_revision() < it->second.create_revision()) it->second = kv;
  }
  std::vector<HolderInfo> out;
  std::map<std::int64_t, milliseconds> left;  // by lease
  for (const auto& [name, kv] : holders) {
    HolderInfo h;
    h.key = name;
    if (auto owner = OwnerId::Parse(kv.value()); owner.ok()) h.owner = *owner;
    h.token = static_cast<FencingToken>(kv.create_revision());
    if (kv.lease() != 0) {
      if (!left.contains(kv.lease())) {
        auto ttl = conn_.LeaseTimeToLive(kv.lease(), deadline);
        left[kv.lease()] = ttl.ok() && ttl->ttl() > 0 ? seconds(ttl->ttl()) : milliseconds(0);
      }
      h.ttl_remaining = left[kv.lease()];
    }
    out.push_back(std::move(h));
  }
  return out;
}

bool EtcdBackendImpl::WaitForRelease(std::string_view key, TimePoint until, std::stop_token stop) {
  std::string predecessor;
  std::int64_t predecessor_revision = 0;
  std::int64_t seen_at = 0;
  std::stop_source local;
  {
    std::unique_lock l(mu_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return false;  // nothing queued: let the core poll
    if (it->second.granted || it->second.predecessor.empty()) {
      // Another acquisition in this process holds the name: wait for a
      // change here. With no predecessor known (an attempt in flight, or
      // everything ahead just left) only briefly: the next attempt may win.
      TimePoint limit = until;
      if (!it->second.granted) limit = std::min(until, MonotonicClock::now() + milliseconds(5));
      const std::uint64_t seen = version_;
      changed_.wait_until(l, stop, limit, [&] { return version_ != seen; });
      return true;
    }
    predecessor = it->second.predecessor;
    predecessor_revision = it->second.predecessor_revision;
    seen_at = it->second.predecessor_seen_at;
    waits_.emplace(std::string(key), &local);
  }
  bool gone;
  {
    std::stop_callback forward(stop, [&local] { local.request_stop(); });
    gone = conn_.WaitForDelete(predecessor, predecessor_revision, seen_at, until,
                               local.get_token());
  }
  std::lock_guard l(mu_);
  if (auto it = entries_.find(key); gone && it != entries_.end() &&
                                    it->second.predecessor == predecessor &&
                                    it->second.predecessor_revision == predecessor_revision) {
    it->second.predecessor_gone = true;
  }
  for (auto [lo, hi] = waits_.equal_range(key); lo != hi; ++lo) {
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
