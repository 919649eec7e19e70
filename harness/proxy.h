// A TCP fault proxy on loopback: one per chaos worker, between the worker and
// a network store, so that one client can be partitioned from the store, or
// see its messages delayed or its connections dropped, while the others
// carry on. No traffic leaves 127.0.0.1.
//
// Thread-safety: SetMode may be called from any thread; the proxy runs its
// own thread.
#ifndef DLOCK_HARNESS_PROXY_H_
#define DLOCK_HARNESS_PROXY_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "dlock/status.h"

namespace dlock::harness {

class FaultProxy {
 public:
  enum class Mode {
    kPass,       // forward everything
    kPartition,  // forward nothing (bytes wait, connections stay open), as a
                 // network partition that heals before TCP gives up
    kDelay,      // forward each chunk after `delay`
    kDrop,       // reset every connection and refuse new ones
    kHoldReplies,  // forward the client's bytes, hold the store's: a request
                   // is applied while its answer is lost on the way back
  };

  // Names who a connection comes from, from its first bytes: nullopt while
  // it needs more, "" for nobody in particular.
  using Tagger = std::function<std::optional<std::string>(std::string_view head)>;

  // Listens on 127.0.0.1:listen_port (0: a free port) and forwards to
  // target_host:target_port. With a tagger, a connection's bytes wait until
  // it has named the connection, so that SetTagMode applies from the first.
  static Result<std::unique_ptr<FaultProxy>> Start(const std::string& target_host,
                                                   int target_port, int listen_port = 0,
                                                   Tagger tagger = {});
  ~FaultProxy();

  int port() const { return port_; }
  // Returns once the proxy works in `mode`.
  void SetMode(Mode mode, std::chrono::milliseconds delay = std::chrono::milliseconds(0));
  // The connections tagged `tag` in `mode` (kPass, kPartition or
  // kHoldReplies), whatever SetMode says; nullopt: as SetMode says.
  void SetTagMode(const std::string& tag, std::optional<Mode> mode);

 private:
  FaultProxy() = default;
  void Loop();
  // Until the loop works with what was just set.
  void WaitForLoop();

  int listen_fd_ = -1;
  int wake_fd_ = -1;
  int port_ = 0;
  std::string target_host_;
  int target_port_ = 0;
  std::atomic<int> mode_{0};
  std::atomic<std::int64_t> delay_ns_{0};
  std::atomic<std::uint64_t> modes_set_{0};   // SetMode calls so far
  std::atomic<std::uint64_t> modes_seen_{0};  // of those, the loop acts on
  std::atomic<bool> stop_{false};
  Tagger tagger_;  // set before the loop starts
  std::mutex tag_mu_;
  std::map<std::string, Mode> tag_modes_;  // guarded by tag_mu_
  std::thread thread_;
};

}  // namespace dlock::harness

#endif  // DLOCK_HARNESS_PROXY_H_
