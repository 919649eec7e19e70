#include "dlock/client.h"

#include <algorithm>
#include <cstdlib>

#include "core/call_batcher.h"
#include "core/client_core.h"
#include "core/registry.h"

namespace dlock {
namespace {

// Percent-encodes the characters that would end or escape a URI path.
std::string PathToUri(const std::string& path) {
  std::string out = "sqlite://";
  for (char c : path) {
    if (c == '%' || c == '?' || c == '#') {
      static const char* kHex = "0123456789ABCDEF";
      out += '%';
      out += kHex[(static_cast<unsigned char>(c) >> 4) & 0xF];
      out += kHex[static_cast<unsigned char>(c) & 0xF];
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

Result<std::uint64_t> ParseSession(std::string_view hex) {
  auto bad = [&] {
    return InvalidArgumentError("DLOCK_SESSION '" + std::string(hex.substr(0, 40)) +
                                "' is not a session id: 16 hex digits (as `dlock exec` sets it)");
  };
  if (hex.size() != 16) return bad();
  std::uint64_t v = 0;
  for (char c : hex) {
    int d = (c >= '0' && c <= '9') ? c - '0'
            : (c >= 'a' && c <= 'f') ? c - 'a' + 10
            : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                     : -1;
    if (d < 0) return bad();
    v = (v << 4) | static_cast<std::uint64_t>(d);
  }
  if (v == 0) return bad();
  return v;
}

Result<DefaultBackend> ResolveDefaultBackend() {
  if (const char* env = std::getenv("DLOCK_BACKEND"); env && *env) {
    return DefaultBackend{env, "DLOCK_BACKEND"};
  }
  // XDG says a relative XDG_STATE_HOME is invalid and must be ignored.
  if (const char* xdg = std::getenv("XDG_STATE_HOME"); xdg && xdg[0] == '/') {
    return DefaultBackend{PathToUri(std::string(xdg) + "/dlock/locks.db"), "default"};
  }
  if (const char* home = std::getenv("HOME"); home && home[0] == '/') {
    return DefaultBackend{PathToUri(std::string(home) + "/.local/state/dlock/locks.db"),
                          "default"};
  }
  return InvalidArgumentError(
      "no place for the default lock database: set DLOCK_BACKEND to a store URI, or "
      "XDG_STATE_HOME or HOME to an absolute path");
}

Client::Client(std::shared_ptr<internal::ClientCore> core) : core_(std::move(core)) {}
Client::~Client() { core_->StopAsync(); }

Result<std::unique_ptr<Client>> Client::Connect(std::string_view uri, ClientOptions options) {
  std::string chosen(uri);
  bool is_default = false;
  std::string source;
  if (chosen.empty()) {
    DLOCK_ASSIGN_OR_RETURN(auto resolved, ResolveDefaultBackend());
    chosen = resolved.uri;
    source = resolved.source;
    is_default = source == "default";
  }
  if (!options.session) {
    if (const char* env = std::getenv("DLOCK_SESSION"); env && *env) {
      DLOCK_ASSIGN_OR_RETURN(options.session, ParseSession(env));
    }
  }
  internal::BackendParams params;
  params.clock = options.clock ? options.clock : DefaultClock();
  params.connect_timeout = options.connect_timeout;
  params.is_default = is_default;
  auto backend = internal::OpenBackend(chosen, params);
  if (!backend.ok()) {
    return source == "DLOCK_BACKEND" ? backend.status().WithContext("DLOCK_BACKEND")
                                     : backend.status();
  }
  return FromBackend(std::move(*backend), std::move(options));
}

std::unique_ptr<Client> Client::FromBackend(std::unique_ptr<Backend> backend,
                                            ClientOptions options) {
  auto core = std::make_shared<internal::ClientCore>(std::move(backend), std::move(options));
  core->Start();
  return std::unique_ptr<Client>(new Client(std::move(core)));
}

Result<Lease> Client::Acquire(std::string_view key, const AcquireOptions& options) {
  return core_->Acquire(key, options, /*wait=*/true);
}

Result<Lease> Client::TryAcquire(std::string_view key, const AcquireOptions& options) {
  return core_->Acquire(key, options, /*wait=*/false);
}

Result<std::vector<Lease>> Client::AcquireAll(std::vector<std::string> keys,
                                              const AcquireOptions& options) {
  return core_->AcquireAll(std::move(keys), options);
}

Result<bool> Client::IsDone(std::string_view key) { return core_->IsDone(key); }

Status Client::MarkDone(const Lease& lease, std::chrono::milliseconds keep) {
  DLOCK_RETURN_IF_ERROR(lease.Check());  // empty, released, or lost
  return core_->MarkDone(*lease.state_, keep);
}

Result<bool> Client::RunOnce(std::string_view key, const AcquireOptions& options,
                             const std::function<Status()>& job, std::chrono::milliseconds keep) {
  DLOCK_RETURN_IF_ERROR(ValidateRetention(keep).WithContext("run once " + std::string(key)));
  auto done = IsDone(key);
  if (!done.ok()) return done.status();
  if (*done) return false;
  auto lease = Acquire(key, options);
  if (!lease.ok()) return lease.status();
  // Someone may have finished while we waited for the lock.
  done = IsDone(key);
  if (!done.ok() || *done) {
    (void)lease->Release();
    if (!done.ok()) return done.status();
    return false;
  }
  Status ran = job();
  if (!ran.ok()) {
    (void)lease->Release();
    return ran;  // not marked: the next caller runs it again
  }
  Status marked = MarkDone(*lease, keep);
  (void)lease->Release();  // a failed release expires by itself; the run is recorded
  if (!marked.ok()) return marked;
  return true;
}

Result<BreakReport> Client::Break(std::string_view key, const BreakOptions& options) {
  return core_->Break(key, options);
}

Result<std::vector<BreakRecord>> Client::Breaks(std::string_view prefix) {
  return core_->Breaks(prefix);
}

Result<std::vector<HolderInfo>> Client::List(std::string_view prefix) {
  return core_->List(prefix);
}

Result<std::vector<WaiterInfo>> Client::Waiters(std::string_view prefix) {
  return core_->Waiters(prefix);
}

Result<Lease> Client::Campaign(std::string_view key, const AcquireOptions& options) {
  if (options.shared || options.permits != 1) {
    return InvalidArgumentError("an election has one leader: Campaign takes no shared/permits");
  }
  return core_->Acquire(key, options, /*wait=*/true);
}

Result<std::optional<Leader>> Client::CurrentLeader(std::string_view key) {
  return core_->CurrentLeader(key);
}

Result<std::optional<Leader>> Client::AwaitLeader(std::string_view key, FencingToken after_term,
                                                  std::chrono::milliseconds wait,
                                                  std::stop_token cancel) {
  return core_->AwaitLeader(key, after_term, wait, std::move(cancel));
}

std::string Client::Describe() const { return core_->Describe(); }

std::uint64_t Client::Session() const { return core_->Session(); }

Status Client::Ping() { return core_->Ping(); }

ClientMetrics Client::Metrics() const { return core_->Metrics(); }

}  // namespace dlock
