// Subscriber: one pub/sub connection per backend, shared by all its waits.
//
// One thread at a time holds the reader role: it sends SUBSCRIBE and
// UNSUBSCRIBE for the channels wanted, polls the socket, and counts and
// dispatches the messages to the waiters of each channel. While somebody
// waits, a waiting thread holds the role itself (leader/follower), so that
// the message that ends its wait wakes it straight from poll(), with no hop
// through another thread; the other waiters sleep on a condition variable
// and take the role when it is released. While nobody waits, a background
// thread holds it (keeping subscriptions read and dropping unused ones), and
// it also makes the connection and remakes it after a failure. An eventfd
// interrupts the holder's poll() when a new channel is wanted or a waiter
// wants the role.
//
// Wake-ups are targeted: a message's payload is the owner id of the waiter
// whose turn it is (alone, or followed by ":" and what a grant on release
// tells it), and only that waiter wakes (no thundering herd).
//
// No lost wake-ups: a message only counts for an attempt that was sent
// after the subscription was confirmed. The backend takes a Ticket (the
// channel's subscription epoch and message count) just before it sends a
// refused attempt; Wait(ticket) returns as soon as anything was published
// after that, or the subscription was lost (reconnect: messages may have
// been missed, so everybody retries). Without a ticket, Wait returns once
// the channel is subscribed, and the caller's next attempt is covered.
//
// A channel nobody waited on for a while is unsubscribed; while no channel
// is wanted, a lost connection is not made again (a subscriber of a node
// that died does not try it forever). When the connection cannot be made,
// Wait reports kDown and the caller polls.
//
// A waiter without a thread (the asynchronous API) registers a callback
// with Watch, with the same ticket and target: the thread that holds the
// reader role calls it, outside mu_, once Wait would have returned. Such
// watches count as no waiter for the role: while only they exist, the
// background thread reads and dispatches. They are kept by channel and
// target, so that a message costs a look-up, not a pass over the watches.
//
// A subscription the server refuses (NOPERM: an ACL without the channel or
// the command; CLUSTERDOWN) is not a wake-up: Wait reports kDown, so that
// the caller polls with backoff rather than retrying at once, and the
// subscription is asked for again after a pause (1 s, doubled up to 30 s).
// `on_refused` hears the server's error once.
//
// Sharded (Redis Cluster): SSUBSCRIBE on the node that serves the channel's
// hash slot, one subscriber per node. When the slot leaves the node (the
// node says so with an unasked SUNSUBSCRIBE, or answers SSUBSCRIBE with
// MOVED), the channel is dropped here, its waiters wake (they attempt
// again, and their next wait finds the slot's new node), and `on_moved`
// tells the owner that its slot map is out of date.
//
// Thread-safety: all public methods may be called from any thread.
#ifndef DLOCK_SRC_BACKENDS_REDIS_REDIS_SUBSCRIBER_H_
#define DLOCK_SRC_BACKENDS_REDIS_REDIS_SUBSCRIBER_H_

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "backends/redis/redis_conn.h"

namespace dlock::redis {

class Subscriber {
 public:
  using Connect = std::function<Result<std::unique_ptr<Connection>>()>;
  using SteadyTime = std::chrono::steady_clock::time_point;

  struct Ticket {
    std::uint64_t epoch = 0;
    std::uint64_t messages = 0;
  };
  enum class Outcome { kWoken, kTimedOut, kStopped, kDown };
  enum class Mode { kClassic, kSharded };

  explicit Subscriber(Connect connect, Mode mode = Mode::kClassic,
                      std::function<void()> on_moved = {},
                      std::function<void(const std::string&)> on_refused = {});
  ~Subscriber();
  Subscriber(const Subscriber&) = delete;
  Subscriber& operator=(const Subscriber&) = delete;

  // The channel's state now if the server has confirmed the subscription;
  // asks for the subscription (and keeps it alive) either way.
  std::optional<Ticket> Current(const std::string& channel);

  // Messages name the waiter (owner id) they are for; with a non-empty
  // `target` only those, and a lost subscription, wake this wait. A message
  // "<target>:<more>" (a grant on release) also wakes it, and <more> is
  // stored in `*message` when that is given.
  Outcome Wait(const std::string& channel, std::optional<Ticket> ticket,
               const std::string& target, SteadyTime deadline, std::stop_token stop,
               std::string* message = nullptr);

  // Wait without a thread: `wake` runs once, on the thread that holds the
  // reader role (never inside Watch), when Wait with these arguments would
  // return kWoken, or kDown after the subscription was lost; its argument
  // is what a grant message for the target said ("" if none). 0 (and no
  // call) when Wait would report kDown now: the caller polls.
  using Wake = std::function<void(std::string_view grant)>;
  std::uint64_t Watch(const std::string& channel, std::optional<Ticket> ticket,
                      const std::string& target, Wake wake);
  // Drops watch `id`: once it returns, its `wake` is not running on
  // another thread and never will. Idempotent.
  void Unwatch(std::uint64_t id);
  // Watches registered or about to be called (for tests).
  std::size_t Watches();

  // How long an unused channel stays subscribed.
  static constexpr std::chrono::seconds kLinger{10};

 private:
  enum class State { kNone, kSubscribing, kSubscribed, kUnsubscribing };
  struct Channel {
    bool wanted = true;
    State state = State::kNone;
    std::uint64_t epoch = 0;
    std::uint64_t messages = 0;
    int waiters = 0;
    // Sharded: the channel's slot left this node; its waiters go elsewhere.
    bool gone = false;
    SteadyTime last_used;
    // The payloads of the last kRecent messages, by message number.
    std::array<std::string, 32> recent;
    // Watch ids by target.
    std::multimap<std::string, std::uint64_t> watchers;
  };
  static constexpr std::uint64_t kRecent = 32;
  struct Watcher {
    std::string channel;
    std::string target;
    Wake wake;
  };
  // A watch whose time came: called by DispatchLocked.
  struct Fired {
    std::uint64_t id = 0;
    Wake wake;
    std::string grant;
  };
  static bool Unused(const Channel& ch) { return ch.waiters == 0 && ch.watchers.empty(); }

  void Run();
  void WakeReader();
  // Holds the reader role for one poll, up to `until`: sends what
  // PlanCommands says, reads and dispatches what arrived. Called and
  // returns with `lock` held.
  void ReadTurn(std::unique_lock<std::mutex>& lock, SteadyTime until, bool background);
  void Changed();  // under mu_: something a waiter may be waiting for changed
  bool BackgroundMustAct() const;  // under mu_
  // Under mu_: what the reader must send now.
  void PlanCommands(std::vector<Command>* out, SteadyTime now);
  void HandleReply(const redisReply* r);
  // An error reply to (S)SUBSCRIBE: a redirection names the slot whose
  // channels go elsewhere; anything else is a refusal.
  void HandleError(std::string_view error);
  // Under mu_: the server refuses subscriptions for now.
  bool RefusedLocked(SteadyTime now) const { return now < refused_until_; }
  // Under mu_: the channel's slot left this node.
  void GoneLocked(Channel& ch);
  // Under mu_: a waiter or an attempt wants `ch` (again).
  void WantLocked(Channel& ch);
  void ConnectionLostLocked();
  // Under mu_: whether a wait on `ch` with `ticket` for `target` is over;
  // a grant message's text goes to `*message` when that is given.
  bool ReadyLocked(const Channel& ch, const std::optional<Ticket>& ticket,
                   const std::string& target, std::string* message) const;
  // Under mu_: the watch leaves the registry; its callback (empty if it
  // was not registered) is returned.
  Wake TakeWatchLocked(std::uint64_t id);
  // Under mu_: moves watches whose wait is over to fired_.
  void FireLocked(std::uint64_t id, std::string grant = {});
  void FireMessageLocked(Channel& ch, const std::string& payload);
  void FireChannelLocked(Channel& ch);
  void FireAllLocked();
  // Calls what fired_ holds, outside mu_, unless another thread is at it
  // (which comes back for them). Called and returns with `lock` held.
  void DispatchLocked(std::unique_lock<std::mutex>& lock);

  const Connect connect_;
  const Mode mode_;
  const std::function<void()> on_moved_;
  const std::function<void(const std::string&)> on_refused_;
  int event_fd_ = -1;

  std::mutex mu_;
  std::condition_variable_any cv_;  // waiters: a message, the role released, ...
  // The background thread: only when it may have to act (nobody waits any
  // more, the connection is lost, stop), so that it is not woken on the
  // hand-off path while a waiter leads.
  std::condition_variable bg_cv_;
  std::map<std::string, Channel> channels_;
  std::uint64_t next_epoch_ = 1;
  bool down_ = false;
  bool stopping_ = false;
  bool reading_ = false;     // the reader role is held
  bool bg_reading_ = false;  // ... by the background thread
  int active_waiters_ = 0;
  std::uint64_t changes_ = 0;  // bumped by Changed()
  // After a refused subscription: none asked for before refused_until_,
  // the pause doubling at each refusal; the refusal was reported.
  SteadyTime refused_until_{};
  std::chrono::milliseconds refused_pause_{1000};
  bool refusal_reported_ = false;
  // Watches: registered ones by id, those whose time came, and the ids
  // the dispatcher (a thread, while it calls them) has in hand.
  std::map<std::uint64_t, Watcher> watches_;
  std::uint64_t next_watch_ = 1;
  std::vector<Fired> fired_;
  std::vector<std::uint64_t> in_flight_;
  std::thread::id dispatcher_;

  // Replaced or reset only by the holder of the reader role (or the
  // background thread while it connects, holding the role); read by it
  // outside mu_.
  std::unique_ptr<Connection> conn_;
  std::thread reader_;
};

// Destroys subscribers on a thread of its own. ~Subscriber joins its reader
// thread, which may be inside a connect to a node that is gone (up to the
// connect timeout): neither a waiter that drops the last reference nor a
// caller holding a lock should wait for that. Its owner keeps it until
// every subscriber it made is gone; its destructor joins their threads.
//
// Thread-safety: thread-safe.
class SubscriberReaper {
 public:
  SubscriberReaper();
  ~SubscriberReaper();
  SubscriberReaper(const SubscriberReaper&) = delete;
  SubscriberReaper& operator=(const SubscriberReaper&) = delete;

  // A shared subscriber whose last owner hands it to this reaper.
  template <typename... Args>
  std::shared_ptr<Subscriber> Make(Args&&... args) {
    return std::shared_ptr<Subscriber>(new Subscriber(std::forward<Args>(args)...),
                                       [this](Subscriber* s) { Destroy(s); });
  }

 private:
  void Destroy(Subscriber* s);
  void Run(const std::stop_token& stop);

  std::mutex mu_;
  std::condition_variable_any cv_;
  std::vector<Subscriber*> queue_;  // guarded by mu_
  std::jthread thread_;             // last: it uses the members above
};

}  // namespace dlock::redis

#endif  // DLOCK_SRC_BACKENDS_REDIS_REDIS_SUBSCRIBER_H_
