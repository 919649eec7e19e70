// Inside the etcd backend: what one client keeps (its sessions, its
// holdings, the places acquisitions left behind, deletes still to send),
// and the store operations that the backend (etcd_backend.cc) and its
// acquisitions (etcd_acquisition.cc) share. docs/backend-etcd.md ("Words")
// defines member, place, session, marker and delayed holding.
//
// Thread-safety: EtcdBackendImpl is thread-safe; mu_ guards its state.
#ifndef DLOCK_SRC_BACKENDS_ETCD_ETCD_BACKEND_IMPL_H_
#define DLOCK_SRC_BACKENDS_ETCD_ETCD_BACKEND_IMPL_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backends/etcd/etcd_backend.h"
#include "backends/etcd/etcd_connection.h"
#include "backends/etcd/etcd_queue.h"

namespace dlock::etcd {

std::string Quoted(std::string_view key);

// ---- Requests

pb::RequestOp GetOp(const std::string& key);
pb::RequestOp PutOp(const std::string& key, const std::string& value, std::int64_t lease);
pb::RequestOp DeleteOp(const std::string& key);
// Every key starting with `prefix`.
pb::RequestOp RangeOp(const std::string& prefix);
// The queue's key with the lowest create_revision: the head, unless it
// belongs to a longer name (checked by the caller).
pb::RequestOp FirstInQueueOp(const std::string& prefix);
// Every key of the queue's range, oldest first.
pb::RangeRequest WholeQueue(const std::string& prefix);
// The key created last before `revision`: the predecessor, unless it
// belongs to a longer name.
pb::RangeRequest LastBefore(const std::string& prefix, std::int64_t revision);
pb::Compare CreateRevisionIs(const std::string& key, std::int64_t revision);
pb::Compare ValueIs(const std::string& key, const std::string& value);

QueueMember MemberOf(const mvccpb::KeyValue& kv);
// A marker key of `delay_prefix`, as the member of `queue_prefix` it stands for.
QueueMember MarkerOf(const std::string& delay_prefix, const std::string& queue_prefix,
                     const mvccpb::KeyValue& kv);

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

// A member this client put (or is about to put) in a lock's queue, and
// what hangs on it.
struct Member {
  std::shared_ptr<Session> session;
  std::string key;            // empty until a session is chosen
  std::string value;          // what the key holds (EncodeValue)
  std::int64_t revision = 0;  // its create_revision; 0 until known
  // With a lock-delay: this holding's marker (DelayKey; set before it is
  // put, so that a release whose reply is lost still deletes it) and its
  // own lease, kept alive with the session by Renew. One lease per holding,
  // not one per client: a lease shared by several holdings would keep the
  // marker of one that ended uncleanly alive through the others', and the
  // delay would never end while the client lives.
  std::string marker_key;
  std::shared_ptr<Session> marker_lease;
};

// A member no acquisition in progress owns, by (lock name, owner): a
// holding, or the place an acquisition left without Abandon (a waiter that
// died, or an attempt whose answer was lost). A later acquisition by the
// same owner starts from it (a retry gets the same token back).
struct Place {
  Member member;
  bool granted = false;
  std::chrono::milliseconds ttl{0};  // granted: the TTL reported to the core
  // After this (client clock) nobody uses it: a holding neither renewed nor
  // released, a place nobody came back for. Its key is then deleted.
  TimePoint alive_until{};
};
using PlaceId = std::pair<std::string, OwnerId>;

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

class EtcdAcquisition;

class EtcdBackendImpl final : public EtcdBackend {
 public:
  explicit EtcdBackendImpl(EtcdOptions options);
  ~EtcdBackendImpl() override;

  // Reads a key under the root (the one Ping writes): a user whose role
  // grants the root alone may read it.
  Status Connect() {
    return conn_.Start(options_.root + ".dlock-ping",
                       MonotonicClock::now() + options_.connect_timeout);
  }

  Result<Attempt> TryAcquire(const LeaseRequest& request) override;
  std::unique_ptr<Acquisition> Begin(const LeaseRequest& request) override;
  Status Release(std::string_view key, const OwnerId& owner) override;
  // All in flight at once on one channel (etcd_batch.cc).
  std::vector<Result<Attempt>> TryAcquireMany(std::span<const LeaseRequest> requests) override;
  std::vector<Status> ReleaseMany(std::span<const LeaseRequest> holdings) override;
  // Off until a batch survives a slow client: under ThreadSanitizer a batch
  // of 300 on a secured cluster ran past its deadline and was sent on to
  // another member, which refused the first member's simple auth token
  // (kPermissionDenied, final). TryAcquireMany/ReleaseMany stay, tested.
  bool BatchesCalls() const override { return false; }
  std::vector<Status> Renew(std::span<const LeaseRequest> leases) override;
  // A place is the waiter's key on the client's session lease: keeping every
  // place of the client is one keep-alive per session, on the shared stream.
  std::vector<Status> KeepPlaces(std::span<const LeaseRequest> waiters) override;
  bool KeepsPlaces() const override { return true; }
  // A place ends only by its key's deletion (Abandon, or with its session),
  // and a waiter watches the key ahead of it.
  bool NoticesLapsedPlaces() const override { return true; }
  Result<std::vector<HolderInfo>> List(std::string_view prefix) override;
  Result<std::vector<WaiterInfo>> Waiters(std::string_view prefix) override;
  Result<std::uint64_t> StoredObjects(std::string_view prefix) override;
  bool SupportsSharing() const override { return true; }
  bool SupportsLockDelay() const override { return true; }
  Result<bool> IsDone(std::string_view key) override;
  Status MarkDone(std::string_view key, const OwnerId& owner,
                  std::chrono::milliseconds keep) override;
  Status RecordBreak(const BreakRecord& record, std::chrono::milliseconds keep) override;
  Result<std::vector<BreakRecord>> Breaks(std::string_view prefix) override;
  // The lease a record kept for `keep` hangs on (0: none).
  Result<std::int64_t> RetentionLease(std::chrono::milliseconds keep, const std::string& what);
  void DropRetentionLease(std::int64_t lease, const Status& failure);
  std::string Describe() const override;
  Status Ping() override;

  Result<std::vector<QueueMember>> Queue(std::string_view name) override {
    return ReadQueue(QueuePrefix(options_.root, name), OpDeadline());
  }
  Result<std::vector<QueueMember>> DelayMarkers(std::string_view name) override;
  std::vector<std::int64_t> SessionLeases() override;
  NoticeCounts Notices() override { return conn_.Notices(); }
  std::uint64_t RequestsSent() override { return conn_.RequestsSent(); }

 private:
  friend class EtcdAcquisition;

  struct SessionChoice {
    std::shared_ptr<Session> session;
    bool fresh = false;  // granted by this call: no keep-alive needed
  };
  // One lock's queue, in create order, and its delayed holdings.
  struct Listing {
    std::vector<QueueMember> queue;
    std::vector<QueueMember> delayed;
  };
  struct RenewCheck;
  using KeepAlives = std::map<std::shared_ptr<Session>, KeepAliveCall>;
  using KeepAliveAnswers = std::map<std::shared_ptr<Session>, Result<std::int64_t>>;

  TimePoint Now() const { return options_.clock->Now(); }
  TimePoint OpDeadline() const { return MonotonicClock::now() + options_.request_timeout; }
  // The real-time deadline for an attempt whose caller waits until
  // `client_deadline` (client clock).
  TimePoint AttemptDeadline(TimePoint client_deadline) const;

  // Sessions and leases.
  Result<SessionChoice> GetSession(std::chrono::milliseconds ttl, TimePoint deadline);
  bool SessionInUseLocked(const std::shared_ptr<Session>& session) const;
  Result<std::shared_ptr<Session>> GrantLease(std::int64_t ttl_seconds, std::string_view what,
                                              TimePoint deadline);
  void MarkSessionDead(const std::shared_ptr<Session>& session);

  // Reads.
  Result<std::vector<QueueMember>> ReadQueue(const std::string& prefix, TimePoint deadline);
  // Every queue of names starting with `prefix`.
  Result<std::map<std::string, Listing>> ReadQueues(std::string_view prefix, TimePoint deadline);
  // The head, given a transaction's FirstInQueueOp answer. That read may
  // have hit a longer name's key ("a/b/..." for "a"): then the queue is read.
  Result<std::optional<QueueMember>> Head(const std::string& prefix, const pb::RangeResponse& first,
                                          TimePoint deadline);
  Result<std::optional<QueueMember>> Predecessor(const std::string& prefix, std::int64_t revision,
                                                 TimePoint deadline);

  // Places and deletes.
  // The place of `id` for a new acquisition to start from (empty: none). A
  // place left behind is the acquisition's again; a holding stays here.
  Place AdoptLocked(const PlaceId& id);
  // A grant: `member` is the holding of `id` now.
  void HoldLocked(const PlaceId& id, const Member& member, std::chrono::milliseconds ttl,
                  TimePoint alive_until);
  // An acquisition ended without a grant or Abandon: its member stays
  // until `alive_until`, then its key is deleted.
  void LeaveLocked(const PlaceId& id, const Member& member, TimePoint alive_until);
  // Whether someone other than `asking` (of `id`) has member key `key`.
  bool KeyTakenLocked(const PlaceId& id, const std::string& key,
                      const EtcdAcquisition& asking) const;
  // Takes `id`'s place (holding or left behind) out, for its release.
  std::optional<Place> TakePlaceLocked(const PlaceId& id);
  // Queues the deletion of `member`'s key (an unclean end: its marker stays).
  void DeleteLaterLocked(const Member& member);
  Status DeleteMember(const PendingDelete& d, TimePoint deadline);
  void FlushPending(TimePoint deadline);
  void ReapLocked(TimePoint now);
  // Deletes `member` (and its marker: a clean end) if it still has its
  // create_revision. kNotOwner when it was gone and another owner holds
  // the lock. A waiter's key is kept for later when etcd looks down.
  Status ReleaseMember(const std::string& name, const std::string& owner_hex, const Member& member,
                       bool granted, TimePoint deadline);
  // ReleaseMember's halves: its transaction, and what its answer means.
  pb::TxnRequest ReleaseTxn(const std::string& name, const Member& member) const;
  Status Released(const std::string& name, const std::string& owner_hex, const Member& member,
                  Result<pb::TxnResponse> deleted, TimePoint deadline);
  static PendingDelete PendingOf(const Member& member);
  // Release of an owner this client keeps nothing for: found in the store.
  Status ReleaseUnknown(const std::string& name, const std::string& owner_hex, TimePoint deadline);

  // Renew, step by step.
  // KeepPlaces: the session of each waiter that has a place (null: none);
  // each such place, if its acquisition is dropped, is kept until now +
  // its queue_ttl.
  std::vector<std::shared_ptr<Session>> PlacesLocked(std::span<const LeaseRequest> waiters,
                                                     TimePoint now);

  std::vector<RenewCheck> RenewChecksLocked(std::span<const LeaseRequest> leases,
                                            std::vector<Status>& out,
                                            std::chrono::milliseconds& shortest);
  KeepAlives SendKeepAlives(const std::vector<RenewCheck>& checks);
  // etcd's default --max-txn-ops: the most operations one transaction may hold.
  static constexpr std::size_t kMaxTxnOps = 128;
  std::vector<Result<pb::TxnResponse>> ReadMembers(const std::vector<RenewCheck>& checks,
                                                   TimePoint deadline);
  Status SettleRenewalLocked(const RenewCheck& check, const KeepAliveAnswers& ttls,
                             const Result<pb::TxnResponse>& read, int index, TimePoint started,
                             std::vector<std::shared_ptr<Session>>& dead);

  const EtcdOptions options_;
  Connection conn_;

  std::mutex session_mu_;  // one session grant at a time; taken before mu_
  // Guards everything below, and what other threads read of a live
  // acquisition (EtcdAcquisition::member()).
  mutable std::mutex mu_;
  std::map<PlaceId, Place> places_;
  // The acquisitions in progress, by lock name: so that two of one name
  // get different keys, and a dead session wakes those that wait.
  std::multimap<std::string, EtcdAcquisition*, std::less<>> acquisitions_;
  std::map<std::int64_t, std::shared_ptr<Session>> sessions_;  // by whole seconds asked
  std::vector<PendingDelete> pending_;
};

}  // namespace dlock::etcd

#endif  // DLOCK_SRC_BACKENDS_ETCD_ETCD_BACKEND_IMPL_H_
