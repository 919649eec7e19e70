// The ZooKeeper backend: Curator-compatible ephemeral-sequential locks.
//
// A lock on key K is the znode <chroot>/K (zk_path.h). Each acquisition
// creates an ephemeral-sequential child "_c_<guid>-lock-<seq>" (Apache
// Curator's InterProcessMutex layout, so Curator processes and dlock exclude
// each other on the same path); the lowest sequence holds the lock, and each
// waiter watches only its predecessor (FIFO, no herd). The fencing token is
// the owner node's czxid, which ZAB orders across the ensemble.
//
// Sharing (readers, semaphores): a sharing node is named
// "_c_<guid>-n<limit>-lock-<seq>", and node i holds iff i + 1 <= the smallest
// limit among nodes 0..i (Curator's nodes count as limit 1). A reader or
// permit waiter watches the nearest limit-1 node ahead of it; a semaphore
// waiter with only sharing nodes ahead watches the lock path's children.
//
// Liveness is the session, not a per-lock lease: one ZooKeeper session per
// backend (per Client), shared by all its locks, whose timeout comes from the
// first acquisition's ttl (or ?session_timeout=) and is negotiated by the
// ensemble. Renew is answered from the session's state without a round trip;
// the core bounds each lease by Liveness() (the negotiated timeout and the
// send time of the newest answered request, refreshed by a heartbeat every
// quarter timeout). A disconnection leaves leases to valid_until; expiry
// loses them all. A node whose lease is not renewed for its ttl while the
// session lives on (a stuck renewal loop) is deleted by the backend itself.
//
// URI: zk://[user:password@]host:port[,host:port...][/chroot]
//          [?session_timeout=10s&acl_admin=name:digest]
// docs/backend-zookeeper.md has the details and what survives what.
//
// Waiting goes through Begin: each acquisition owns its node and what it
// watches (zk_contender.h); TryAcquire is a single attempt that takes no
// place in the queue. TryAcquireMany and ReleaseMany have a whole batch in
// flight on the session at once (zk_batch.cc).
//
// Thread-safety: thread-safe. Watch and completion callbacks run on the C
// client's completion thread and only update state under the backend's
// mutex; the backend's own keeper thread heartbeats and reaps.
#ifndef DLOCK_SRC_BACKENDS_ZOOKEEPER_ZOOKEEPER_BACKEND_H_
#define DLOCK_SRC_BACKENDS_ZOOKEEPER_ZOOKEEPER_BACKEND_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "backends/zookeeper/zk_session.h"
#include "core/registry.h"
#include "core/uri.h"
#include "dlock/backend.h"

namespace dlock::zookeeper {

struct ZkOptions {
  std::string hosts;   // "h1:2181,h2:2181"
  std::string chroot;  // normalised: "" (the root) or "/a/b"
  // Unset: the first acquisition's ttl (30 s for a session opened by List).
  std::optional<std::chrono::milliseconds> session_timeout;
  // Bounds one attempt's wait for the ensemble (connecting, one reply).
  std::chrono::milliseconds connect_timeout{5000};
  std::shared_ptr<Clock> clock;  // null: the real clock
  // From the URI's user:password and ?acl_admin=: who the session is and
  // who may touch its nodes.
  Identity identity;
  // Tests only (no URI sets it): called on the keeper's thread, without
  // the backend's mutex, with the path of each node the keeper has decided
  // to delete, just before the delete goes out: a test runs an attempt of
  // the node's owner in that gap.
  std::function<void(const std::string& node_path)> before_reap;
};

// From a zk:// URI. kInvalidArgument for a missing or malformed host list, a
// chroot that breaks ZooKeeper's path rules, or an unknown parameter.
Result<ZkOptions> OptionsFromUri(const internal::Uri& uri);

class ZooKeeperBackend;
struct ZooKeeperBackendImpl;  // zk_backend_impl.h
// Never connects: the session opens on first use, with its ttl.
std::unique_ptr<ZooKeeperBackend> OpenZooKeeper(ZkOptions options);
// The registry's factory.
Result<std::unique_ptr<Backend>> Open(const internal::Uri& uri,
                                      const internal::BackendParams& params);

class ZooKeeperBackend final : public Backend {
 public:
  explicit ZooKeeperBackend(ZkOptions options);
  ~ZooKeeperBackend() override;

  Result<Attempt> TryAcquire(const LeaseRequest& request) override;
  std::unique_ptr<Acquisition> Begin(const LeaseRequest& request) override;
  Status Release(std::string_view key, const OwnerId& owner) override;
  // Every request of a batch in flight on the session at once; the
  // holdings released by one multi (zk_batch.cc).
  std::vector<Result<Attempt>> TryAcquireMany(std::span<const LeaseRequest> requests) override;
  std::vector<Status> ReleaseMany(std::span<const LeaseRequest> holdings) override;
  bool BatchesCalls() const override { return true; }
  std::vector<Status> Renew(std::span<const LeaseRequest> leases) override;
  // Keeping a place needs no request (zk_keeper.cc says why).
  std::vector<Status> KeepPlaces(std::span<const LeaseRequest> waiters) override;
  bool KeepsPlaces() const override { return true; }
  // A place ends only by its node's deletion (with its session, or reaped
  // by its own client's keeper), and a waiter watches the node ahead.
  bool NoticesLapsedPlaces() const override { return true; }
  Result<std::vector<HolderInfo>> List(std::string_view prefix) override;
  Result<std::vector<WaiterInfo>> Waiters(std::string_view prefix) override;
  Result<std::uint64_t> StoredObjects(std::string_view prefix) override;
  bool SupportsSharing() const override { return true; }
  bool SupportsLockDelay() const override { return true; }
  // Run-once records: persistent znodes under <chroot>/%dlock-done
  // (zk_path.h). MarkDone is one multi: a check that this owner's lock node
  // still exists, and the create of the record.
  Result<bool> IsDone(std::string_view key) override;
  Status MarkDone(std::string_view key, const OwnerId& owner,
                  std::chrono::milliseconds keep) override;
  Status RecordBreak(const BreakRecord& record, std::chrono::milliseconds keep) override;
  Result<std::vector<BreakRecord>> Breaks(std::string_view prefix) override;
  std::string Describe() const override;
  std::optional<SessionLiveness> Liveness() override;

  // A raw create + delete of an ephemeral node on this client's session: the
  // floor a lock cycle is measured against.
  Status Ping() override;
  // The current session's negotiated timeout and id (0 before one opened).
  std::chrono::milliseconds SessionTimeout() const;
  std::int64_t SessionId() const;

 private:
  // Shared with the acquisitions, which may outlive a Begin call's scope.
  std::shared_ptr<ZooKeeperBackendImpl> impl_;
};

}  // namespace dlock::zookeeper

#endif  // DLOCK_SRC_BACKENDS_ZOOKEEPER_ZOOKEEPER_BACKEND_H_
