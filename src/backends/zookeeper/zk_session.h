// Session: one ZooKeeper session, an RAII owner of the multi-threaded C
// client's zhandle_t.
//
// Requests are asynchronous: each returns an Op at once, whose reply is
// filled in by the client's completion thread; the caller waits on it with a
// bound. Pipelined requests (a create, then a getChildren) are answered in
// order on one connection. Nothing throws through a C callback: every
// callback catches, and the owner's handlers (state changes, node events,
// per-request hooks) run on the completion thread, so they must be short
// and must not block on anything that waits for a reply.
//
// The session tracks what the core needs about liveness: its state
// (connecting, connected, expired), the timeout the ensemble negotiated, and
// heard_at, the send time of the newest request a quorum answered: a
// write. A read is answered by the member the client is connected to, on
// its own, even by a member cut off from the leader, so it proves nothing
// about whether the ensemble still keeps the session.
//
// Thread-safety: all methods are thread-safe. Destroying a Session closes
// the handle; requests still pending complete first, with ZCLOSING, so the
// destructor must not run on the completion thread or while holding a lock
// that a handler takes.
#ifndef DLOCK_SRC_BACKENDS_ZOOKEEPER_ZK_SESSION_H_
#define DLOCK_SRC_BACKENDS_ZOOKEEPER_ZK_SESSION_H_

#include <zookeeper/zookeeper.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "dlock/clock.h"
#include "dlock/status.h"

namespace dlock::zookeeper {

// The parts of a znode's Stat that dlock reads.
struct NodeStat {
  std::int64_t czxid = 0;
  std::int64_t ephemeral_owner = 0;
  std::int32_t cversion = 0;
  std::int32_t num_children = 0;
  std::int32_t version = 0;  // the data's
  std::int32_t data_length = 0;
  // When the node was last written, in ms since the epoch by the clock of
  // the ensemble's leader when it applied the write: the store's clock.
  std::int64_t mtime = 0;
};

struct Reply {
  int rc = ZOK;
  TimePoint sent{};
  std::string path;                   // create: the created node's path
  std::vector<std::string> children;  // get_children
  std::string data;                   // get
  NodeStat stat;                      // create2, exists, get, get_children2
  // multi: each operation's own rc, in order, when the ensemble answered
  // (empty when it did not: connection loss, a closed handle).
  std::vector<int> results;
};

// One operation of a Session::Multi.
struct MultiOp {
  enum class Kind { kCheck, kCreate, kDelete };
  Kind kind = Kind::kCheck;
  std::string path;
  std::string data;  // kCreate
  int flags = 0;     // kCreate: ZOO_EPHEMERAL, ...
  int version = -1;  // kCheck, kDelete: -1 for any version
};
struct MultiBuffers;  // what zoo_amulti writes into until it completes

// Who a session is (ZooKeeper's digest scheme) and who may touch the nodes
// it creates. Without a user the session is anonymous and its nodes are
// open to everyone (ZooKeeper's default, and Curator's); with one, every
// node it creates is readable and writable by that identity only, plus
// each admin: digest ids "name:base64(sha1(name:password))", as
// DigestAuthenticationProvider writes them.
struct Identity {
  std::string user;      // empty: anonymous
  std::string password;  // never printed
  std::vector<std::string> admins;
};

class Session;
struct Completions;

// One request in flight.
class Op {
 public:
  explicit Op(Session* session) : session_(session) {}
  // The reply, once it has come within `timeout`; null otherwise (the
  // request may still be answered later). The reply lives in this Op: keep
  // the Op's pointer while reading it, never `Children(p)->Wait(t)->rc`.
  const Reply* Wait(std::chrono::nanoseconds timeout);
  bool done() const;

 private:
  friend class Session;
  friend struct Completions;
  void Finish(Reply reply);

  Session* const session_;  // outlives every completion (see ~Session)
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Reply reply_;
  std::function<void(const Reply&)> on_done_;  // set before submission
  bool write_ = false;  // answered only through the leader and a quorum
  std::shared_ptr<MultiBuffers> multi_;        // a multi's; set before submission
};

class Session {
 public:
  enum class State { kConnecting, kConnected, kExpired, kAuthFailed };
  using StateHandler = std::function<void(State)>;
  using NodeHandler = std::function<void(int type, const std::string& path)>;
  using DoneHandler = std::function<void(const Reply&)>;

  // Starts connecting to `hosts` ("h1:2181,h2:2181"), asking for `timeout`;
  // returns at once, or with an identity once the client took its
  // credentials (at most `credentials_wait`: see AddCredentials).
  // kUnavailable when the client cannot even start (a host that does not
  // resolve) or no member took a connection within that wait.
  static Result<std::unique_ptr<Session>> Start(
      const std::string& hosts, std::chrono::milliseconds timeout, std::shared_ptr<Clock> clock,
      StateHandler on_state, NodeHandler on_node, const Identity& identity = {},
      std::chrono::nanoseconds credentials_wait = std::chrono::seconds(1));
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  State state() const { return state_.load(); }
  bool dead() const { return state() == State::kExpired || state() == State::kAuthFailed; }
  // Until connected, dead, or `timeout`; returns the state then.
  State WaitConnected(std::chrono::nanoseconds timeout);
  // The negotiated session timeout once connected (the requested one before).
  std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(timeout_ms_.load()); }
  TimePoint heard_at() const { return TimePoint(Duration(heard_at_ns_.load())); }
  std::int64_t id() const { return id_.load(); }
  const std::string& hosts() const { return hosts_; }

  // The requests dlock makes. `on_done` runs on the completion thread.
  // Create, Delete, Set and Multi are writes: their answers move heard_at.
  std::shared_ptr<Op> Create(const std::string& path, std::string_view data, int flags,
                             DoneHandler on_done = {});
  std::shared_ptr<Op> Children(const std::string& path, DoneHandler on_done = {});
  // getChildren2 with a watch: the next change of `path`'s children reaches
  // the NodeHandler (ZOO_CHILD_EVENT, `path`).
  std::shared_ptr<Op> WatchChildren(const std::string& path, DoneHandler on_done = {});
  // With `watch`, a node event for `path` later reaches the NodeHandler.
  std::shared_ptr<Op> Exists(const std::string& path, bool watch, DoneHandler on_done = {});
  std::shared_ptr<Op> Get(const std::string& path, DoneHandler on_done = {});
  // Deletes `path` if its data's version is `version` (-1: any).
  std::shared_ptr<Op> Delete(const std::string& path, DoneHandler on_done = {},
                             int version = -1);
  // setData if the data's version is `version` (-1: any); Reply::stat is the
  // node's after the write (its mtime the ensemble's "now").
  std::shared_ptr<Op> Set(const std::string& path, std::string_view data, int version,
                          DoneHandler on_done = {});
  // zoo_async: a read sent after it on this session sees every write the
  // ensemble committed before the sync reached its leader. Not a write: a
  // leader that lost its quorum still answers it until it steps down.
  std::shared_ptr<Op> Sync(const std::string& path, DoneHandler on_done = {});
  // zoo_amulti: all of `ops` are applied, or none. Reply::rc is ZOK, or the
  // error of the first operation that failed; Reply::results has each one's.
  std::shared_ptr<Op> Multi(std::vector<MultiOp> ops, DoneHandler on_done = {});

 private:
  friend class Op;
  Session(std::string hosts, std::chrono::milliseconds timeout, std::shared_ptr<Clock> clock,
          StateHandler on_state, NodeHandler on_node, const Identity& identity);
  // Sends the digest credentials; the client sends them again on every
  // reconnect, ahead of any request.
  Status Authenticate(const Identity& identity, std::chrono::nanoseconds wait);
  static void OnWatch(zhandle_t* zh, int type, int state, const char* path, void* ctx);
  void HandleWatch(zhandle_t* zh, int type, int state, const char* path);
  void NoteHeard(TimePoint sent);
  enum class Kind { kRead, kWrite };
  template <typename Submit>
  std::shared_ptr<Op> Start(Kind kind, DoneHandler on_done, Submit submit);

  const std::string hosts_;
  const std::shared_ptr<Clock> clock_;
  const StateHandler on_state_;
  const NodeHandler on_node_;
  zhandle_t* zh_ = nullptr;
  // The ACL of every node this session creates (see Identity); acl_ points
  // into acl_entries_, whose ids point into acl_ids_.
  std::vector<std::pair<std::string, std::string>> acl_ids_;  // scheme, id
  std::vector<ACL> acl_entries_;
  ACL_vector acl_{};

  std::atomic<State> state_{State::kConnecting};
  std::atomic<std::int64_t> timeout_ms_;
  std::atomic<std::int64_t> heard_at_ns_{0};
  std::atomic<std::int64_t> id_{0};
  std::atomic<bool> closing_{false};
  std::mutex mu_;
  std::condition_variable cv_;  // state changes
};

// zoo_add_auth with digest credentials "user:password", tried again for up
// to `wait` while the handle is between two connection attempts: the C
// client refuses credentials then (ZINVALIDSTATE, ZOOKEEPER-800) though
// nothing is wrong, as when the first member it tried closed the
// connection. Returns zoo_add_auth's last answer.
int AddCredentials(zhandle_t* zh, const std::string& cert, std::chrono::nanoseconds wait);

// True when `rc` means the ensemble answered the request (so it heard from
// this session), false for connection loss, timeouts, a closed handle.
bool Answered(int rc);
// True when `rc` means the outcome is unknown: the request may or may not
// have been applied.
bool OutcomeUnknown(int rc);
// Maps a ZooKeeper error code to a Status: the one place that does.
Status ZkError(int rc, std::string_view what);
// kUnavailable: no member of `hosts` answered a new session within `wait`.
Status NoServerAnswered(const std::string& hosts, std::chrono::milliseconds wait);

}  // namespace dlock::zookeeper

#endif  // DLOCK_SRC_BACKENDS_ZOOKEEPER_ZK_SESSION_H_
