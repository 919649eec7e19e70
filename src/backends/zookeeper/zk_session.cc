#include "backends/zookeeper/zk_session.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/duration.h"
#include "core/leak_suppressions.h"

namespace dlock::zookeeper {
namespace {

// The longest a DNS change to the ensemble's host names goes unnoticed
// while the connection stays up (zoo_set_servers_resolution_delay).
constexpr int kResolveEveryMs = 60'000;

// The C client logs connection attempts and errors to stderr by default,
// which would land in every `dlock exec` user's terminal. Only with
// DLOCK_ZK_LOG set does it reach stderr.
void LogToStderrIfAsked(const char* message) {
  static const bool wanted = [] {
    const char* v = std::getenv("DLOCK_ZK_LOG");
    return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
  }();
  if (wanted) std::fprintf(stderr, "zookeeper: %s\n", message);
}

// Without DLOCK_ZK_LOG the C client's logging is switched off altogether
// (level 0), not merely discarded by the callback: the client formats a
// server's address for its messages into one static buffer
// (format_endpoint_info), which the I/O threads of two sessions in one
// process write at once when both lose their connection (ThreadSanitizer
// reports it; issue #7). With logging off the formatting never runs. With
// DLOCK_ZK_LOG set the messages come back, and with them that race in the
// library (garbled addresses in log lines at worst).
void SetLogLevelOnce() {
  static const bool done = [] {
    const char* v = std::getenv("DLOCK_ZK_LOG");
    zoo_set_debug_level(v && *v && std::strcmp(v, "0") != 0 ? ZOO_LOG_LEVEL_INFO
                                                           : static_cast<ZooLogLevel>(0));
    internal::UseLeakSuppressions();  // zookeeper_close's own leak
    return true;
  }();
  (void)done;
}

NodeStat FromStat(const struct Stat* s) {
  NodeStat out;
  if (s != nullptr) {
    out.czxid = s->czxid;
    out.ephemeral_owner = s->ephemeralOwner;
    out.cversion = s->cversion;
    out.version = s->version;
    out.mtime = s->mtime;
    out.data_length = s->dataLength;
    out.num_children = s->numChildren;
  }
  return out;
}

// The request's shared state travels through the C client as a heap
// shared_ptr, released by whichever completion runs.
std::shared_ptr<Op> TakeOp(const void* data) {
  auto* holder = static_cast<std::shared_ptr<Op>*>(const_cast<void*>(data));
  std::shared_ptr<Op> op = std::move(*holder);
  delete holder;
  return op;
}

}  // namespace

// The arrays zoo_amulti reads and writes: they live with the Op until its
// completion has run.
struct MultiBuffers {
  std::vector<MultiOp> ops;
  std::vector<zoo_op_t> zops;
  std::vector<zoo_op_result_t> results;
  std::vector<std::vector<char>> path_bufs;  // a create's resulting path
};

// Completion trampolines, one per reply shape. They never throw.
struct Completions {
  static void StringStat(int rc, const char* value, const struct Stat* stat, const void* data) {
    std::shared_ptr<Op> op = TakeOp(data);
    Reply r;
    try {
      r.rc = rc;
      if (rc == ZOK && value != nullptr) r.path = value;
      if (rc == ZOK) r.stat = FromStat(stat);
    } catch (...) {
      r.rc = ZSYSTEMERROR;
    }
    op->Finish(std::move(r));
  }
  static void StringsStat(int rc, const struct String_vector* strings, const struct Stat* stat,
                          const void* data) {
    std::shared_ptr<Op> op = TakeOp(data);
    Reply r;
    try {
      r.rc = rc;
      if (rc == ZOK && strings != nullptr) {
        r.children.reserve(static_cast<std::size_t>(strings->count));
        for (int i = 0; i < strings->count; ++i) r.children.emplace_back(strings->data[i]);
      }
      if (rc == ZOK) r.stat = FromStat(stat);
    } catch (...) {
      r.rc = ZSYSTEMERROR;
    }
    op->Finish(std::move(r));
  }
  static void StatOnly(int rc, const struct Stat* stat, const void* data) {
    std::shared_ptr<Op> op = TakeOp(data);
    Reply r;
    r.rc = rc;
    if (rc == ZOK) r.stat = FromStat(stat);
    op->Finish(std::move(r));
  }
  static void Data(int rc, const char* value, int value_len, const struct Stat* stat,
                   const void* data) {
    std::shared_ptr<Op> op = TakeOp(data);
    Reply r;
    try {
      r.rc = rc;
      if (rc == ZOK && value != nullptr && value_len > 0) {
        r.data.assign(value, static_cast<std::size_t>(value_len));
      }
      if (rc == ZOK) r.stat = FromStat(stat);
    } catch (...) {
      r.rc = ZSYSTEMERROR;
    }
    op->Finish(std::move(r));
  }
  static void String(int rc, const char* /*value*/, const void* data) {
    std::shared_ptr<Op> op = TakeOp(data);
    Reply r;
    r.rc = rc;
    op->Finish(std::move(r));
  }
  static void Multi(int rc, const void* data) {
    std::shared_ptr<Op> op = TakeOp(data);
    Reply r;
    try {
      r.rc = rc;
      if (Answered(rc) && op->multi_) {
        for (const auto& res : op->multi_->results) r.results.push_back(res.err);
      }
    } catch (...) {
      r.rc = ZSYSTEMERROR;
      r.results.clear();
    }
    op->Finish(std::move(r));
  }
  static void Void(int rc, const void* data) {
    std::shared_ptr<Op> op = TakeOp(data);
    Reply r;
    r.rc = rc;
    op->Finish(std::move(r));
  }
};

const Reply* Op::Wait(std::chrono::nanoseconds timeout) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return done_; })) return nullptr;
  return &reply_;
}

bool Op::done() const {
  std::lock_guard lock(mu_);
  return done_;
}

void Op::Finish(Reply reply) {
  std::function<void(const Reply&)> on_done;
  {
    std::lock_guard lock(mu_);
    reply.sent = reply_.sent;
    // Before anyone sees the reply: a waiter reads heard_at right after.
    if (write_ && Answered(reply.rc)) session_->NoteHeard(reply.sent);
    reply_ = std::move(reply);
    done_ = true;
    on_done.swap(on_done_);
  }
  cv_.notify_all();
  if (on_done) {
    try {
      on_done(reply_);
    } catch (...) {
      // A handler must not take the completion thread down.
    }
  }
}

Session::Session(std::string hosts, std::chrono::milliseconds timeout,
                 std::shared_ptr<Clock> clock, StateHandler on_state, NodeHandler on_node,
                 const Identity& identity)
    : hosts_(std::move(hosts)),
      clock_(std::move(clock)),
      on_state_(std::move(on_state)),
      on_node_(std::move(on_node)),
      timeout_ms_(timeout.count()) {
  if (identity.user.empty()) {
    acl_ = ZOO_OPEN_ACL_UNSAFE;
    return;
  }
  // "auth" stands for the identities this session authenticated as.
  acl_ids_.emplace_back("auth", "");
  for (const std::string& admin : identity.admins) acl_ids_.emplace_back("digest", admin);
  for (auto& [scheme, id] : acl_ids_) {
    acl_entries_.push_back(ACL{ZOO_PERM_ALL, Id{scheme.data(), id.data()}});
  }
  acl_.count = static_cast<std::int32_t>(acl_entries_.size());
  acl_.data = acl_entries_.data();
}

int AddCredentials(zhandle_t* zh, const std::string& cert, std::chrono::nanoseconds wait) {
  const TimePoint end = MonotonicClock::now() + wait;
  for (;;) {
    const int rc =
        zoo_add_auth(zh, "digest", cert.data(), static_cast<int>(cert.size()), nullptr, nullptr);
    // Between attempts the state is 0 and no event marks its end: poll.
    // An attempt that is taken holds a non-zero state for its handshake.
    if (rc != ZINVALIDSTATE || is_unrecoverable(zh) != ZOK || MonotonicClock::now() >= end) {
      return rc;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

Status Session::Authenticate(const Identity& identity, std::chrono::nanoseconds wait) {
  if (identity.user.empty()) return Status::Ok();
  const std::string cert = identity.user + ":" + identity.password;
  // The outcome arrives as a session event (ZOO_AUTH_FAILED_STATE) if the
  // ensemble refuses; the digest scheme accepts any well-formed pair and
  // a wrong password is found when the ACLs refuse it (ZNOAUTH).
  const int rc = AddCredentials(zh_, cert, wait);
  if (rc == ZINVALIDSTATE && is_unrecoverable(zh_) == ZOK) {
    return NoServerAnswered(hosts_, std::chrono::duration_cast<std::chrono::milliseconds>(wait));
  }
  if (rc != ZOK) return ZkError(rc, "sending the credentials of user '" + identity.user + "'");
  return Status::Ok();
}

Result<std::unique_ptr<Session>> Session::Start(const std::string& hosts,
                                                std::chrono::milliseconds timeout,
                                                std::shared_ptr<Clock> clock, StateHandler on_state,
                                                NodeHandler on_node, const Identity& identity,
                                                std::chrono::nanoseconds credentials_wait) {
  SetLogLevelOnce();
  std::unique_ptr<Session> s(new Session(hosts, timeout, std::move(clock), std::move(on_state),
                                         std::move(on_node), identity));
  errno = 0;
  // The watcher may run before zookeeper_init2 returns; it only uses the
  // handle it is given, never zh_.
  zhandle_t* zh = zookeeper_init2(hosts.c_str(), &Session::OnWatch,
                                  static_cast<int>(timeout.count()), nullptr, s.get(),
                                  ZOO_NO_LOG_CLIENTENV, &LogToStderrIfAsked);
  if (zh == nullptr) {
    const int err = errno;
    return UnavailableError("cannot start a ZooKeeper client for " + hosts + ": " +
                            (err != 0 ? std::strerror(err) : "unknown error") +
                            " (do the host names resolve?)");
  }
  // By default the client resolves the host list again every time its I/O
  // thread polls: getaddrinfo (files read, a netlink query) for every
  // request and event. Under contention that was ~40 % of a CPU for four
  // clients on one key (docs/backend-zookeeper.md). Once a minute is enough
  // to follow a DNS change; a lost connection still resolves at once.
  (void)zoo_set_servers_resolution_delay(zh, kResolveEveryMs);
  s->zh_ = zh;
  DLOCK_RETURN_IF_ERROR(s->Authenticate(identity, credentials_wait));
  return s;
}

Session::~Session() {
  closing_ = true;
  if (zh_ != nullptr) zookeeper_close(zh_);
}

Session::State Session::WaitConnected(std::chrono::nanoseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] {
    const State s = state_.load();
    return s != State::kConnecting;
  });
  return state_.load();
}

void Session::OnWatch(zhandle_t* zh, int type, int state, const char* path, void* ctx) {
  try {
    static_cast<Session*>(ctx)->HandleWatch(zh, type, state, path);
  } catch (...) {
    // Nothing may throw through the C client.
  }
}

void Session::HandleWatch(zhandle_t* zh, int type, int state, const char* path) {
  if (type == ZOO_SESSION_EVENT) {
    State next;
    if (state == ZOO_CONNECTED_STATE) {
      next = State::kConnected;
      timeout_ms_ = zoo_recv_timeout(zh);
      if (const clientid_t* id = zoo_client_id(zh)) id_ = id->client_id;
    } else if (state == ZOO_EXPIRED_SESSION_STATE) {
      next = State::kExpired;
    } else if (state == ZOO_AUTH_FAILED_STATE) {
      next = State::kAuthFailed;
    } else {
      next = State::kConnecting;  // connecting, associating, not connected
    }
    {
      std::lock_guard lock(mu_);
      // Expiry is final: a late "connecting" must not undo it.
      if (!dead()) state_ = next;
    }
    cv_.notify_all();
    if (!closing_ && on_state_) on_state_(state_.load());
    return;
  }
  if (!closing_ && on_node_ && path != nullptr) on_node_(type, path);
}

void Session::NoteHeard(TimePoint sent) {
  const std::int64_t ns = sent.time_since_epoch().count();
  std::int64_t cur = heard_at_ns_.load();
  while (ns > cur && !heard_at_ns_.compare_exchange_weak(cur, ns)) {
  }
}

template <typename Submit>
std::shared_ptr<Op> Session::Start(Kind kind, DoneHandler on_done, Submit submit) {
  auto op = std::make_shared<Op>(this);
  op->on_done_ = std::move(on_done);
  op->write_ = kind == Kind::kWrite;
  op->reply_.sent = clock_->Now();
  auto* holder = new std::shared_ptr<Op>(op);
  const int rc = submit(static_cast<const void*>(holder));
  if (rc != ZOK) {
    // Not queued: no completion will run, and nobody answered.
    delete holder;
    op->write_ = false;
    Reply r;
    r.rc = rc;
    op->Finish(std::move(r));
  }
  return op;
}

std::shared_ptr<Op> Session::Create(const std::string& path, std::string_view data, int flags,
                                    DoneHandler on_done) {
  return Start(Kind::kWrite, std::move(on_done), [&](const void* ctx) {
    return zoo_acreate2(zh_, path.c_str(), data.data(), static_cast<int>(data.size()),
                        &acl_, flags, &Completions::StringStat, ctx);
  });
}

std::shared_ptr<Op> Session::Children(const std::string& path, DoneHandler on_done) {
  return Start(Kind::kRead, std::move(on_done), [&](const void* ctx) {
    return zoo_aget_children2(zh_, path.c_str(), 0, &Completions::StringsStat, ctx);
  });
}

std::shared_ptr<Op> Session::WatchChildren(const std::string& path, DoneHandler on_done) {
  return Start(Kind::kRead, std::move(on_done), [&](const void* ctx) {
    return zoo_awget_children2(zh_, path.c_str(), &Session::OnWatch, this,
                               &Completions::StringsStat, ctx);
  });
}

std::shared_ptr<Op> Session::Exists(const std::string& path, bool watch, DoneHandler on_done) {
  return Start(Kind::kRead, std::move(on_done), [&](const void* ctx) {
    if (watch) {
      return zoo_awexists(zh_, path.c_str(), &Session::OnWatch, this, &Completions::StatOnly, ctx);
    }
    return zoo_aexists(zh_, path.c_str(), 0, &Completions::StatOnly, ctx);
  });
}

std::shared_ptr<Op> Session::Get(const std::string& path, DoneHandler on_done) {
  return Start(Kind::kRead, std::move(on_done), [&](const void* ctx) {
    return zoo_aget(zh_, path.c_str(), 0, &Completions::Data, ctx);
  });
}

std::shared_ptr<Op> Session::Delete(const std::string& path, DoneHandler on_done, int version) {
  return Start(Kind::kWrite, std::move(on_done), [&](const void* ctx) {
    return zoo_adelete(zh_, path.c_str(), version, &Completions::Void, ctx);
  });
}

std::shared_ptr<Op> Session::Sync(const std::string& path, DoneHandler on_done) {
  return Start(Kind::kRead, std::move(on_done), [&](const void* ctx) {
    return zoo_async(zh_, path.c_str(), &Completions::String, ctx);
  });
}

std::shared_ptr<Op> Session::Set(const std::string& path, std::string_view data, int version,
                                 DoneHandler on_done) {
  return Start(Kind::kWrite, std::move(on_done), [&](const void* ctx) {
    return zoo_aset(zh_, path.c_str(), data.data(), static_cast<int>(data.size()), version,
                    &Completions::StatOnly, ctx);
  });
}

std::shared_ptr<Op> Session::Multi(std::vector<MultiOp> ops, DoneHandler on_done) {
  auto b = std::make_shared<MultiBuffers>();
  b->ops = std::move(ops);
  const std::size_t n = b->ops.size();
  b->zops.resize(n);
  b->results.resize(n);
  b->path_bufs.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const MultiOp& o = b->ops[i];
    b->results[i].err = ZSYSTEMERROR;  // until the reply says otherwise
    if (o.kind == MultiOp::Kind::kCheck) {
      zoo_check_op_init(&b->zops[i], o.path.c_str(), o.version);
    } else if (o.kind == MultiOp::Kind::kDelete) {
      zoo_delete_op_init(&b->zops[i], o.path.c_str(), o.version);
    } else {
      b->path_bufs[i].assign(o.path.size() + 16, '\0');  // room for a sequence suffix
      zoo_create_op_init(&b->zops[i], o.path.c_str(), o.data.data(),
                         static_cast<int>(o.data.size()), &acl_, o.flags,
                         b->path_bufs[i].data(), static_cast<int>(b->path_bufs[i].size()));
    }
  }
  return Start(Kind::kWrite, std::move(on_done), [&](const void* ctx) {
    // The Op is not yet shared with anyone: its buffers go with it.
    (*static_cast<const std::shared_ptr<Op>*>(ctx))->multi_ = b;
    return zoo_amulti(zh_, static_cast<int>(n), b->zops.data(), b->results.data(),
                      &Completions::Multi, ctx);
  });
}

bool Answered(int rc) {
  return rc == ZOK || rc == ZNONODE || rc == ZNODEEXISTS || rc == ZNOTEMPTY ||
         rc == ZBADVERSION || rc == ZNOCHILDRENFOREPHEMERALS || rc == ZNOAUTH ||
         rc == ZINVALIDACL || rc == ZBADARGUMENTS;
}

bool OutcomeUnknown(int rc) {
  return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT || rc == ZCLOSING ||
         rc == ZSESSIONMOVED || rc == ZSYSTEMERROR || rc == ZMARSHALLINGERROR;
}

Status NoServerAnswered(const std::string& hosts, std::chrono::milliseconds wait) {
  return UnavailableError("no ZooKeeper server at " + hosts + " answered within " +
                          internal::FormatDuration(wait) +
                          " (is the ensemble running, and are these its client ports?)");
}

Status ZkError(int rc, std::string_view what) {
  const std::string m = std::string(what) + ": " + zerror(rc);
  if (rc == ZNOAUTH || rc == ZAUTHFAILED) {
    return PermissionDeniedError(m + " (the znode's ACL does not allow it: wrong or missing "
                                     "credentials in the URI, or nodes made by another user)");
  }
  if (rc == ZBADARGUMENTS || rc == ZINVALIDACL || rc == ZNOCHILDRENFOREPHEMERALS) {
    return InvalidArgumentError(m);
  }
  if (rc == ZSESSIONEXPIRED || rc == ZINVALIDSTATE) {
    return UnavailableError(m + " (the session expired; a new one is opened on retry)");
  }
  return UnavailableError(m);
}

}  // namespace dlock::zookeeper
