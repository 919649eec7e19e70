// Connection: the etcd backend's gRPC side. One channel per endpoint, one
// shared lease keep-alive stream, and watches; every operation fails over to
// the next member when the one in use cannot serve it.
//
// Failover: calls go to the "current" member. A transient error (member
// unreachable or silent, no leader, leader changed, request timed out) moves
// on to the next member and tries again, with a short backoff once every
// member has been tried, until the operation's deadline. Every operation is
// safe to repeat (the backend makes them so), so a call whose reply was lost
// is simply sent again. Every request asks etcd to refuse it when the member
// has no leader ("hasleader" metadata), so a member cut off from the quorum
// answers at once instead of holding the request until its own timeout.
//
// Security (etcds://, a user): every channel uses TLS credentials built from
// the PEM files, read when Start runs (so a client opened after a
// certificate was rotated uses the new one). With a user, Start trades the
// password for a token (etcd's Auth API) that goes with every call, stream
// and watch as metadata "token"; when etcd says the token expired ("invalid
// auth token": simple tokens live --auth-token-ttl after their last use),
// the call authenticates again and is sent once more.
//
// Thread-safety: all methods are thread-safe.
#ifndef DLOCK_SRC_BACKENDS_ETCD_ETCD_CONNECTION_H_
#define DLOCK_SRC_BACKENDS_ETCD_ETCD_CONNECTION_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <stop_token>
#include <string>
#include <vector>

#include "backends/etcd/etcd_keys.h"
#include "dlock/clock.h"
#include "dlock/status.h"
#include "rpc.grpc.pb.h"

namespace grpc {
class ChannelCredentials;
}

namespace dlock::etcd {

namespace pb = ::etcdserverpb;

class KeepAliveStream;
class WatchStream;
struct Deletion;

// One keep-alive sent and not yet answered.
struct KeepAliveCall {
  std::int64_t lease = 0;
  std::shared_ptr<KeepAliveStream> stream;
  std::shared_ptr<void> ticket;  // KeepAliveStream's, opaque here
};

// A wake-up NotifyOnDelete arranged: a watch on a shared watch stream.
struct DeleteNotice {
  std::shared_ptr<WatchStream> stream;
  std::int64_t id = 0;
  explicit operator bool() const { return id != 0; }
};

class Connection {
 public:
  Connection(std::vector<std::string> endpoints, std::chrono::milliseconds request_timeout,
             EtcdSecurity security = {});
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Before any other call: reads the TLS files (kInvalidArgument naming one
  // that cannot be read or holds no PEM), authenticates when a user is
  // given, and checks that some member answers as an etcd v3 server with a
  // serializable read of `probe_key` (no quorum needed; a key the user may
  // read). kUnavailable naming every endpoint and the last error when none
  // answers; kPermissionDenied for a TLS handshake failure, a wrong
  // password or a missing permission.
  Status Start(const std::string& probe_key, TimePoint deadline);

  Result<pb::RangeResponse> Range(const pb::RangeRequest& request, TimePoint deadline);
  Result<pb::TxnResponse> Txn(const pb::TxnRequest& request, TimePoint deadline);
  // Many transactions, all in flight at once on one member's channel (the
  // callback API), one answer each, in order, as Txn would give it. Those
  // that fail on a transient error are sent again together on the next
  // member until `deadline` (each at least once); the ones still unknown
  // then answer kUnavailable.
  std::vector<Result<pb::TxnResponse>> TxnMany(std::span<const pb::TxnRequest> requests,
                                               TimePoint deadline);
  Result<pb::LeaseGrantResponse> LeaseGrant(std::int64_t ttl_seconds, TimePoint deadline);
  Status LeaseRevoke(std::int64_t lease, TimePoint deadline);
  Result<pb::LeaseTimeToLiveResponse> LeaseTimeToLive(std::int64_t lease, TimePoint deadline);

  // Sends one keep-alive for `lease` on the shared stream and returns at
  // once, so that the caller can overlap it with another request.
  KeepAliveCall SendKeepAlive(std::int64_t lease);
  // Its answer: the lease's TTL in seconds, 0 when the lease is gone. Sends
  // it again on another member if the stream broke or stayed silent.
  Result<std::int64_t> AwaitKeepAlive(KeepAliveCall& call, TimePoint deadline);

  // Watches `key` (whose create_revision was `revision`, as read at store
  // revision `seen_at`; 0 if unknown) from now on, and returns true once it
  // is deleted, or found already gone or replaced; false when `until`
  // passes, `stop` is requested or the watch breaks. The watch starts at
  // the member's next revision, not at a past one: etcd 3.4 serves watchers
  // that start in the past ("unsynced") only every 100 ms. A deletion
  // between the caller's read and the watch's start is caught by reading the
  // key again once the watch exists, unless the store has not moved since
  // `seen_at`.
  bool WaitForDelete(const std::string& key, std::int64_t revision, std::int64_t seen_at,
                     TimePoint until, std::stop_token stop);
  // The same for a range: watches [key, range_end) and returns true once a
  // key in it created at or before `max_create_revision` is deleted, or when
  // fewer than `expected` such keys are left than were there at `seen_at`
  // (the keys ahead of a waiter only ever go, so a count says whether one
  // went). Wakes the semaphore waiters, for which no one key ahead must go.
  bool WaitForDeleteIn(const std::string& key, const std::string& range_end,
                       std::int64_t max_create_revision, std::int64_t expected,
                       std::int64_t seen_at, TimePoint until, std::stop_token stop);

  // The same waits without a thread, for Acquisition::Notify: a watch on
  // the connection's one shared watch stream (etcd_watch_stream.h), and
  // back at once. `wake` is called once, by the gRPC thread that reads the
  // stream, outside every lock, when the deletion happens, or when the
  // watch ends without telling (the stream broke, etcd refused the watch,
  // the read that closes the gap got no answer): trying again is then the
  // safe answer. Never inside these calls. An empty notice when no stream
  // would take the watch (`wake` is then dropped).
  DeleteNotice NotifyOnDelete(const std::string& key, std::int64_t revision, std::int64_t seen_at,
                              std::function<void()> wake);
  DeleteNotice NotifyOnDeleteIn(const std::string& key, const std::string& range_end,
                                std::int64_t max_create_revision, std::int64_t expected,
                                std::int64_t seen_at, std::function<void()> wake);
  // Drops `notice`'s watch (idempotent): its `wake` if it had not run, for
  // the caller to destroy outside its own locks; else empty.
  std::function<void()> StopNotice(DeleteNotice& notice);
  // What the watch streams hold now (tests).
  NoticeCounts Notices();

  // True after an operation gave up because no member could serve it, until
  // one succeeds: callers with nothing urgent to say may then defer it.
  bool LooksDown() const { return looks_down_.load(); }

  // "127.0.0.1:2379,127.0.0.1:2380"
  std::string EndpointList() const;

  // Unary calls (each try on each member) and keep-alives sent (tests).
  std::uint64_t RequestsSent() const { return requests_sent_.load(); }

 private:
  struct Endpoint;
  Endpoint& At(std::size_t index);
  void Rotate(std::size_t from);
  std::shared_ptr<KeepAliveStream> CurrentStream();
  std::shared_ptr<WatchStream> CurrentWatchStream();
  DeleteNotice Notice(const Deletion& d, std::int64_t seen_at, std::function<void()> wake);
  bool Watch(const std::string& key, const std::string& range_end, std::int64_t revision,
             std::int64_t expected, std::int64_t seen_at, TimePoint until, std::stop_token stop);
  // One round of TxnMany: requests[i] for each i in `todo`, on `ep`. What
  // each call answered: its status, and its response in `out` when OK.
  std::vector<grpc::Status> SendTxns(Endpoint& ep, std::span<const pb::TxnRequest> requests,
                                     const std::vector<std::size_t>& todo, Duration budget,
                                     std::vector<Result<pb::TxnResponse>>& out);
  template <typename Resp, typename Fn>
  Result<Resp> Call(std::string_view what, TimePoint deadline, bool require_leader, Fn fn,
                    bool with_token = true);
  Status LoadCredentials();
  Status Authenticate(TimePoint deadline);
  // Authenticates again unless another thread already replaced `stale`.
  Status Reauthenticate(const std::string& stale, TimePoint deadline);
  std::string Token() const;

  const std::vector<std::string> addresses_;
  const EtcdSecurity security_;
  const std::chrono::milliseconds request_timeout_;
  const std::chrono::milliseconds attempt_timeout_;  // one try on one member
  std::atomic<std::size_t> current_{0};
  std::atomic<bool> looks_down_{false};
  std::atomic<std::uint64_t> requests_sent_{0};

  std::mutex mu_;  // guards endpoints_ (lazily filled), the streams below
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
  std::shared_ptr<KeepAliveStream> stream_;                  // the one in use
  std::vector<std::shared_ptr<KeepAliveStream>> streams_;    // every one not done yet
  std::shared_ptr<WatchStream> watch_stream_;                // the one new watches go on
  std::vector<std::shared_ptr<WatchStream>> watch_streams_;  // every one not done yet
  std::shared_ptr<grpc::ChannelCredentials> credentials_;    // set by Start
  std::string credentials_key_;  // tells channels with other credentials apart

  std::mutex auth_mu_;             // one authentication at a time
  mutable std::mutex token_mu_;    // guards token_
  std::string token_;              // empty: none (no user)
};

}  // namespace dlock::etcd

#endif  // DLOCK_SRC_BACKENDS_ETCD_ETCD_CONNECTION_H_
