// ZooKeeper's pipelined-write floor for dlock_bench_async's distinct mode:
// on one session of the C client dlock uses, an ephemeral create and then a
// delete of its own node per key (the writes a grant and a release make:
// a lock node made, a lock node gone), with up to 256 requests in flight at
// once, as many as one batch of dlock's asynchronous API (CallBatcher's
// kMaxBatch). Each is a write the leader orders and a quorum logs.
#include <zookeeper/zookeeper.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "async_floor.h"
#include "backends/zookeeper/zookeeper_backend.h"
#include "core/credentials.h"
#include "core/uri.h"

namespace dlock::bench {
namespace {

constexpr int kInFlight = 256;
constexpr int kTimeoutMs = 30000;

// The requests in flight, and a wait for room or for the last answer.
struct Window {
  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0;
  int failed = 0;

  void Take() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return in_flight < kInFlight; });
    ++in_flight;
  }
  void Done(int rc) {
    {
      std::lock_guard lock(mu);
      --in_flight;
      if (rc != ZOK) ++failed;
    }
    cv.notify_all();
  }
  void Drain() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return in_flight == 0; });
  }
};

void OnCreate(int rc, const char*, const void* w) {
  static_cast<Window*>(const_cast<void*>(w))->Done(rc);
}
void OnDelete(int rc, const void* w) { static_cast<Window*>(const_cast<void*>(w))->Done(rc); }

bool Connected(zhandle_t* zh) {
  for (int i = 0; i < kTimeoutMs / 10; ++i) {
    if (zoo_state(zh) == ZOO_CONNECTED_STATE) return true;
    usleep(10'000);
  }
  return false;
}

}  // namespace

std::optional<WriteFloor> ZooKeeperWriteFloor(std::string_view text, int writes) {
  auto uri = internal::ParseUri(text);
  if (!uri.ok() || !internal::ResolveCredentials(*uri).ok()) return std::nullopt;
  auto options = zookeeper::OptionsFromUri(*uri);
  if (!options.ok()) return std::nullopt;
  zoo_set_debug_level(static_cast<ZooLogLevel>(0));
  zhandle_t* zh = zookeeper_init(options->hosts.c_str(), nullptr, kTimeoutMs, nullptr, nullptr, 0);
  if (zh == nullptr) return std::nullopt;
  std::optional<WriteFloor> out;
  const auto& id = options->identity;
  const std::string cert = id.user + ":" + id.password;
  if (Connected(zh) &&
      (id.user.empty() || zoo_add_auth(zh, "digest", cert.data(), static_cast<int>(cert.size()),
                                       nullptr, nullptr) == ZOK)) {
    const ACL_vector* acl = id.user.empty() ? &ZOO_OPEN_ACL_UNSAFE : &ZOO_CREATOR_ALL_ACL;
    // Under the chroot, which dlock's own run made.
    const std::string prefix = options->chroot + "/floor-" + std::to_string(getpid()) + "-";
    const int keys = std::max(1, writes / 2);
    std::vector<std::string> paths;
    paths.reserve(keys);
    for (int i = 0; i < keys; ++i) paths.push_back(prefix + std::to_string(i));
    Window w;
    const auto start = std::chrono::steady_clock::now();
    // Creates and deletes share the window; a delete follows its create on
    // the session, so it finds the node.
    for (const std::string& p : paths) {
      w.Take();
      if (zoo_acreate(zh, p.c_str(), "", 0, acl, ZOO_EPHEMERAL, OnCreate, &w) != ZOK) w.Done(-1);
      w.Take();
      if (zoo_adelete(zh, p.c_str(), -1, OnDelete, &w) != ZOK) w.Done(-1);
    }
    w.Drain();
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (w.failed == 0) {
      out = WriteFloor{2.0 * keys / s,
                       "ephemeral create + delete of one znode per key, " +
                           std::to_string(kInFlight) + " in flight on one session"};
    } else {
      std::fprintf(stderr, "dlock_bench_async: %d of the floor's writes failed\n", w.failed);
    }
  }
  zookeeper_close(zh);
  return out;
}

}  // namespace dlock::bench
