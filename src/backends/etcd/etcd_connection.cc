#include "backends/etcd/etcd_connection.h"

#include <grpc/grpc.h>
#include <grpc/support/log.h>
#include <grpcpp/grpcpp.h>
#include <openssl/crypto.h>

#include <algorithm>
#include <cstdlib>
#include <condition_variable>
#include <deque>
#include <map>
#include <optional>
#include <thread>
#include <utility>

#include "backends/etcd/etcd_watch_stream.h"
#include "backends/etcd/plaintext_probe.h"
#include "core/duration.h"
#include "core/leak_suppressions.h"
#include "core/tls_files.h"

namespace dlock::etcd {
namespace {

using std::chrono::milliseconds;

// What to do after a failed call.
enum class Retry {
  kNo,           // the answer is final (bad request, lease gone, auth...)
  kOtherMember,  // this member cannot serve it, ever: try the others only
  kYes,          // transient: try again, on the next member
};

bool Contains(const grpc::Status& s, std::string_view text) {
  return s.error_message().find(text) != std::string::npos;
}

// An expired (or, after an auth change, outdated) token: authenticate again.
bool IsStaleToken(const grpc::Status& s) {
  return (s.error_code() == grpc::StatusCode::UNAUTHENTICATED &&
          Contains(s, "invalid auth token")) ||
         (s.error_code() == grpc::StatusCode::INVALID_ARGUMENT &&
          Contains(s, "revision of auth store is old"));
}

constexpr std::string_view kClosedInHandshake = "connection closed while it was set up: ";

// gRPC 1.51 reports a server that refuses this client's certificate (under
// TLS 1.3 that comes after the client's side of the handshake is done) as a
// failed read (or a reset) while connecting, and the server's reason ("bad
// certificate") only in its log. A plaintext etcd that closes before it has
// read the whole TLS hello resets the connection too (one CI run in many):
// the server is asked which it is. A failure over TLS is then marked for
// TlsFailure; the same close on a plaintext channel is what a TLS-only
// server does.
grpc::Status Annotated(const grpc::Status& s, bool tls, const std::string& address) {
  if (s.error_code() != grpc::StatusCode::UNAVAILABLE || !Contains(s, "failed to connect")) {
    return s;
  }
  if (tls && (Contains(s, "Endpoint read failed") || Contains(s, "Connection reset by peer"))) {
    // Three seconds: a refusing TLS server closes at once, and only a
    // silent one costs the whole wait; one second was once too short for a
    // plaintext server on a machine running a sanitizer suite.
    if (AnswersPlaintextHttp2(address, milliseconds(3000))) {
      return grpc::Status(s.error_code(), s.error_message() +
                                              " (the server answers HTTP/2 in plaintext: it "
                                              "serves plaintext, use etcd://)");
    }
    return grpc::Status(s.error_code(), std::string(kClosedInHandshake) + s.error_message());
  }
  if (Contains(s, "Socket closed")) {
    const std::string hint =
        tls ? "serves plaintext, use etcd://)" : "serves TLS only, use etcds://)";
    return grpc::Status(s.error_code(), s.error_message() +
                                            " (the server closed the connection at once: if it " +
                                            hint);
  }
  return s;
}

// What went wrong in a TLS handshake, from gRPC's UNAVAILABLE message; empty
// when the failure was not TLS.
std::string TlsFailure(const grpc::Status& s) {
  if (s.error_code() != grpc::StatusCode::UNAVAILABLE) return "";
  if (s.error_message().starts_with(kClosedInHandshake)) {
    return "the server closed the connection during the TLS handshake: it most likely refused "
           "this client's certificate (expired, from another CA, or none given where etcd runs "
           "with --client-cert-auth); gRPC does not say why";
  }
  if (Contains(s, "CERTIFICATE_VERIFY_FAILED") || Contains(s, "certificate verify failed")) {
    return "the server's certificate is not trusted: not signed by the cacert= CA (or the "
           "system's), expired, or not for this host name";
  }
  if (Contains(s, "Peer name") || Contains(s, "not in peer certificate")) {
    return "the server's certificate is not for this host name";
  }
  if (Contains(s, "WRONG_VERSION_NUMBER") || Contains(s, "wrong version number")) {
    return "the server does not speak TLS (a plaintext etcd? use etcd://)";
  }
  if (Contains(s, "Ssl handshake failed") || Contains(s, "SSL_ERROR") ||
      Contains(s, "TLSV1_ALERT") || Contains(s, "SSLV3_ALERT")) {
    return "the TLS handshake failed: the server refused this client's certificate (expired, "
           "from another CA, or none given where --client-cert-auth demands one), or the "
           "server's could not be checked";
  }
  return "";
}

Retry Classify(const grpc::Status& s) {
  // Refused even after re-authenticating (the callers do that first): a
  // member that has not applied the new token yet, or one whose copy lapsed
  // before the call reached it. Another member, or a later try, may take it.
  if (IsStaleToken(s)) return Retry::kYes;
  switch (s.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      // A member that speaks HTTP/1 will not learn HTTP/2 by being asked
      // again, nor will one whose certificates do not match.
      return Contains(s, "http1") || !TlsFailure(s).empty() ? Retry::kOtherMember : Retry::kYes;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    case grpc::StatusCode::CANCELLED:
      return Retry::kYes;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return Contains(s, "too many requests") ? Retry::kYes : Retry::kNo;
    case grpc::StatusCode::FAILED_PRECONDITION:
      return Contains(s, "not leader") ? Retry::kYes : Retry::kNo;
    case grpc::StatusCode::UNIMPLEMENTED:
    case grpc::StatusCode::UNKNOWN:
    case grpc::StatusCode::INTERNAL:
      return Retry::kOtherMember;
    default:
      return Retry::kNo;
  }
}

// The one place gRPC and etcd errors become dlock Statuses. `what` says what
// was being done ("acquire jobs/a"), `endpoint` which member answered.
Status FromGrpc(const grpc::Status& s, std::string_view what, std::string_view endpoint) {
  const std::string ep(endpoint);
  const std::string msg = s.error_message();
  const std::string doing(what);
  // Not final: the password was taken; its tokens were not, in time.
  if (IsStaleToken(s)) {
    return UnavailableError("etcd at " + ep + ": " + doing +
                            ": fresh auth tokens were refused until the time ran out (" + msg +
                            ")");
  }
  switch (s.error_code()) {
    case grpc::StatusCode::OK:
      return Status::Ok();
    case grpc::StatusCode::NOT_FOUND:
      if (Contains(s, "lease not found")) {
        return NotOwnerError("etcd: " + doing + ": the session lease is gone (expired or revoked)");
      }
      return UnavailableError("etcd at " + ep + ": " + doing + ": " + msg);
    case grpc::StatusCode::UNAVAILABLE:
      if (Contains(s, "no leader")) {
        return UnavailableError("etcd unavailable: " + doing + ": member " + ep +
                                " has no leader: the cluster has lost its quorum or is electing "
                                "a leader (" + msg + ")");
      }
      if (Contains(s, "http1")) {
        return UnavailableError("the server at " + ep +
                                " is not an etcd v3 server: it answers HTTP/1, not gRPC (" + msg +
                                ")");
      }
      if (std::string tls = TlsFailure(s); !tls.empty()) {
        return PermissionDeniedError("etcd at " + ep + ": " + doing + ": TLS: " + tls + " (" +
                                     msg + ")");
      }
      if (Contains(s, "request timed out") || Contains(s, "leader changed")) {
        return UnavailableError("etcd unavailable: " + doing + ": " + msg +
                                " (the cluster may have lost its quorum)");
      }
      return UnavailableError("etcd unavailable: " + doing + ": cannot reach " + ep + ": " + msg);
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return UnavailableError("etcd unavailable: " + doing + ": no answer from " + ep +
                              " in time (member stopped, overloaded or cut off?)");
    case grpc::StatusCode::UNIMPLEMENTED:
    case grpc::StatusCode::UNKNOWN:
    case grpc::StatusCode::INTERNAL:
      return UnavailableError("the server at " + ep +
                              " is not an etcd v3 server (it does not serve etcd's gRPC API: " +
                              msg + ")");
    case grpc::StatusCode::INVALID_ARGUMENT:
      if (Contains(s, "authentication failed")) {
        return PermissionDeniedError("etcd at " + ep + " refused the user name or password (" +
                                     msg + ")");
      }
      return InvalidArgumentError("etcd refused " + doing + ": " + msg);
    case grpc::StatusCode::FAILED_PRECONDITION:
      if (Contains(s, "authentication is not enabled")) {
        return InvalidArgumentError("etcd at " + ep +
                                    " has authentication off, but the URI names a user: drop "
                                    "the user, or enable etcd's authentication (" + msg + ")");
      }
      return UnavailableError("etcd at " + ep + ": " + doing + " failed: " + msg);
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
      return PermissionDeniedError("etcd at " + ep + " refused " + doing +
                                   " (authentication required, or this user's role does not "
                                   "allow it): " + msg);
    default:
      return UnavailableError("etcd at " + ep + ": " + doing + " failed: " + msg + " (gRPC code " +
                              std::to_string(static_cast<int>(s.error_code())) + ")");
  }
}

std::chrono::system_clock::time_point WallDeadline(Duration budget) {
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(budget);
}

enum class WatchEnd {
  kGone,           // the key (or one of the range) was deleted
  kEnded,          // the watch ended first: `until`, a stop, a broken stream
  kMemberTrouble,  // the member could not answer the read that closes the gap
  kRefused,        // etcd refused the watch: a stale token or no permission
};

// Whether `d` happened before the watch started; nullopt when the member
// cannot say. Asked of the watch's member, serializably: it has applied at
// least up to the watch's start, so this read and the watch leave no gap.
std::optional<bool> GoneBefore(pb::KV::Stub& kv, const Deletion& d, TimePoint until,
                               Duration attempt_timeout, const std::string& token) {
  const pb::RangeRequest check = GoneBeforeRead(d);
  grpc::ClientContext context;
  context.set_deadline(WallDeadline(
      std::clamp<Duration>(until - MonotonicClock::now(), milliseconds(1), attempt_timeout)));
  if (!token.empty()) context.AddMetadata("token", token);
  pb::RangeResponse found;
  if (!kv.Range(&context, check, &found).ok()) return std::nullopt;
  return GoneIn(d, found);
}

// Reads a watch's answers until `d` happens or the watch ends.
WatchEnd ReadWatch(grpc::ClientReaderWriter<pb::WatchRequest, pb::WatchResponse>& stream,
                   pb::KV::Stub& kv, const Deletion& d, std::int64_t seen_at, TimePoint until,
                   Duration attempt_timeout, const std::string& token) {
  pb::WatchResponse response;
  while (stream.Read(&response)) {
    if (response.canceled()) {
      if (RefusedForAuth(response.cancel_reason())) return WatchEnd::kRefused;
      break;
    }
    if (response.created()) {
      // The watch sees every change after the member's revision now. If
      // that is no later than the caller's read, nothing can have slipped
      // in between; otherwise, ask.
      if (seen_at > 0 && response.header().revision() <= seen_at) continue;
      const std::optional<bool> gone = GoneBefore(kv, d, until, attempt_timeout, token);
      if (!gone) return WatchEnd::kMemberTrouble;
      if (*gone) return WatchEnd::kGone;
      continue;
    }
    for (const auto& event : response.events()) {
      if (IsDeletion(event, d)) return WatchEnd::kGone;
    }
  }
  return WatchEnd::kEnded;
}

// One watch on one member, until `d` happens or the watch ends.
WatchEnd WatchOnce(pb::Watch::Stub& watch, pb::KV::Stub& kv, const Deletion& d,
                   std::int64_t seen_at, TimePoint until, const std::stop_token& stop,
                   const std::string& token, Duration attempt_timeout) {
  const Duration budget = until - MonotonicClock::now();
  if (budget <= Duration::zero() || stop.stop_requested()) return WatchEnd::kEnded;
  grpc::ClientContext context;
  context.set_deadline(WallDeadline(budget));
  context.AddMetadata("hasleader", "true");
  if (!token.empty()) context.AddMetadata("token", token);
  std::stop_callback cancel(stop, [&context] { context.TryCancel(); });
  auto stream = watch.Watch(&context);
  WatchEnd end = WatchEnd::kEnded;
  if (stream->Write(CreateWatch(d))) {
    end = ReadWatch(*stream, kv, d, seen_at, until, attempt_timeout, token);
  }
  context.TryCancel();
  const grpc::Status status = stream->Finish();
  if (end == WatchEnd::kEnded && !stop.stop_requested() && MonotonicClock::now() < until &&
      !status.ok() && status.error_code() != grpc::StatusCode::CANCELLED) {
    return WatchEnd::kMemberTrouble;
  }
  return end;
}

}  // namespace

// The lease keep-alive stream, on gRPC's callback API: keep-alives are sent
// without blocking the caller, and answered in order (etcd serves one stream
// sequentially), so each answer settles the oldest waiting ticket.
//
// Lifetime: the object owns itself (self_) until gRPC calls OnDone; callers
// hold shared_ptrs while they use it. A "hold" keeps OnDone away while a
// write may still be started from outside a reaction (Send); it is removed
// once the stream is closed or broken and no such write is in progress.
class KeepAliveStream final
    : public grpc::ClientBidiReactor<pb::LeaseKeepAliveRequest, pb::LeaseKeepAliveResponse> {
 public:
  struct Ticket {
    std::int64_t lease = 0;
    bool done = false;
    std::int64_t ttl = 0;
  };

  static std::shared_ptr<KeepAliveStream> Start(pb::Lease::Stub* stub, std::string address,
                                                const std::string& token) {
    std::shared_ptr<KeepAliveStream> s(new KeepAliveStream(std::move(address)));
    s->context_.AddMetadata("hasleader", "true");
    if (!token.empty()) s->context_.AddMetadata("token", token);
    s->token_ = token;
    {
      // Publishes the fields above to gRPC's threads, which take mu_ first.
      std::lock_guard l(s->mu_);
      s->self_ = s;
    }
    stub->async()->LeaseKeepAlive(&s->context_, s.get());
    s->AddHold();
    s->StartRead(&s->response_);
    s->StartCall();
    return s;
  }

  const std::string& address() const { return address_; }
  const std::string& token() const { return token_; }

  // Whether the stream ended because etcd no longer took its token.
  bool stale_token() {
    std::lock_guard l(mu_);
    return stale_token_;
  }

  // Queues one keep-alive; nullptr if the stream is broken.
  std::shared_ptr<Ticket> Send(std::int64_t lease) {
    auto ticket = std::make_shared<Ticket>();
    ticket->lease = lease;
    {
      std::lock_guard l(mu_);
      if (broken_ || outside_closed_) return nullptr;
      awaiting_.push_back(ticket);
      if (writing_) {
        queued_.push_back(lease);
        return ticket;
      }
      writing_ = true;
      request_.set_id(lease);
      ++outside_writes_;
    }
    StartWrite(&request_);
    bool remove;
    {
      std::lock_guard l(mu_);
      --outside_writes_;
      remove = TakeHoldLocked();
    }
    if (remove) RemoveHold();
    return ticket;
  }

  // Waits for `ticket`'s answer until `deadline`: the TTL, or nullopt when
  // the stream broke or stayed silent.
  std::optional<std::int64_t> Wait(const std::shared_ptr<Ticket>& ticket, TimePoint deadline) {
    std::unique_lock l(mu_);
    const auto remaining = deadline - MonotonicClock::now();
    cv_.wait_for(l, std::max(remaining, Duration::zero()),
                 [&] { return ticket->done || broken_; });
    if (ticket->done) return ticket->ttl;
    return std::nullopt;
  }

  bool broken() {
    std::lock_guard l(mu_);
    return broken_;
  }

  std::string Error() {
    std::lock_guard l(mu_);
    return error_.empty() ? "the keep-alive stream to " + address_ + " broke" : error_;
  }

  // Ends the stream (idempotent). OnDone follows on a gRPC thread.
  void Close() {
    bool remove;
    {
      std::lock_guard l(mu_);
      broken_ = true;
      outside_closed_ = true;
      remove = TakeHoldLocked();
      cv_.notify_all();
    }
    context_.TryCancel();
    if (remove) RemoveHold();
  }

  // Waits (bounded) until gRPC is done with the stream.
  void AwaitDone(Duration limit) {
    std::unique_lock l(mu_);
    cv_.wait_for(l, limit, [&] { return done_; });
  }

  bool done() {
    std::lock_guard l(mu_);
    return done_;
  }

  void OnWriteDone(bool ok) override {
    bool next = false;
    {
      std::lock_guard l(mu_);
      if (!ok) {
        broken_ = true;
        writing_ = false;
        cv_.notify_all();
      } else if (!queued_.empty() && !broken_) {
        request_.set_id(queued_.front());
        queued_.pop_front();
        next = true;
      } else {
        writing_ = false;
      }
    }
    if (next) StartWrite(&request_);
  }

  void OnReadDone(bool ok) override {
    bool remove = false;
    {
      std::lock_guard l(mu_);
      if (ok) {
        while (!awaiting_.empty()) {
          auto t = std::move(awaiting_.front());
          awaiting_.pop_front();
          if (t->lease == response_.id()) {
            t->done = true;
            t->ttl = response_.ttl();
            break;
          }
        }
      } else {
        broken_ = true;
        outside_closed_ = true;
        remove = TakeHoldLocked();
      }
      cv_.notify_all();
    }
    if (ok) StartRead(&response_);
    if (remove) RemoveHold();
  }

  void OnDone(const grpc::Status& status) override {
    std::shared_ptr<KeepAliveStream> self;
    {
      std::lock_guard l(mu_);
      done_ = true;
      broken_ = true;
      if (!status.ok()) {
        error_ = FromGrpc(status, "lease keep-alive", address_).message();
        stale_token_ = IsStaleToken(status);
      }
      awaiting_.clear();
      cv_.notify_all();
      self = std::move(self_);
    }
    // `self` may be the last reference: this object ends here.
  }

 private:
  explicit KeepAliveStream(std::string address) : address_(std::move(address)) {}

  // True exactly once: when no more writes can start from outside.
  bool TakeHoldLocked() {
    if (outside_closed_ && outside_writes_ == 0 && !hold_removed_) {
      hold_removed_ = true;
      return true;
    }
    return false;
  }

  const std::string address_;
  std::string token_;  // set before the stream starts
  grpc::ClientContext context_;
  pb::LeaseKeepAliveRequest request_;    // the write in flight
  pb::LeaseKeepAliveResponse response_;  // the read in flight

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Ticket>> awaiting_;  // sent or queued, in order
  std::deque<std::int64_t> queued_;               // not yet written
  bool writing_ = false;
  bool broken_ = false;
  bool outside_closed_ = false;
  int outside_writes_ = 0;
  bool hold_removed_ = false;
  bool done_ = false;
  bool stale_token_ = false;
  std::string error_;
  std::shared_ptr<KeepAliveStream> self_;
};

struct Connection::Endpoint {
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::KV::Stub> kv;
  std::unique_ptr<pb::Lease::Stub> lease;
  std::unique_ptr<pb::Watch::Stub> watch;
  std::unique_ptr<pb::Auth::Stub> auth;
};

// gRPC initializes itself when its first object is made and shuts down when
// its last one goes; dlock keeps it up, once started, until the process
// exits, rather than cycling through start and shutdown as clients come and
// go.
//
// gRPC's own log (TLS handshake details, connection errors) goes nowhere
// unless GRPC_VERBOSITY asks for it: what matters reaches the caller's
// one-line Status, and a command's stderr is not gRPC's.
void KeepGrpcInitialized() {
  static const bool once = [] {
    if (std::getenv("GRPC_VERBOSITY") == nullptr) gpr_set_log_function([](gpr_log_func_args*) {});
    grpc_init();
    internal::UseLeakSuppressions();  // c-ares's resolver keeps a few bytes
    return true;
  }();
  (void)once;
}

Connection::Connection(std::vector<std::string> endpoints, milliseconds request_timeout,
                       EtcdSecurity security)
    : addresses_((KeepGrpcInitialized(), std::move(endpoints))),
      security_(std::move(security)),
      request_timeout_(request_timeout),
      attempt_timeout_(std::clamp<milliseconds>(request_timeout / 3, milliseconds(200),
                                                milliseconds(2000))) {
  endpoints_.resize(addresses_.size());
}

Connection::~Connection() {
  // End every keep-alive and watch stream and wait for gRPC to be done with
  // it, so that nothing of this client runs on gRPC's threads after it is
  // gone.
  std::vector<std::shared_ptr<KeepAliveStream>> streams;
  std::vector<std::shared_ptr<WatchStream>> watch_streams;
  {
    std::lock_guard l(mu_);
    streams = std::move(streams_);
    stream_.reset();
    watch_streams = std::move(watch_streams_);
    watch_stream_.reset();
  }
  for (auto& s : streams) s->Close();
  for (auto& s : watch_streams) s->Close();
  for (auto& s : streams) s->AwaitDone(std::chrono::seconds(10));
  for (auto& s : watch_streams) s->AwaitDone(std::chrono::seconds(10));
}

namespace {

// One channel per member address, shared by every Connection in the process
// and kept until it exits. gRPC runs callback streams (the keep-alive) on a
// completion queue shared by all channels and tears it down with the last
// channel that used it; a process that opens and closes clients would cycle
// through that, and gRPC 1.51 crashes when the last reference to a channel
// goes away on one of that queue's own threads (grpc/grpc#32584; seen here
// under TSan's timing). Channels that never go away avoid all of it, and
// clients of one process share one connection per member, as a long-lived
// service would.
//
// Channels are told apart by their credentials too (`credentials_key`): a
// client opened with other (or rotated) certificates gets channels of its
// own.
std::shared_ptr<grpc::Channel> SharedChannel(
    const std::string& address, const std::string& credentials_key,
    const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  static std::mutex mu;
  static auto* channels = new std::map<std::string, std::shared_ptr<grpc::Channel>>();
  std::lock_guard l(mu);
  auto& channel = (*channels)[address + '\n' + credentials_key];
  if (!channel) {
    grpc::ChannelArguments args;
    // A member that comes back is found again within a second. (Not
    // GRPC_ARG_MIN_RECONNECT_BACKOFF_MS: gRPC takes it as the time one
    // connection handshake may take, and a loaded machine needs more.)
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    // Dead connections under long streams are noticed. etcd refuses pings
    // more often than every 5 s (GOAWAY too_many_pings).
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
    // dlock retries itself, across members.
    args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
    args.SetMaxReceiveMessageSize(64 << 20);
    channel = grpc::CreateCustomChannel(address, credentials, args);
  }
  return channel;
}

// After every member failed once: waits, doubling from 25 ms up to 250 ms,
// to give a leader election time to finish. False once `deadline` passed.
bool WaitAfterARound(milliseconds& backoff, TimePoint deadline) {
  backoff = std::clamp<milliseconds>(backoff * 2, milliseconds(25), milliseconds(250));
  const Duration left = deadline - MonotonicClock::now();
  if (left <= Duration::zero()) return false;
  std::this_thread::sleep_for(std::min<Duration>(backoff, left));
  return true;
}

}  // namespace

Connection::Endpoint& Connection::At(std::size_t index) {
  std::lock_guard l(mu_);
  auto& slot = endpoints_[index];
  if (!slot) {
    auto ep = std::make_unique<Endpoint>();
    ep->address = addresses_[index];
    if (!credentials_) credentials_ = grpc::InsecureChannelCredentials();  // not Started: tests
    ep->channel = SharedChannel(ep->address, credentials_key_, credentials_);
    ep->kv = pb::KV::NewStub(ep->channel);
    ep->lease = pb::Lease::NewStub(ep->channel);
    ep->watch = pb::Watch::NewStub(ep->channel);
    ep->auth = pb::Auth::NewStub(ep->channel);
    slot = std::move(ep);
  }
  return *slot;
}

void Connection::Rotate(std::size_t from) {
  // Only the first of several callers that saw `from` fail moves on.
  current_.compare_exchange_strong(from, (from + 1) % addresses_.size());
}

std::string Connection::EndpointList() const {
  std::string s;
  for (const auto& a : addresses_) s += (s.empty() ? "" : ",") + a;
  return s;
}

template <typename Resp, typename Fn>
Result<Resp> Connection::Call(std::string_view what, TimePoint deadline, bool require_leader,
                              Fn fn, bool with_token) {
  const std::size_t n = addresses_.size();
  std::vector<char> skip(n, 0);
  grpc::Status last;
  std::string last_address;
  // "No leader" says more than a silent member: report it if any said so.
  grpc::Status no_leader;
  std::string no_leader_address;
  std::size_t tried_this_round = 0;
  milliseconds backoff{0};
  int reauthentications = 0;
  bool reauthenticated = false;  // the call is made again with the new token, even late
  for (int attempt = 0;; ++attempt) {
    const TimePoint now = MonotonicClock::now();
    if (attempt > 0 && now >= deadline && !reauthenticated) break;
    reauthenticated = false;
    std::size_t index = current_.load() % n;
    std::size_t skipped = 0;
    while (skip[index] && skipped < n) {
      index = (index + 1) % n;
      ++skipped;
    }
    if (skipped == n) break;
    Endpoint& ep = At(index);
    grpc::ClientContext context;
    // Even a call made at its deadline gets one short try.
    const Duration budget =
        std::clamp<Duration>(deadline - now, milliseconds(50), attempt_timeout_);
    context.set_deadline(WallDeadline(budget));
    if (require_leader) context.AddMetadata("hasleader", "true");
    const std::string token = with_token ? Token() : "";
    if (!token.empty()) context.AddMetadata("token", token);
    Resp response;
    requests_sent_.fetch_add(1, std::memory_order_relaxed);
    const grpc::Status status = Annotated(fn(ep, &context, &response), security_.tls, ep.address);
    if (status.ok()) {
      looks_down_.store(false);
      return response;
    }
    if (!token.empty() && IsStaleToken(status) && reauthentications++ < 2) {
      DLOCK_RETURN_IF_ERROR(Reauthenticate(token, deadline));
      reauthenticated = true;
      continue;  // the same call again, with the new token
    }
    last = status;
    last_address = ep.address;
    if (Contains(status, "no leader")) {
      no_leader = status;
      no_leader_address = ep.address;
    }
    const Retry retry = Classify(status);
    if (retry == Retry::kNo) return FromGrpc(status, what, ep.address);
    if (retry == Retry::kOtherMember) skip[index] = 1;
    Rotate(index);
    reauthentications = 0;  // two fresh tokens for each member visited
    if (++tried_this_round >= n) {
      tried_this_round = 0;
      if (!WaitAfterARound(backoff, deadline)) break;
    }
  }
  looks_down_.store(true);
  // `last` is still OK when the time ran out right after a re-authentication
  // (no call failed, none was made again): that is no answer, not success.
  Status s = !no_leader.ok() ? FromGrpc(no_leader, what, no_leader_address)
             : !last.ok()    ? FromGrpc(last, what, last_address)
                             : UnavailableError(std::string(what) +
                                                ": the time ran out before a member answered");
  if (n > 1) {
    s = Status(s.code(), s.message() + " [no member of " + EndpointList() + " could serve it]");
  }
  return s;
}

// The TLS credentials every channel of this connection uses. The files are
// read here, once per Start, so a rotated certificate is used by the next
// client opened.
Status Connection::LoadCredentials() {
  // gRPC goes on handshaking on threads of its own after a failed call, and
  // OpenSSL's clean-up at exit frees what such a thread still uses: a
  // process exiting after a TLS failure could crash (or, under ASan, hang).
  // OpenSSL honours this only before its first initialisation; where a
  // library initialised it while loading (dlock-full links several), the
  // command skips the exit handlers instead (cli/process_exit.h).
  static const bool no_openssl_atexit =
      OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr) == 1;
  (void)no_openssl_atexit;
  std::string key = "plaintext";
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (security_.tls) {
    const internal::TlsFiles& files = security_.tls_files;
    grpc::SslCredentialsOptions ssl;
    if (!files.ca_file.empty()) {
      DLOCK_ASSIGN_OR_RETURN(ssl.pem_root_certs, internal::ReadTlsFile("cacert", files.ca_file));
    }
    if (!files.cert_file.empty()) {
      DLOCK_ASSIGN_OR_RETURN(ssl.pem_cert_chain, internal::ReadTlsFile("cert", files.cert_file));
      DLOCK_ASSIGN_OR_RETURN(ssl.pem_private_key, internal::ReadTlsFile("key", files.key_file));
    }
    // The key holds the PEM text itself: other files, other channels.
    key = "tls\n" + ssl.pem_root_certs + ssl.pem_cert_chain + ssl.pem_private_key;
    credentials = grpc::SslCredentials(ssl);
  }
  std::lock_guard l(mu_);
  credentials_key_ = std::move(key);
  credentials_ = std::move(credentials);
  return Status::Ok();
}

std::string Connection::Token() const {
  std::lock_guard l(token_mu_);
  return token_;
}

// The password for a token. etcd checks it (bcrypt) and replicates the
// token through Raft, so this takes a few milliseconds and needs a leader.
Status Connection::Authenticate(TimePoint deadline) {
  pb::AuthenticateRequest request;
  request.set_name(security_.user);
  request.set_password(security_.password);
  auto r = Call<pb::AuthenticateResponse>(
      "authenticate as '" + security_.user + "'", deadline, /*require_leader=*/true,
      [&](Endpoint& ep, grpc::ClientContext* c, pb::AuthenticateResponse* out) {
        return ep.auth->Authenticate(c, request, out);
      },
      /*with_token=*/false);
  if (!r.ok()) return r.status();
  std::lock_guard l(token_mu_);
  token_ = r->token();
  return Status::Ok();
}

Status Connection::Reauthenticate(const std::string& stale, TimePoint deadline) {
  std::lock_guard l(auth_mu_);
  if (Token() != stale) return Status::Ok();  // another thread did
  // A call at its deadline still gets to renew the token.
  return Authenticate(std::max(deadline, MonotonicClock::now() + attempt_timeout_));
}

Status Connection::Start(const std::string& probe_key, TimePoint deadline) {
  DLOCK_RETURN_IF_ERROR(LoadCredentials());
  if (!security_.user.empty()) {
    std::lock_guard l(auth_mu_);
    DLOCK_RETURN_IF_ERROR(Authenticate(deadline));
  }
  pb::RangeRequest request;
  request.set_key(probe_key);
  request.set_count_only(true);
  request.set_serializable(true);
  auto r = Call<pb::RangeResponse>(
      "connect (read " + probe_key + ")", deadline, /*require_leader=*/false,
      [&](Endpoint& ep, grpc::ClientContext* c, pb::RangeResponse* out) {
        return ep.kv->Range(c, request, out);
      });
  return r.status();
}

Result<pb::RangeResponse> Connection::Range(const pb::RangeRequest& request, TimePoint deadline) {
  return Call<pb::RangeResponse>(
      "read", deadline, true, [&](Endpoint& ep, grpc::ClientContext* c, pb::RangeResponse* out) {
        return ep.kv->Range(c, request, out);
      });
}

Result<pb::TxnResponse> Connection::Txn(const pb::TxnRequest& request, TimePoint deadline) {
  return Call<pb::TxnResponse>(
      "transaction", deadline, true,
      [&](Endpoint& ep, grpc::ClientContext* c, pb::TxnResponse* out) {
        return ep.kv->Txn(c, request, out);
      });
}

// The same failover as Call, for many calls at once: each round sends every
// call still unanswered to the current member, all in flight together; a
// call whose answer is final (OK, or an error a retry cannot change) is
// done, the others go to the next member in the next round.
std::vector<Result<pb::TxnResponse>> Connection::TxnMany(std::span<const pb::TxnRequest> requests,
                                                         TimePoint deadline) {
  std::vector<Result<pb::TxnResponse>> out(requests.size(), UnavailableError("not sent"));
  std::vector<std::size_t> todo(requests.size());
  for (std::size_t i = 0; i < todo.size(); ++i) todo[i] = i;
  const std::size_t n = addresses_.size();
  std::size_t tried_this_round = 0;
  milliseconds backoff{0};
  int reauthentications = 0;
  for (int attempt = 0; !todo.empty(); ++attempt) {
    const TimePoint now = MonotonicClock::now();
    if (attempt > 0 && now >= deadline) break;
    const std::size_t index = current_.load() % n;
    Endpoint& ep = At(index);
    const std::string token = Token();
    // A member serves a batch call by call: one attempt's time per 32 calls
    // before it counts as silent (else a large batch on a busy member would
    // time out, and be sent again, whole, to the next).
    const Duration budget = attempt_timeout_ * static_cast<int>(1 + (todo.size() - 1) / 32);
    const std::vector<grpc::Status> got = SendTxns(
        ep, requests, todo, std::clamp<Duration>(deadline - now, milliseconds(50), budget), out);
    std::vector<std::size_t> again;
    bool stale = false;
    for (std::size_t k = 0; k < todo.size(); ++k) {
      const grpc::Status status = Annotated(got[k], security_.tls, ep.address);
      if (status.ok()) continue;
      stale = stale || (!token.empty() && IsStaleToken(status));
      if (Classify(status) == Retry::kNo) {
        out[todo[k]] = FromGrpc(status, "transaction", ep.address);
        continue;
      }
      out[todo[k]] = FromGrpc(status, "transaction", ep.address);
      again.push_back(todo[k]);
    }
    if (again.size() < todo.size()) looks_down_.store(false);
    todo = std::move(again);
    if (todo.empty()) break;
    if (stale && reauthentications++ < 2) {
      if (Status s = Reauthenticate(token, deadline); !s.ok()) {
        for (std::size_t i : todo) out[i] = s;
        return out;
      }
      continue;  // the same member, with the new token
    }
    Rotate(index);
    reauthentications = 0;  // two fresh tokens for each member visited
    if (++tried_this_round >= n) {
      tried_this_round = 0;
      if (!WaitAfterARound(backoff, deadline)) break;
    }
  }
  if (todo.empty()) return out;
  looks_down_.store(true);
  for (std::size_t i : todo) {
    if (n > 1) {
      out[i] = Status(out[i].status().code(), out[i].status().message() + " [no member of " +
                                                  EndpointList() + " could serve it]");
    }
  }
  return out;
}

std::vector<grpc::Status> Connection::SendTxns(Endpoint& ep,
                                               std::span<const pb::TxnRequest> requests,
                                               const std::vector<std::size_t>& todo,
                                               Duration budget,
                                               std::vector<Result<pb::TxnResponse>>& out) {
  struct InFlight {
    grpc::ClientContext context;
    pb::TxnResponse response;
    grpc::Status status;
  };
  std::vector<InFlight> calls(todo.size());
  std::mutex mu;
  std::condition_variable cv;
  std::size_t left = todo.size();
  const std::string token = Token();
  for (std::size_t k = 0; k < todo.size(); ++k) {
    InFlight& c = calls[k];
    c.context.set_deadline(WallDeadline(budget));
    c.context.AddMetadata("hasleader", "true");
    if (!token.empty()) c.context.AddMetadata("token", token);
    requests_sent_.fetch_add(1, std::memory_order_relaxed);
    // Runs on one of gRPC's threads; the answer is read here once all came.
    ep.kv->async()->Txn(&c.context, &requests[todo[k]], &c.response,
                        [&c, &mu, &cv, &left](grpc::Status status) {
                          c.status = std::move(status);
                          std::lock_guard l(mu);
                          if (--left == 0) cv.notify_all();
                        });
  }
  // Every call ends by its context's deadline at the latest.
  std::unique_lock l(mu);
  cv.wait(l, [&] { return left == 0; });
  std::vector<grpc::Status> statuses;
  statuses.reserve(calls.size());
  for (std::size_t k = 0; k < calls.size(); ++k) {
    if (calls[k].status.ok()) out[todo[k]] = std::move(calls[k].response);
    statuses.push_back(std::move(calls[k].status));
  }
  return statuses;
}

Result<pb::LeaseGrantResponse> Connection::LeaseGrant(std::int64_t ttl_seconds,
                                                      TimePoint deadline) {
  pb::LeaseGrantRequest request;
  request.set_ttl(ttl_seconds);
  return Call<pb::LeaseGrantResponse>(
      "lease grant", deadline, true,
      [&](Endpoint& ep, grpc::ClientContext* c, pb::LeaseGrantResponse* out) {
        return ep.lease->LeaseGrant(c, request, out);
      });
}

Status Connection::LeaseRevoke(std::int64_t lease, TimePoint deadline) {
  pb::LeaseRevokeRequest request;
  request.set_id(lease);
  auto r = Call<pb::LeaseRevokeResponse>(
      "lease revoke", deadline, true,
      [&](Endpoint& ep, grpc::ClientContext* c, pb::LeaseRevokeResponse* out) {
        return ep.lease->LeaseRevoke(c, request, out);
      });
  return r.status();
}

Result<pb::LeaseTimeToLiveResponse> Connection::LeaseTimeToLive(std::int64_t lease,
                                                                TimePoint deadline) {
  pb::LeaseTimeToLiveRequest request;
  request.set_id(lease);
  return Call<pb::LeaseTimeToLiveResponse>(
      "lease time-to-live", deadline, true,
      [&](Endpoint& ep, grpc::ClientContext* c, pb::LeaseTimeToLiveResponse* out) {
        return ep.lease->LeaseTimeToLive(c, request, out);
      });
}

std::shared_ptr<KeepAliveStream> Connection::CurrentStream() {
  const std::size_t index = current_.load() % addresses_.size();
  Endpoint& ep = At(index);
  std::shared_ptr<KeepAliveStream> old;
  std::shared_ptr<KeepAliveStream> fresh;
  {
    std::lock_guard l(mu_);
    if (stream_ && !stream_->broken()) return stream_;
    old = std::move(stream_);
    stream_ = fresh = KeepAliveStream::Start(ep.lease.get(), ep.address, Token());
    std::erase_if(streams_, [](const auto& st) { return st->done(); });
    streams_.push_back(fresh);
  }
  if (old) old->Close();
  return fresh;
}

KeepAliveCall Connection::SendKeepAlive(std::int64_t lease) {
  KeepAliveCall call;
  call.lease = lease;
  call.stream = CurrentStream();
  requests_sent_.fetch_add(1, std::memory_order_relaxed);
  call.ticket = call.stream->Send(lease);
  return call;
}

Result<std::int64_t> Connection::AwaitKeepAlive(KeepAliveCall& call, TimePoint deadline) {
  std::string error = "no member answered the keep-alive";
  milliseconds backoff{0};
  for (int attempt = 0;; ++attempt) {
    if (call.ticket) {
      auto ticket = std::static_pointer_cast<KeepAliveStream::Ticket>(call.ticket);
      const TimePoint now = MonotonicClock::now();
      const TimePoint until =
          std::max(std::min(deadline, now + attempt_timeout_), now + milliseconds(50));
      if (auto ttl = call.stream->Wait(ticket, until)) {
        looks_down_.store(false);
        return *ttl;
      }
      error = call.stream->broken()
                  ? call.stream->Error()
                  : "etcd unavailable: no keep-alive answer from " + call.stream->address() +
                        " in time (member stopped, overloaded or cut off?)";
      // Silent or broken: this stream is done; the next one goes elsewhere,
      // or, if etcd no longer took its token, with a new one.
      call.stream->Close();
      if (call.stream->stale_token()) {
        DLOCK_RETURN_IF_ERROR(Reauthenticate(call.stream->token(), deadline));
      } else {
        for (std::size_t i = 0; i < addresses_.size(); ++i) {
          if (addresses_[i] == call.stream->address()) Rotate(i);
        }
      }
    }
    const Duration left = deadline - MonotonicClock::now();
    if (left <= Duration::zero()) break;
    if (attempt > 0) {
      backoff = std::clamp<milliseconds>(backoff * 2, milliseconds(25), milliseconds(250));
      std::this_thread::sleep_for(std::min<Duration>(backoff, left));
    }
    call = SendKeepAlive(call.lease);
  }
  looks_down_.store(true);
  return UnavailableError(error);
}

bool Connection::WaitForDelete(const std::string& key, std::int64_t revision,
                               std::int64_t seen_at, TimePoint until, std::stop_token stop) {
  return Watch(key, "", revision, 0, seen_at, until, std::move(stop));
}

bool Connection::WaitForDeleteIn(const std::string& key, const std::string& range_end,
                                 std::int64_t max_create_revision, std::int64_t expected,
                                 std::int64_t seen_at, TimePoint until, std::stop_token stop) {
  return Watch(key, range_end, max_create_revision, expected, seen_at, until, std::move(stop));
}

// One key (range_end empty: `revision` is its create_revision) or a range
// (`revision`: the newest create_revision that counts, `expected` how many
// keys up to it there were).
bool Connection::Watch(const std::string& key, const std::string& range_end,
                       std::int64_t revision, std::int64_t expected, std::int64_t seen_at,
                       TimePoint until, std::stop_token stop) {
  const Deletion target{key, range_end, revision, expected};
  for (int tries = 0;; ++tries) {
    const std::size_t index = current_.load() % addresses_.size();
    Endpoint& ep = At(index);
    const std::string token = Token();
    const WatchEnd end =
        WatchOnce(*ep.watch, *ep.kv, target, seen_at, until, stop, token, attempt_timeout_);
    // A member that cannot keep a watch open (stopped, lost its leader) is
    // not the one to use next.
    if (end == WatchEnd::kMemberTrouble) Rotate(index);
    // Refused with a token: it may have expired; once more with a new one.
    if (end == WatchEnd::kRefused && !token.empty() && tries == 0 &&
        Reauthenticate(token, until).ok()) {
      continue;
    }
    return end == WatchEnd::kGone;
  }
}

DeleteNotice Connection::NotifyOnDelete(const std::string& key, std::int64_t revision,
                                        std::int64_t seen_at, std::function<void()> wake) {
  return Notice(Deletion{key, "", revision, 0}, seen_at, std::move(wake));
}

DeleteNotice Connection::NotifyOnDeleteIn(const std::string& key, const std::string& range_end,
                                          std::int64_t max_create_revision, std::int64_t expected,
                                          std::int64_t seen_at, std::function<void()> wake) {
  return Notice(Deletion{key, range_end, max_create_revision, expected}, seen_at, std::move(wake));
}

DeleteNotice Connection::Notice(const Deletion& d, std::int64_t seen_at,
                                std::function<void()> wake) {
  // A stream that broke just now takes nothing: once more on a new one.
  for (int tries = 0; tries < 2; ++tries) {
    std::shared_ptr<WatchStream> stream = CurrentWatchStream();
    if (const std::int64_t id = stream->Add(d, seen_at, wake)) return {std::move(stream), id};
  }
  return {};
}

std::function<void()> Connection::StopNotice(DeleteNotice& notice) {
  const DeleteNotice n = std::exchange(notice, {});
  if (!n) return {};
  return n.stream->Remove(n.id);
}

NoticeCounts Connection::Notices() {
  std::vector<std::shared_ptr<WatchStream>> streams;
  {
    std::lock_guard l(mu_);
    streams = watch_streams_;
  }
  NoticeCounts counts;
  for (const auto& s : streams) {
    if (s->done()) continue;
    ++counts.streams;
    counts.registered += s->registered();
    counts.open_at_store += s->open_at_store();
  }
  return counts;
}

// The stream new watches go on: the one in use while it is sound and on the
// current member (the one requests last found serving: a member they left,
// paused or cut off, may keep a stream open and silent for a while); else a
// new one there, with a new token if etcd no longer took the old one. A
// stream left behind serves its watches until they fire or stop; it is
// closed at the next change if it has none left, else with the connection.
std::shared_ptr<WatchStream> Connection::CurrentWatchStream() {
  const std::size_t index = current_.load() % addresses_.size();
  auto usable = [&] {
    return watch_stream_ && !watch_stream_->broken() &&
           watch_stream_->address() == addresses_[index];
  };
  std::shared_ptr<WatchStream> refused;
  {
    std::lock_guard l(mu_);
    if (usable()) return watch_stream_;
    if (watch_stream_ && watch_stream_->stale_token()) refused = watch_stream_;
  }
  if (refused) (void)Reauthenticate(refused->token(), MonotonicClock::now() + attempt_timeout_);
  Endpoint& ep = At(index);
  std::vector<std::shared_ptr<WatchStream>> idle;
  std::shared_ptr<WatchStream> fresh;
  {
    std::lock_guard l(mu_);
    if (usable()) return watch_stream_;  // another thread's
    watch_stream_ = fresh =
        WatchStream::Start(*ep.watch, *ep.kv, ep.address, Token(), attempt_timeout_);
    std::erase_if(watch_streams_, [](const auto& st) { return st->done(); });
    for (const auto& st : watch_streams_) {
      if (st->registered() == 0) idle.push_back(st);
    }
    watch_streams_.push_back(watch_stream_);
  }
  for (const auto& st : idle) st->Close();
  return fresh;
}

}  // namespace dlock::etcd

#if defined(__SANITIZE_THREAD__)
// Under ThreadSanitizer (-DDLOCK_SANITIZE=thread): gRPC, abseil, protobuf and
// OpenSSL come from Debian, built without TSan, so their own synchronization
// (absl::Mutex spinlocks, gpr atomics) is invisible to it, and it reports
// their internals racing with themselves. Reports with a frame inside those
// libraries are suppressed; dlock's own code stays checked
// (every field the gRPC callbacks share with dlock's threads is guarded by
// dlock's own mutexes).
// Default visibility: the sanitizer runtime finds these by name at run time,
// and libdlock is built with hidden visibility (docs/install.md).
extern "C" [[gnu::visibility("default")]] const char* __tsan_default_suppressions() {
  return "race:libabsl_*\n"
         "race:libgrpc*\n"
         "race:libgpr*\n"
         "race:libprotobuf*\n"
         "race:libupb*\n"
         // OpenSSL (etcds://), used by gRPC with its own locking.
         "race:libcrypto.so*\n"
         "race:libssl.so*\n"
         // libfaketime (preloaded by `dlock chaos` for clock steps) races
         // with itself while reading its configuration.
         "race:libfaketime*\n"
         // gRPC's inline code in dlock's binary copying bytes that gRPC
         // itself wrote (unseen by TSan) into memory TSan last saw used by
         // another thread: a status message, a received message.
         "race:grpc::internal::CallOpClientRecvStatus::FinishOp\n"
         "race:grpc::internal::CallOpRecvMessage\n"
         "race:grpc::internal::CallOpRecvInitialMetadata\n"
         // gRPC's own threads (completion-queue pollers), not joined at exit.
         "thread:grpc_core::Thread::Thread\n";
}
#endif

