// WatchStream: one gRPC Watch stream to one etcd member carrying many
// watches, each waiting for one deletion, for Acquisition::Notify: a client's
// pending asynchronous acquisitions share it, so waiting takes no thread
// and no stream of its own. (The blocking Wait keeps a stream per wait,
// read by the waiting thread: etcd_connection.cc, WatchOnce.)
//
// Each watch is etcd's own (watch_id chosen here), created at the member's
// next revision as the blocking Wait's is, and checked against the caller's
// read the same way: once etcd says it is created, a serializable read on
// the same member (unless the member's revision shows nothing changed since
// the caller read it at `seen_at`) says whether the deletion came before.
// A watch fires once: its `wake` runs on the gRPC thread that read the
// event (or the check's answer), outside every lock, and the watch is
// cancelled at etcd. When the stream breaks, etcd refuses or cancels a
// watch, or the check cannot be answered, the watches concerned are woken
// too: the caller cannot tell, and trying again is always safe.
//
// Lifetime: as KeepAliveStream, the object owns itself until gRPC calls
// OnDone, and a "hold" keeps OnDone away while a write may still be
// started from outside a reaction.
//
// Thread-safety: thread-safe.
#ifndef DLOCK_SRC_BACKENDS_ETCD_ETCD_WATCH_STREAM_H_
#define DLOCK_SRC_BACKENDS_ETCD_ETCD_WATCH_STREAM_H_

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "dlock/clock.h"
#include "rpc.grpc.pb.h"

namespace dlock::etcd {

namespace pb = ::etcdserverpb;

// What a watch waits for the deletion of: one key (range_end empty;
// `revision` its create_revision) or any key of a range created at or
// before `revision`, of which there were `expected`.
struct Deletion {
  std::string key;
  std::string range_end;
  std::int64_t revision = 0;
  std::int64_t expected = 0;
  bool range() const { return !range_end.empty(); }
};

// The watch for `d`, from the member's next revision (`watch_id` 0: etcd
// picks one).
pb::WatchRequest CreateWatch(const Deletion& d, std::int64_t watch_id = 0);
// The read that says whether `d` happened before a watch started, and
// what its answer means.
pb::RangeRequest GoneBeforeRead(const Deletion& d);
bool GoneIn(const Deletion& d, const pb::RangeResponse& found);
bool IsDeletion(const mvccpb::Event& event, const Deletion& d);
// A canceled watch's reason that says the stream's token is no good.
bool RefusedForAuth(const std::string& cancel_reason);

class WatchStream final : public grpc::ClientBidiReactor<pb::WatchRequest, pb::WatchResponse>,
                          public std::enable_shared_from_this<WatchStream> {
 public:
  // `kv` (the same member's) serves the checks, each bounded by
  // `check_timeout`; both stubs outlive every call made here.
  static std::shared_ptr<WatchStream> Start(pb::Watch::Stub& watch, pb::KV::Stub& kv,
                                            std::string address, const std::string& token,
                                            Duration check_timeout);

  // Watches for `d`, not yet happened at store revision `seen_at` (0:
  // unknown), and takes `wake`: its id. 0 when the stream is broken:
  // nothing registered, `wake` left with the caller.
  std::int64_t Add(const Deletion& d, std::int64_t seen_at, std::function<void()>& wake);
  // Drops watch `id`: its `wake` if it had not run (for the caller to
  // destroy outside its locks), else empty.
  std::function<void()> Remove(std::int64_t id);

  const std::string& address() const { return address_; }
  const std::string& token() const { return token_; }
  bool broken();
  // Whether it broke because etcd no longer took its token.
  bool stale_token();
  // Watches registered here, and those etcd has open for this stream.
  std::size_t registered();
  std::size_t open_at_store();

  // Ends the stream (idempotent); its watches are woken. OnDone follows
  // on a gRPC thread.
  void Close();
  // Waits (bounded) until gRPC is done with the stream.
  void AwaitDone(Duration limit);
  bool done();

  void OnWriteDone(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  struct Watcher {
    Deletion target;
    std::int64_t seen_at = 0;
    std::function<void()> wake;
  };
  // What one answer from etcd asks of the reader, done outside mu_.
  struct Reaction {
    std::vector<std::function<void()>> wakes;
    std::vector<std::int64_t> cancels;                      // watches that fired
    std::vector<std::pair<std::int64_t, Deletion>> checks;  // created, to check
    bool close = false;                                     // the token is stale
  };

  WatchStream(pb::KV::Stub& kv, std::string address, const std::string& token,
              Duration check_timeout);
  void ReactLocked(const pb::WatchResponse& response, Reaction& out);
  void Carry(Reaction& out);
  void Check(std::int64_t id, const Deletion& d);
  void Send(pb::WatchRequest request);
  std::function<void()> TakeLocked(std::int64_t id);
  bool TakeHoldLocked();

  pb::KV::Stub& kv_;
  const std::string address_;
  const std::string token_;
  const Duration check_timeout_;
  grpc::ClientContext context_;
  pb::WatchRequest request_;    // the write in flight
  pb::WatchResponse response_;  // the read in flight

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::int64_t, Watcher> watchers_;  // registered, not yet fired
  std::set<std::int64_t> open_;               // created at etcd, not yet cancelled
  std::int64_t next_id_ = 1;                  // etcd takes 0 as "pick one"
  std::deque<pb::WatchRequest> queued_;       // not yet written
  bool writing_ = false;
  bool broken_ = false;
  bool outside_closed_ = false;
  int outside_writes_ = 0;
  bool hold_removed_ = false;
  bool done_ = false;
  bool stale_token_ = false;
  std::shared_ptr<WatchStream> self_;
};

}  // namespace dlock::etcd

#endif  // DLOCK_SRC_BACKENDS_ETCD_ETCD_WATCH_STREAM_H_
