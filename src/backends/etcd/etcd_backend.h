// The etcd v3 backend: consensus-backed locks whose fencing token is the
// Raft-ordered revision at which the owner's key was created.
//
//   etcd://h1:2379,h2:2379,h3:2379[/prefix][?timeout=5s]
//
// Liveness is a session, as in etcd's concurrency package: one etcd lease per
// client (per distinct TTL, in whole seconds), shared by every lock the
// client holds or waits for. The core's batched Renew is its heartbeat: one
// keep-alive per session on one shared KeepAlive stream, per tick, however
// many locks ride on it. When the session's lease expires or is revoked,
// etcd deletes all of its keys at once and every lock of the client is lost.
//
// Exclusion follows etcd's Mutex (see etcd_keys.h for the key layout), so
// dlock, `etcdctl lock` and Go services using concurrency.Mutex on the same
// name exclude each other. The uncontended acquire is one transaction; a
// waiter watches only the key just ahead of it in the queue (FIFO, no herd).
// Every acquisition has its own key (a second one of a name in the same
// client takes a key with its owner id appended), carrying its sharing limit
// and label: readers, writers and semaphore permits queue together in
// create order, and a member holds while it is among the first
// min(limit of itself and of everything ahead) of the queue. Begin returns
// an acquisition object (etcd_acquisition.h) that owns its key and what it
// watches while it waits; TryAcquire is a single attempt that takes no
// place in the queue.
//
// Lock-delay: a holding granted with one also has a marker key outside the
// queue, on a lease of its own (TTL: the session's plus the delay) kept
// alive with the session; a clean release deletes it with the member, an
// unclean end leaves it for etcd to expire. A marker whose member is gone
// (a delayed holding) takes a place in the sharing rule until then.
//
// docs/backend-etcd.md has the whole story: what survives which fault, and
// the choices behind it.
//
// Thread-safety: thread-safe.
#ifndef DLOCK_SRC_BACKENDS_ETCD_ETCD_BACKEND_H_
#define DLOCK_SRC_BACKENDS_ETCD_ETCD_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backends/etcd/etcd_keys.h"
#include "backends/etcd/etcd_queue.h"
#include "core/registry.h"
#include "core/uri.h"
#include "dlock/backend.h"

namespace dlock::etcd {

class EtcdBackend : public Backend {
 public:
  // The queue of lock `name` (holder first), read from the store.
  virtual Result<std::vector<QueueMember>> Queue(std::string_view name) = 0;

  // The lock-delay markers of lock `name` (tests): for each, `key` is the
  // queue member it stands for, `create_revision` that member's, `lease`
  // the marker's own lease, and the member's owner, limit and label.
  virtual Result<std::vector<QueueMember>> DelayMarkers(std::string_view name) = 0;

  // The session leases this client has open (tests, `dlock status`).
  virtual std::vector<std::int64_t> SessionLeases() = 0;

  // The wake-ups its acquisitions' Notify arranged (tests).
  virtual NoticeCounts Notices() = 0;

  // The requests this client has sent to etcd: unary calls (each try on
  // each member) and keep-alives (tests: what an operation costs).
  virtual std::uint64_t RequestsSent() = 0;
};

// Connects (checking that some endpoint is an etcd v3 server) without
// creating a session yet: the first acquire does. kUnavailable naming the
// endpoints and the last error when none answers within connect_timeout.
Result<std::unique_ptr<EtcdBackend>> OpenEtcd(EtcdOptions options);

// For the registry.
Result<std::unique_ptr<Backend>> Open(const internal::Uri& uri,
                                      const internal::BackendParams& params);

}  // namespace dlock::etcd

#endif  // DLOCK_SRC_BACKENDS_ETCD_ETCD_BACKEND_H_
