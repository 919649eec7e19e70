#include "backends/etcd/etcd_backend.h"

#include <algorithm>
#include <charconv>
#include <utility>

#include "backends/etcd/etcd_acquisition.h"
#include "backends/etcd/etcd_backend_impl.h"
#include "core/break_text.h"
#include "core/duration.h"

namespace dlock::etcd {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::string Quoted(std::string_view key) { return "'" + std::string(key) + "'"; }

// ---- Requests

pb::RequestOp GetOp(const std::string& key) {
  pb::RequestOp op;
  op.mutable_request_range()->set_key(key);
  return op;
}

pb::RequestOp PutOp(const std::string& key, const std::string& value, std::int64_t lease) {
  pb::RequestOp op;
  op.mutable_request_put()->set_key(key);
  op.mutable_request_put()->set_value(value);
  op.mutable_request_put()->set_lease(lease);
  return op;
}

pb::RequestOp DeleteOp(const std::string& key) {
  pb::RequestOp op;
  op.mutable_request_delete_range()->set_key(key);
  return op;
}

pb::RequestOp RangeOp(const std::string& prefix) {
  pb::RequestOp op;
  op.mutable_request_range()->set_key(prefix);
  op.mutable_request_range()->set_range_end(PrefixRangeEnd(prefix));
  return op;
}

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

pb::RangeRequest WholeQueue(const std::string& prefix) {
  pb::RangeRequest r;
  r.set_key(prefix);
  r.set_range_end(PrefixRangeEnd(prefix));
  r.set_sort_order(pb::RangeRequest::ASCEND);
  r.set_sort_target(pb::RangeRequest::CREATE);
  return r;
}

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

QueueMember MemberOf(const mvccpb::KeyValue& kv) {
  MemberValue v = DecodeValue(kv.value());
  return {kv.key(), kv.create_revision(), kv.lease(), std::move(v.owner_hex), v.limit,
          std::move(v.label)};
}

QueueMember MarkerOf(const std::string& delay_prefix, const std::string& queue_prefix,
                     const mvccpb::KeyValue& kv) {
  MarkerValue m = DecodeMarker(kv.value());
  return {queue_prefix + kv.key().substr(delay_prefix.size()), m.member_revision, kv.lease(),
          std::move(m.member.owner_hex), m.member.limit, std::move(m.member.label)};
}

namespace {

// Deletes `d.key` (and its marker) if it is still the one meant: same
// create_revision, or the same value while the revision is unknown.
pb::TxnRequest DeleteTxn(const PendingDelete& d) {
  pb::TxnRequest txn;
  *txn.add_compare() =
      d.revision != 0 ? CreateRevisionIs(d.key, d.revision) : ValueIs(d.key, d.value);
  *txn.add_success() = DeleteOp(d.key);
  if (!d.marker.empty()) *txn.add_success() = DeleteOp(d.marker);
  return txn;
}

}  // namespace

// ---- The backend

EtcdBackendImpl::EtcdBackendImpl(EtcdOptions options)
    : options_(std::move(options)),
      conn_(options_.endpoints, options_.request_timeout, options_.security) {}

EtcdBackendImpl::~EtcdBackendImpl() {
  // Whatever is still held or left here belongs to nobody now (every Lease
  // is gone, or the core would still be alive): revoke those sessions,
  // which deletes their keys at once. Sessions without keys expire by
  // themselves.
  std::vector<std::int64_t> revoke;
  {
    std::lock_guard l(mu_);
    for (const auto& [id, p] : places_) {
      if (p.member.session && !p.member.session->dead) revoke.push_back(p.member.session->id);
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
  std::string s = options_.security.tls ? "etcds://" : "etcd://";
  if (!options_.security.user.empty()) s += options_.security.user + "@";
  s += conn_.EndpointList();
  if (!options_.root.empty()) s += "/" + options_.root.substr(0, options_.root.size() - 1);
  return s;
}

// The floor for `dlock bench`: one Raft-replicated write (a put of a key no
// lock uses), as a grant costs.
Status EtcdBackendImpl::Ping() {
  pb::TxnRequest txn;
  *txn.add_success() = PutOp(options_.root + ".dlock-ping", "ping", 0);
  return conn_.Txn(txn, OpDeadline()).status();
}

std::vector<std::int64_t> EtcdBackendImpl::SessionLeases() {
  std::lock_guard l(mu_);
  std::vector<std::int64_t> ids;
  for (const auto& [secs, s] : sessions_) {
    if (!s->dead) ids.push_back(s->id);
  }
  return ids;
}

TimePoint EtcdBackendImpl::AttemptDeadline(TimePoint client_deadline) const {
  const TimePoint op = OpDeadline();
  if (client_deadline == TimePoint::max()) return op;
  return std::min(op, MonotonicClock::now() + (client_deadline - Now()));
}

std::unique_ptr<Acquisition> EtcdBackendImpl::Begin(const LeaseRequest& request) {
  return std::make_unique<EtcdAcquisition>(*this, request);
}

// A single attempt: an acquisition that takes no place in the queue.
Result<Attempt> EtcdBackendImpl::TryAcquire(const LeaseRequest& request) {
  LeaseRequest single = request;
  single.queue_ttl = milliseconds(0);
  return EtcdAcquisition(*this, single).Try();
}

// ---- Sessions

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
      // A session nothing kept alive for most of its TTL has expired (or
      // is about to): start a new one rather than learn it the slow way.
      if (SessionInUseLocked(s) || Now() < s->confirmed_at + seconds(s->ttl_seconds) * 2 / 3) {
        return SessionChoice{s, false};
      }
      s->dead = true;
    }
  }
  DLOCK_ASSIGN_OR_RETURN(std::shared_ptr<Session> s,
                         GrantLease(secs, "an etcd session lease", deadline));
  std::lock_guard l(mu_);
  sessions_[secs] = s;
  return SessionChoice{s, true};
}

bool EtcdBackendImpl::SessionInUseLocked(const std::shared_ptr<Session>& session) const {
  for (const auto& [id, p] : places_) {
    if (p.member.session == session) return true;
  }
  for (const auto& [name, a] : acquisitions_) {
    if (a->member().session == session) return true;
  }
  return false;
}

Result<std::shared_ptr<Session>> EtcdBackendImpl::GrantLease(std::int64_t ttl_seconds,
                                                             std::string_view what,
                                                             TimePoint deadline) {
  const TimePoint sent = Now();
  Result<pb::LeaseGrantResponse> granted = conn_.LeaseGrant(ttl_seconds, deadline);
  if (!granted.ok()) return granted.status().WithContext("grant " + std::string(what));
  if (!granted->error().empty()) {
    return UnavailableError("etcd refused to grant " + std::string(what) + ": " +
                            granted->error());
  }
  auto s = std::make_shared<Session>();
  s->id = granted->id();
  s->ttl_seconds = granted->ttl();
  s->confirmed_at = sent;
  return s;
}

void EtcdBackendImpl::MarkSessionDead(const std::shared_ptr<Session>& session) {
  std::vector<DeleteNotice> notices;  // fired outside mu_
  {
    std::lock_guard l(mu_);
    session->dead = true;
    std::erase_if(sessions_, [&](const auto& entry) { return entry.second == session; });
    // Its keys are gone with it: its holdings are lost (and go, so that a
    // lost Lease nobody released yet does not keep the name from this
    // client), its places are gone, and its waiters queue anew.
    std::erase_if(places_,
                  [&](const auto& entry) { return entry.second.member.session == session; });
    for (const auto& [name, a] : acquisitions_) {
      if (a->member().session != session) continue;
      if (DeleteNotice n = a->WakeLocked()) notices.push_back(std::move(n));
    }
  }
  // Unless the watch fired first, or the core stopped it: then `wake` has
  // run or is not wanted.
  for (DeleteNotice& n : notices) {
    if (std::function<void()> wake = conn_.StopNotice(n)) wake();
  }
}

// ---- Places and deletes

Place EtcdBackendImpl::AdoptLocked(const PlaceId& id) {
  auto it = places_.find(id);
  if (it == places_.end()) return Place{};
  Place place = it->second;
  if (!place.granted) places_.erase(it);
  return place;
}

void EtcdBackendImpl::HoldLocked(const PlaceId& id, const Member& member, milliseconds ttl,
                                 TimePoint alive_until) {
  Place& place = places_[id];
  // This owner's earlier holding on another key was lost (the grant came
  // on a new one): nobody uses that key.
  if (!place.member.key.empty() && place.member.key != member.key) {
    DeleteLaterLocked(place.member);
  }
  place = Place{member, true, ttl, alive_until};
}

void EtcdBackendImpl::LeaveLocked(const PlaceId& id, const Member& member,
                                  TimePoint alive_until) {
  if (!member.session || member.session->dead) return;  // the key went with its session
  auto [it, fresh] = places_.try_emplace(id);
  if (fresh) {
    it->second = Place{member, false, milliseconds(0), alive_until};
  } else if (it->second.member.key != member.key) {
    // This owner holds the name on another key: nobody uses this one.
    DeleteLaterLocked(member);
  }
}

bool EtcdBackendImpl::KeyTakenLocked(const PlaceId& id, const std::string& key,
                                     const EtcdAcquisition& asking) const {
  const std::string& name = id.first;
  for (auto [it, end] = acquisitions_.equal_range(name); it != end; ++it) {
    if (it->second != &asking && it->second->member().key == key) return true;
  }
  for (auto it = places_.lower_bound(PlaceId(name, OwnerId()));
       it != places_.end() && it->first.first == name; ++it) {
    if (it->first != id && it->second.member.key == key) return true;
  }
  return false;
}

void EtcdBackendImpl::DeleteLaterLocked(const Member& member) {
  if (member.key.empty() || !member.session || member.session->dead) return;
  pending_.push_back({member.key, member.revision, member.value, member.session->id});
}

void EtcdBackendImpl::ReapLocked(TimePoint now) {
  for (auto it = places_.begin(); it != places_.end();) {
    const Place& p = it->second;
    if (p.alive_until == TimePoint{} || now < p.alive_until) {
      ++it;
      continue;
    }
    // The core stopped renewing this holding, or nobody came back for this
    // place: its key must not be kept alive by the session's other
    // keep-alives.
    DeleteLaterLocked(p.member);
    it = places_.erase(it);
  }
}

Status EtcdBackendImpl::DeleteMember(const PendingDelete& d, TimePoint deadline) {
  return conn_.Txn(DeleteTxn(d), deadline).status();
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

// ---- Reads

Result<std::vector<QueueMember>> EtcdBackendImpl::DelayMarkers(std::string_view name) {
  const std::string from = DelayPrefix(options_.root, name);
  DLOCK_ASSIGN_OR_RETURN(pb::RangeResponse got,
                         conn_.Range(RangeOp(from).request_range(), OpDeadline()));
  const std::string prefix = QueuePrefix(options_.root, name);
  std::vector<QueueMember> out;
  for (const auto& kv : got.kvs()) out.push_back(MarkerOf(from, prefix, kv));
  return out;
}

Result<std::vector<QueueMember>> EtcdBackendImpl::ReadQueue(const std::string& prefix,
                                                            TimePoint deadline) {
  DLOCK_ASSIGN_OR_RETURN(pb::RangeResponse got, conn_.Range(WholeQueue(prefix), deadline));
  std::vector<QueueMember> members;
  for (const auto& kv : got.kvs()) {
    if (!IsQueueMember(prefix, kv.key())) continue;  // a longer name's key
    members.push_back(MemberOf(kv));
  }
  return members;
}

Result<std::optional<QueueMember>> EtcdBackendImpl::Head(const std::string& prefix,
                                                         const pb::RangeResponse& first,
                                                         TimePoint deadline) {
  if (first.kvs_size() == 0) return std::optional<QueueMember>();
  if (IsQueueMember(prefix, first.kvs(0).key())) return std::optional(MemberOf(first.kvs(0)));
  DLOCK_ASSIGN_OR_RETURN(std::vector<QueueMember> members, ReadQueue(prefix, deadline));
  if (members.empty()) return std::optional<QueueMember>();
  return std::optional(std::move(members.front()));
}

Result<std::optional<QueueMember>> EtcdBackendImpl::Predecessor(const std::string& prefix,
                                                                std::int64_t revision,
                                                                TimePoint deadline) {
  // Serializable is enough here too: a stale view of the keys ahead is a
  // superset; watching one that is already gone returns at once.
  pb::RangeRequest before = LastBefore(prefix, revision);
  before.set_serializable(true);
  DLOCK_ASSIGN_OR_RETURN(pb::RangeResponse got, conn_.Range(before, deadline));
  if (got.kvs_size() == 0) return std::optional<QueueMember>();
  if (IsQueueMember(prefix, got.kvs(0).key())) return std::optional(MemberOf(got.kvs(0)));
  // A longer name's key: find ours among the whole queue.
  DLOCK_ASSIGN_OR_RETURN(std::vector<QueueMember> members, ReadQueue(prefix, deadline));
  std::optional<QueueMember> ahead;
  for (QueueMember& m : members) {
    if (m.create_revision >= revision) break;
    ahead = std::move(m);
  }
  return ahead;
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
  // The markers, in the same snapshot: which of them stand for delayed
  // holdings depends on which members are there.
  *txn.add_success() = RangeOp(DelayListPrefix(options_.root, prefix));
  DLOCK_ASSIGN_OR_RETURN(pb::TxnResponse got, conn_.Txn(txn, deadline));
  std::map<std::string, Listing> queues;  // in create order
  for (const auto& kv : got.responses(0).response_range().kvs()) {
    auto name = LockNameOf(options_.root, kv.key());
    if (!name || !name->starts_with(prefix)) continue;
    queues[*name].queue.push_back(MemberOf(kv));
  }
  std::map<std::string, std::vector<QueueMember>> markers;
  for (const auto& kv : got.responses(1).response_range().kvs()) {
    auto name = DelayLockNameOf(options_.root, kv.key());
    if (!name || !name->starts_with(prefix)) continue;
    markers[*name].push_back(MarkerOf(DelayPrefix(options_.root, *name),
                                      QueuePrefix(options_.root, *name), kv));
  }
  for (auto& [name, of_name] : markers) {
    Listing& listing = queues[name];
    listing.delayed = DelayedHoldings(std::move(of_name), listing.queue);
  }
  return queues;
}

// ---- Release

Status EtcdBackendImpl::Release(std::string_view key, const OwnerId& owner) {
  const std::string name(key);
  const TimePoint deadline = OpDeadline();
  FlushPending(deadline);
  std::optional<Place> place;
  {
    std::lock_guard l(mu_);
    place = TakePlaceLocked(PlaceId(name, owner));
  }
  const std::string owner_hex = owner.ToString();
  const Status s = place ? ReleaseMember(name, owner_hex, place->member, place->granted, deadline)
                         : ReleaseUnknown(name, owner_hex, deadline);
  if (s.ok() || s.code() == StatusCode::kNotOwner) return s;
  return s.WithContext("release " + Quoted(name) + " on " + Describe());
}

std::optional<Place> EtcdBackendImpl::TakePlaceLocked(const PlaceId& id) {
  auto it = places_.find(id);
  if (it == places_.end()) return std::nullopt;
  Place place = std::move(it->second);
  places_.erase(it);
  return place;
}

Status EtcdBackendImpl::ReleaseMember(const std::string& name, const std::string& owner_hex,
                                      const Member& member, bool granted, TimePoint deadline) {
  if (member.key.empty()) return Status::Ok();  // never got as far as a key
  if (!granted && conn_.LooksDown()) {
    // A waiter giving up while etcd cannot answer: its key goes with the
    // next call that gets through, or with the session.
    std::lock_guard l(mu_);
    pending_.push_back(PendingOf(member));
    return Status::Ok();
  }
  return Released(name, owner_hex, member, conn_.Txn(ReleaseTxn(name, member), deadline),
                  deadline);
}

PendingDelete EtcdBackendImpl::PendingOf(const Member& member) {
  return {member.key, member.revision, member.value, member.session ? member.session->id : 0,
          member.marker_key};
}

// A clean end: the key and its lock-delay marker go together. Only if the
// key is still ours: a release that comes after the session expired must
// not cut the delay short.
pb::TxnRequest EtcdBackendImpl::ReleaseTxn(const std::string& name, const Member& member) const {
  pb::TxnRequest txn = DeleteTxn(PendingOf(member));
  *txn.add_failure() = FirstInQueueOp(QueuePrefix(options_.root, name));
  return txn;
}

Status EtcdBackendImpl::Released(const std::string& name, const std::string& owner_hex,
                                 const Member& member, Result<pb::TxnResponse> deleted,
                                 TimePoint deadline) {
  if (!deleted.ok()) {
    std::lock_guard l(mu_);
    pending_.push_back(PendingOf(member));
    return deleted.status();
  }
  if (deleted->succeeded()) {
    // Holding nothing now; it would expire by itself, but a lease per
    // grant should not pile up in etcd for a TTL and a delay.
    if (member.marker_lease) (void)conn_.LeaseRevoke(member.marker_lease->id, deadline);
    return Status::Ok();
  }
  // Our key was gone already. Say whether somebody else holds the lock.
  const std::string prefix = QueuePrefix(options_.root, name);
  DLOCK_ASSIGN_OR_RETURN(std::optional<QueueMember> head,
                         Head(prefix, deleted->responses(0).response_range(), deadline));
  if (head && head->value != owner_hex) {
    return NotOwnerError("key " + Quoted(name) +
                         " is held by another owner: this owner's session key was gone "
                         "(session lease expired or revoked, or the key was deleted)");
  }
  return Status::Ok();
}

Status EtcdBackendImpl::ReleaseUnknown(const std::string& name, const std::string& owner_hex,
                                       TimePoint deadline) {
  const std::string prefix = QueuePrefix(options_.root, name);
  DLOCK_ASSIGN_OR_RETURN(std::vector<QueueMember> members, ReadQueue(prefix, deadline));
  for (const auto& m : members) {
    if (m.value != owner_hex) continue;
    return DeleteMember({m.key, m.create_revision, "", m.lease,
                         DelayKey(DelayPrefix(options_.root, name), prefix, m.key)},
                        deadline);
  }
  if (!members.empty()) return NotOwnerError("key " + Quoted(name) + " is held by another owner");
  return Status::Ok();
}

// ---- Renew

struct EtcdBackendImpl::RenewCheck {
  std::size_t index;  // into the request
  PlaceId id;
  std::string key;
  std::int64_t revision;
  std::shared_ptr<Session> session;
  std::shared_ptr<Session> marker;  // the lock-delay marker's lease, if any
};

std::vector<Status> EtcdBackendImpl::Renew(std::span<const LeaseRequest> leases) {
  const TimePoint started = Now();
  std::vector<Status> out(leases.size());
  milliseconds shortest = options_.request_timeout;
  std::vector<RenewCheck> checks;
  {
    std::lock_guard l(mu_);
    ReapLocked(started);
    checks = RenewChecksLocked(leases, out, shortest);
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
  KeepAlives keep_alives = SendKeepAlives(checks);
  const std::vector<Result<pb::TxnResponse>> reads = ReadMembers(checks, deadline);
  KeepAliveAnswers ttls;
  for (auto& [s, call] : keep_alives) ttls.emplace(s, conn_.AwaitKeepAlive(call, deadline));

  std::vector<std::shared_ptr<Session>> dead;
  {
    std::lock_guard l(mu_);
    for (std::size_t j = 0; j < checks.size(); ++j) {
      const RenewCheck& c = checks[j];
      Status s = SettleRenewalLocked(c, ttls, reads[j / kMaxTxnOps],
                                     static_cast<int>(j % kMaxTxnOps), started, dead);
      if (s.code() == StatusCode::kUnavailable) {
        s = s.WithContext("renew " + Quoted(c.id.first) + " on " + Describe());
      }
      out[c.index] = std::move(s);
    }
  }
  for (const auto& s : dead) MarkSessionDead(s);
  return out;
}

std::vector<EtcdBackendImpl::RenewCheck> EtcdBackendImpl::RenewChecksLocked(
    std::span<const LeaseRequest> leases, std::vector<Status>& out, milliseconds& shortest) {
  std::vector<RenewCheck> checks;
  for (std::size_t i = 0; i < leases.size(); ++i) {
    PlaceId id(leases[i].key, leases[i].owner);
    auto it = places_.find(id);
    const Place* p = it == places_.end() ? nullptr : &it->second;
    if (!p || !p->granted || !p->member.session || p->member.session->dead) {
      out[i] = NotOwnerError("etcd no longer holds key " + Quoted(leases[i].key) +
                             " for this owner: its session lease expired or was revoked, or "
                             "the key was deleted");
      continue;
    }
    checks.push_back({i, std::move(id), p->member.key, p->member.revision, p->member.session,
                      p->member.marker_lease});
    shortest = std::min(shortest, leases[i].ttl);
  }
  return checks;
}

EtcdBackendImpl::KeepAlives EtcdBackendImpl::SendKeepAlives(
    const std::vector<RenewCheck>& checks) {
  KeepAlives calls;
  for (const RenewCheck& c : checks) {
    for (const auto& lease : {c.session, c.marker}) {
      if (lease && !calls.contains(lease)) calls[lease] = conn_.SendKeepAlive(lease->id);
    }
  }
  return calls;
}

// Serializable: the keep-alive settles the session; this only catches a key
// deleted by hand, for which a few milliseconds of staleness are moot. At
// most kMaxTxnOps reads a transaction (etcd refuses more by default: a
// client holding more locks would renew none), all in flight at once.
std::vector<Result<pb::TxnResponse>> EtcdBackendImpl::ReadMembers(
    const std::vector<RenewCheck>& checks, TimePoint deadline) {
  std::vector<pb::TxnRequest> txns((checks.size() + kMaxTxnOps - 1) / kMaxTxnOps);
  for (std::size_t j = 0; j < checks.size(); ++j) {
    pb::RequestOp op = GetOp(checks[j].key);
    op.mutable_request_range()->set_serializable(true);
    *txns[j / kMaxTxnOps].add_success() = op;
  }
  if (txns.size() == 1) return {conn_.Txn(txns[0], deadline)};
  return conn_.TxnMany(txns, deadline);
}

// One lock's renewal: OK when its session's (and marker's) keep-alive got a
// TTL back and the read found its key.
Status EtcdBackendImpl::SettleRenewalLocked(const RenewCheck& c, const KeepAliveAnswers& ttls,
                                            const Result<pb::TxnResponse>& read, int index,
                                            TimePoint started,
                                            std::vector<std::shared_ptr<Session>>& dead) {
  const std::string& name = c.id.first;
  const Result<std::int64_t>& ttl = ttls.at(c.session);
  const Result<std::int64_t>* marker_ttl = c.marker ? &ttls.at(c.marker) : nullptr;
  if (!ttl.ok()) return ttl.status();
  if (*ttl <= 0) {
    dead.push_back(c.session);
    return NotOwnerError("the etcd session lease of key " + Quoted(name) +
                         " expired or was revoked");
  }
  if (marker_ttl && !marker_ttl->ok()) return marker_ttl->status();
  auto it = places_.find(c.id);
  const bool same = it != places_.end() && it->second.member.revision == c.revision;
  if (marker_ttl && **marker_ttl <= 0) {
    // Revoked by hand (it cannot expire before the session): the delay this
    // lock promised is gone, so the lock is given up.
    if (same) {
      DeleteLaterLocked(it->second.member);
      places_.erase(it);
    }
    return NotOwnerError("the lease of the lock-delay marker of key " + Quoted(name) +
                         " expired or was revoked");
  }
  if (!read.ok()) return read.status();
  const auto& kvs = read->responses(index).response_range();
  if (kvs.kvs_size() == 0 || kvs.kvs(0).create_revision() != c.revision) {
    if (same) places_.erase(it);
    return NotOwnerError("the etcd key of " + Quoted(name) + " was deleted");
  }
  c.session->confirmed_at = std::max(c.session->confirmed_at, started);
  if (c.marker) c.marker->confirmed_at = std::max(c.marker->confirmed_at, started);
  if (same) it->second.alive_until = std::max(it->second.alive_until, started + it->second.ttl);
  return Status::Ok();
}

// ---- Places kept

// A waiter's place is its member key, on the client's session lease: etcd
// keeps it exactly as long as it keeps the session, whatever else happens.
// So keeping every place of the client is one keep-alive per session (one,
// in practice), sent together on the shared stream and answered in one
// round trip, and no write: the member keys are not touched. That is safe
// because the keep-alives come from the core's tick: a client that dies or
// stops keeping sends none, etcd expires the session a TTL after the last
// one and deletes every key on it, and the waiter behind each is woken by
// the deletion. A holding rides the same session, as it always has (a
// waiter's Try sent the same keep-alive); one the core stopped renewing is
// deleted first (ReapLocked, FlushPending), not kept through its
// neighbours. A key deleted by hand is not seen here: its waiter learns it
// at its next Try and queues anew.
std::vector<Status> EtcdBackendImpl::KeepPlaces(std::span<const LeaseRequest> waiters) {
  const TimePoint started = Now();
  std::vector<std::shared_ptr<Session>> sessions;
  milliseconds shortest = options_.request_timeout;
  {
    std::lock_guard l(mu_);
    ReapLocked(started);
    sessions = PlacesLocked(waiters, started);
  }
  for (const LeaseRequest& w : waiters) {
    if (w.queue_ttl > milliseconds(0)) shortest = std::min(shortest, w.queue_ttl);
  }
  // Kept again a third of queue_ttl later: an answer later than that is
  // not worth waiting for.
  const TimePoint deadline =
      MonotonicClock::now() +
      std::clamp<milliseconds>(shortest / 3, milliseconds(100), options_.request_timeout);
  FlushPending(deadline);
  KeepAlives calls;
  for (const auto& s : sessions) {
    if (s && !calls.contains(s)) calls[s] = conn_.SendKeepAlive(s->id);
  }
  KeepAliveAnswers ttls;
  for (auto& [s, call] : calls) ttls.emplace(s, conn_.AwaitKeepAlive(call, deadline));
  std::vector<std::shared_ptr<Session>> dead;
  {
    std::lock_guard l(mu_);
    for (const auto& [s, ttl] : ttls) {
      if (ttl.ok() && *ttl > 0) s->confirmed_at = std::max(s->confirmed_at, started);
      if (ttl.ok() && *ttl <= 0) dead.push_back(s);
    }
  }
  // Their waiters are woken to queue anew.
  for (const auto& s : dead) MarkSessionDead(s);
  std::vector<Status> out(waiters.size());
  for (std::size_t i = 0; i < waiters.size(); ++i) {
    const std::string what = "keep the place of " + Quoted(waiters[i].key) + " on " + Describe();
    if (!sessions[i]) {
      out[i] = NotFoundError(what + ": this owner has no place in the queue");
      continue;
    }
    const Result<std::int64_t>& ttl = ttls.at(sessions[i]);
    if (!ttl.ok()) {
      out[i] = ttl.status().WithContext(what);
    } else if (*ttl <= 0) {
      out[i] = NotFoundError(what + ": the session lease expired or was revoked");
    }
  }
  return out;
}

std::vector<std::shared_ptr<Session>> EtcdBackendImpl::PlacesLocked(
    std::span<const LeaseRequest> waiters, TimePoint now) {
  std::vector<std::shared_ptr<Session>> sessions(waiters.size());
  for (std::size_t i = 0; i < waiters.size(); ++i) {
    const LeaseRequest& w = waiters[i];
    for (auto [it, end] = acquisitions_.equal_range(w.key); it != end; ++it) {
      if (it->second->KeepPlaceLocked(w.owner, now + w.queue_ttl)) {
        sessions[i] = it->second->member().session;
        break;
      }
    }
  }
  return sessions;
}

// ---- Listing

Result<std::vector<HolderInfo>> EtcdBackendImpl::List(std::string_view prefix) {
  const TimePoint deadline = OpDeadline();
  auto queues = ReadQueues(prefix, deadline);
  if (!queues.ok()) {
    return queues.status().WithContext("list " + Quoted(prefix) + " on " + Describe());
  }
  std::vector<HolderInfo> out;
  // By lease: time left and the TTL etcd granted it.
  std::map<std::int64_t, std::pair<milliseconds, milliseconds>> leases;
  auto ttls_of = [&](std::int64_t lease) {
    if (!leases.contains(lease)) {
      auto ttl = conn_.LeaseTimeToLive(lease, deadline);
      leases[lease] = ttl.ok() && ttl->ttl() > 0
                          ? std::pair<milliseconds, milliseconds>(seconds(ttl->ttl()),
                                                                  seconds(ttl->grantedttl()))
                          : std::pair<milliseconds, milliseconds>();
    }
    return leases[lease];
  };
  for (const auto& [name, listing] : *queues) {
    // A holding inside its lock-delay is not listed (as on the other
    // stores: it holds nothing), but it still takes its place.
    const std::size_t holders = HolderCount(listing.queue, listing.delayed);
    for (std::size_t i = 0; i < holders; ++i) {
      const QueueMember& m = listing.queue[i];
      HolderInfo h;
      h.key = name;
      if (auto owner = OwnerId::Parse(m.value); owner.ok()) h.owner = *owner;
      h.token = static_cast<FencingToken>(m.create_revision);
      h.limit = m.limit;
      h.label = m.label;
      // held_for stays empty: etcd keeps no time with a key, and a waiter
      // becomes a holder without a write when the members ahead go.
      if (m.lease != 0) std::tie(h.ttl_remaining, h.ttl) = ttls_of(m.lease);
      out.push_back(std::move(h));
    }
  }
  return out;
}

Result<std::vector<WaiterInfo>> EtcdBackendImpl::Waiters(std::string_view prefix) {
  const TimePoint deadline = OpDeadline();
  {
    // This client's own places that nobody came back for go first.
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
    for (std::size_t i = HolderCount(queue, listing.delayed); i < queue.size(); ++i) {
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

// ---- Run-once records: DoneKey (etcd_keys.h), a key without a lease.

// Counted in one snapshot: the queue members of every name that starts
// with `prefix` (with an empty prefix, every key under the root), and the
// run-once records and lock-delay markers of those names where they lie
// outside that range.
Result<std::uint64_t> EtcdBackendImpl::StoredObjects(std::string_view prefix) {
  const std::string from = options_.root + std::string(prefix);
  const std::string ranges[] = {from, DoneKey(options_.root, prefix),
                                DelayListPrefix(options_.root, prefix),
                                BreaksListPrefix(options_.root, prefix)};
  pb::TxnRequest txn;
  for (const std::string& start : ranges) {
    // A range inside the first is counted with it.
    if (&start != &ranges[0] && start.starts_with(from)) continue;
    pb::RangeRequest* r = txn.add_success()->mutable_request_range();
    // An empty key cannot be sent; "\0" to "\0" is every key.
    r->set_key(start.empty() ? std::string(1, '\0') : start);
    r->set_range_end(PrefixRangeEnd(start));
    r->set_count_only(true);
  }
  auto got = conn_.Txn(txn, OpDeadline());
  if (!got.ok()) {
    return got.status().WithContext("count the keys of " + Quoted(prefix) + " on " + Describe());
  }
  std::uint64_t count = 0;
  for (const auto& response : got->responses()) {
    count += static_cast<std::uint64_t>(response.response_range().count());
  }
  return count;
}

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
// A record with a retention hangs on a lease of its own with that TTL (in
// whole seconds, rounded up; etcd may lengthen a very short one to its
// minimum), so that etcd deletes it; a record kept for ever has none.
Result<std::int64_t> EtcdBackendImpl::RetentionLease(std::chrono::milliseconds keep,
                                                     const std::string& what) {
  if (keep == kKeepDoneForever) return 0;
  constexpr std::int64_t kMaxLeaseTtlSeconds = 9'000'000'000;  // etcd's own bound
  const std::int64_t seconds =
      std::min<std::int64_t>(kMaxLeaseTtlSeconds, (keep.count() + 999) / 1000);
  auto lease = conn_.LeaseGrant(std::max<std::int64_t>(1, seconds), OpDeadline());
  if (!lease.ok()) return lease.status().WithContext(what);
  return lease->id();
}

// A retention lease whose record was not written would hold nothing for
// as long as the retention (30 days by default): revoked, best effort, when
// the write's answer (`failure`: OK for a failed compare) says nothing was
// written. After kUnavailable the record may exist: it keeps its lease.
void EtcdBackendImpl::DropRetentionLease(std::int64_t lease, const Status& failure) {
  if (lease == 0 || failure.code() == StatusCode::kUnavailable) return;
  (void)conn_.LeaseRevoke(lease, OpDeadline());
}

Status EtcdBackendImpl::MarkDone(std::string_view key, const OwnerId& owner,
                                 std::chrono::milliseconds keep) {
  const std::string name(key);
  std::string member;
  std::int64_t revision = 0;
  {
    std::lock_guard l(mu_);
    auto it = places_.find(PlaceId(name, owner));
    const Place* p = it == places_.end() ? nullptr : &it->second;
    if (!p || !p->granted || p->member.key.empty() || p->member.revision == 0 ||
        !p->member.session || p->member.session->dead) {
      return NotOwnerError("this owner does not hold " + Quoted(name) + " on " + Describe() +
                           ": its run is not recorded as done");
    }
    member = p->member.key;
    revision = p->member.revision;
  }
  DLOCK_ASSIGN_OR_RETURN(
      const std::int64_t lease,
      RetentionLease(keep, "mark " + Quoted(name) + " done on " + Describe()));
  pb::TxnRequest txn;
  *txn.add_compare() = CreateRevisionIs(member, revision);
  *txn.add_success() = PutOp(DoneKey(options_.root, name),
                             owner.ToString() + "\n" + std::to_string(revision), lease);
  auto r = conn_.Txn(txn, OpDeadline());
  if (!r.ok() || !r->succeeded()) DropRetentionLease(lease, r.ok() ? Status::Ok() : r.status());
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

// ---- Break records: BreakKey (etcd_keys.h), on a lease of their own.

namespace {

// The record of lock `name` stored at time `at_hex` (the key's 16 hex
// digits) as `value`; false when it is not one EncodeBreak wrote.
bool DecodeBreak(std::string name, std::string_view at_hex, std::string_view value,
                 BreakRecord* out) {
  if (!internal::DecodeBreakText(value, out)) return false;
  if (at_hex.empty() ||
      std::from_chars(at_hex.data(), at_hex.data() + at_hex.size(), out->at_unix_ms, 16).ec !=
          std::errc()) {
    return false;
  }
  out->key = std::move(name);
  return true;
}

}  // namespace

Status EtcdBackendImpl::RecordBreak(const BreakRecord& record, std::chrono::milliseconds keep) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(record.key));
  const std::string what = "record the break of " + Quoted(record.key) + " on " + Describe();
  DLOCK_ASSIGN_OR_RETURN(const std::int64_t lease, RetentionLease(keep, what));
  pb::TxnRequest txn;
  *txn.add_success() =
      PutOp(BreakKey(options_.root, record.key, record.at_unix_ms, record.owner.ToString()),
            internal::EncodeBreakText(record), lease);
  auto r = conn_.Txn(txn, OpDeadline());
  if (!r.ok()) {
    DropRetentionLease(lease, r.status());
    return r.status().WithContext(what);
  }
  return Status::Ok();
}

// etcd deletes a record with its lease; what the range holds is kept.
Result<std::vector<BreakRecord>> EtcdBackendImpl::Breaks(std::string_view prefix) {
  const std::string what = "list the breaks of " + Quoted(prefix) + " on " + Describe();
  const std::string from = BreaksListPrefix(options_.root, prefix);
  pb::RangeRequest r;
  r.set_key(from);
  r.set_range_end(PrefixRangeEnd(from));
  auto got = conn_.Range(r, OpDeadline());
  if (!got.ok()) return got.status().WithContext(what);
  std::vector<BreakRecord> records;
  for (const auto& kv : got->kvs()) {
    std::optional<std::string> name = BreakLockNameOf(options_.root, kv.key());
    const std::size_t dash = kv.key().rfind('-');
    constexpr std::size_t kAtDigits = 16;
    BreakRecord b;
    if (!name || dash == std::string::npos || dash < kAtDigits + 1 ||
        !DecodeBreak(std::move(*name), std::string_view(kv.key()).substr(dash - kAtDigits, kAtDigits),
                     kv.value(), &b)) {
      return InternalError(what + ": " + Quoted(kv.key()) + " is no break record dlock wrote");
    }
    records.push_back(std::move(b));
  }
  // The range is ordered by escaped name; the contract's order is the key's.
  std::stable_sort(records.begin(), records.end(),
                   [](const BreakRecord& a, const BreakRecord& b) { return a.key < b.key; });
  return records;
}

// ---- Opening

Result<std::unique_ptr<EtcdBackend>> OpenEtcd(EtcdOptions options) {
  if (options.endpoints.empty()) return InvalidArgumentError("etcd: no endpoints");
  if (!options.clock) options.clock = DefaultClock();
  auto backend = std::make_unique<EtcdBackendImpl>(std::move(options));
  if (Status s = backend->Connect(); !s.ok()) {
    // The code stays: a TLS or authentication failure is not a store down.
    return Status(s.code(), "cannot connect to " + backend->Describe() + ": " + s.message());
  }
  return std::unique_ptr<EtcdBackend>(std::move(backend));
}

Result<std::unique_ptr<Backend>> Open(const internal::Uri& uri,
                                      const internal::BackendParams& params) {
  DLOCK_ASSIGN_OR_RETURN(EtcdOptions options, OptionsFromUri(uri));
  options.clock = params.clock;
  options.connect_timeout = params.connect_timeout;
  DLOCK_ASSIGN_OR_RETURN(std::unique_ptr<EtcdBackend> backend, OpenEtcd(std::move(options)));
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace dlock::etcd
