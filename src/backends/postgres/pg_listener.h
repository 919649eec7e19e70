// Listener: the PostgreSQL backend's LISTEN connection, shared by every
// waiting acquisition of one backend.
//
// Releases NOTIFY one of kChannels channels, `<table>_<nn>` with nn the key's
// hash modulo kChannels (two hex digits), with the payload
// "<16 hex digits of the key hash> <owner at the head of the key's wait
// queue, or nothing>". A waiter wakes only for its own key, and only when the
// notification names its owner or nobody (no queue: everybody may try). So a
// release wakes the next waiter in line, not the herd, whether the waiters
// of a process block in Wait() or wait with Notify(). A grant to a waiter NOTIFYs
// "<hash> <next owner in line> <ttl_ms>": that waiter, which may have been
// refused while the key was free (it was not first), then wakes when the new
// lease is due to expire, should its holder vanish.
//
// No notification may be missed between a refused attempt and the wait for
// the next release. Before each waiting attempt, BeforeAttempt() notes how
// many notifications for this waiter came, and Wait() returns at once if
// another arrived since; so an attempt must start with its channel LISTENed. When it
// is not (the first wait on that channel), the refused attempt's Wait()
// LISTENs (synchronously) and returns at once, and the core's next attempt
// is covered. A process that never waits never opens this connection.
//
// One thread reads notifications and reconnects (with backoff) while anybody
// waits. While the connection is down, Wait() returns false and the core
// polls instead; when it comes back every waiter is woken to check again,
// since notifications sent meanwhile are lost.
//
// Notify() is Wait() without a thread (Acquisition::Notify): the same
// checks, but instead of blocking it leaves a callback on the waiter's
// state, which that thread runs, outside the listener's locks, when Wait()
// would have returned. So a thousand pending acquisitions of one key cost
// one attempt per hand-off. A waiter's first wait on a channel
// needs no synchronous LISTEN either: the thread LISTENs, then runs it.
//
// Each waiting acquisition is one Waiter, named by an id from NewWaiterId():
// its calls may come from any thread, one after the other.
//
// The thread also runs the backend's chore (its sweep, pg_sweeper.h), so a
// backend keeps one thread of its own however it is used: it starts at the
// first wait or the first ChoreDue(), and lives until Stop().
//
// Thread-safety: every method may be called from any thread.
#ifndef DLOCK_SRC_BACKENDS_POSTGRES_PG_LISTENER_H_
#define DLOCK_SRC_BACKENDS_POSTGRES_PG_LISTENER_H_

#include <poll.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends/postgres/pg_util.h"

namespace dlock::postgres {

inline constexpr int kChannels = 64;

// FNV-1a, 64 bits, of the key's bytes: every dlock process computes the
// same channel and payload for a key.
std::uint64_t KeyHash(std::string_view key);
// "<table>_<nn>".
std::string ChannelName(std::string_view table, std::uint64_t key_hash);
// "<16 hex digits>".
std::string KeyHashText(std::uint64_t key_hash);

class Listener {
 public:
  // Work the thread does besides notifications. Step runs on the thread,
  // outside the listener's locks, and must not wait on the server: it
  // returns when it wants to run again, and a socket (or -1) that should
  // run it sooner once ready for `events`. While it names a socket, Step
  // also runs at every turn of the thread.
  class Chore {
   public:
    struct Next {
      SteadyTime at = SteadyTime::max();
      int fd = -1;
      short events = POLLIN;
    };
    virtual Next Step() = 0;

   protected:
    ~Chore() = default;
  };

  // `chore` (may be null) must outlive Stop().
  Listener(ConnInfo info, std::string table, std::chrono::milliseconds connect_timeout,
           std::string where, Chore* chore = nullptr);
  ~Listener();  // Stop()
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // One waiting acquisition of `owner` on the key whose hash is key_hash.
  struct Waiter {
    std::uint64_t key_hash = 0;
    std::uint64_t id = 0;  // from NewWaiterId()
    std::string owner;
  };
  std::uint64_t NewWaiterId();

  // Before each waiting attempt of the waiter.
  void BeforeAttempt(const Waiter& waiter);
  // After a refused waiting attempt.
  void AfterRefused(const Waiter& waiter);
  // The waiter was granted the key or gave up: it waits no more.
  void Forget(const Waiter& waiter);
  // Acquisition::Wait: see the comment at the top.
  bool Wait(const Waiter& waiter, SteadyTime until, std::stop_token stop);
  // Acquisition::Notify: `wake` runs once, on the listener's thread, when
  // Wait() would have returned (never inside this call). False, with
  // nothing registered, while the connection is down (the core polls) or
  // for a waiter forgotten or never refused.
  bool Notify(const Waiter& waiter, std::function<void()> wake);
  // Drops what Notify() arranged, unless its callback already runs.
  void StopNotify(const Waiter& waiter);

  // The chore has something to do: its Step runs soon (starting the
  // thread if need be).
  void ChoreDue();
  // Ends the thread (callbacks not yet run are dropped); the listener
  // answers as if its connection were down from then on.
  void Stop();

  // For tests: the channel is LISTENed on a live connection.
  bool Listening(std::uint64_t key_hash);
  // For tests: callbacks registered or due to run.
  std::size_t PendingWakes();
  // For tests: whether a notification for the waiter came since its last
  // attempt (what ends its Wait).
  bool Notified(const Waiter& waiter);

 private:
  struct WaitState {
    std::string owner;
    bool armed = false;  // counted in its channel's armed
    // Notifications for this wait so far (naming its owner or nobody, and
    // the connection's losses and returns), and how many before the last
    // attempt: it wakes when they differ.
    std::uint64_t notified = 0;
    std::uint64_t seen = 0;
    // When the lease granted to somebody else since the last attempt is due
    // to expire (a grant's notification to the next in line).
    SteadyTime wake_at = SteadyTime::max();
    // The channel was LISTENed when the last attempt began: only then is
    // the attempt covered from its start.
    bool attempt_listened = false;
    std::function<void()> wake;        // Notify()'s, until run or dropped
    bool wake_when_listening = false;  // ... once the channel is LISTENed
  };
  struct KeyState {
    std::map<std::uint64_t, WaitState> waits;  // by Waiter::id
  };
  struct Channel {
    int armed = 0;
    bool listening = false;
    std::chrono::steady_clock::time_point last_used{};
  };

  // A callback due to run on the thread, by Waiter::id.
  struct Ready {
    std::uint64_t id = 0;
    std::function<void()> wake;
  };

  // Makes the waiter's wait armed and its channel LISTENed.
  bool Arm(const Waiter& waiter);
  // With mu_ held: counts the wait as armed on its channel.
  void ArmLocked(WaitState& wait, int channel);
  // With mu_ held: every wait looks again (a notification may be lost).
  void NotifyAllLocked();
  void StartThreadLocked();
  // With mu_ held: the waiter's state, or null.
  WaitState* FindLocked(std::uint64_t key_hash, std::uint64_t id);
  // With mu_ held: hands the wait's callback, if any, to the thread.
  void ReadyLocked(std::uint64_t id, WaitState& wait);
  // ... every callback (the connection was lost or is back).
  void ReadyAllLocked();
  // ... the callbacks whose channel's LISTEN is now in place.
  void ReadyListeningLocked();
  // ... those whose wake_at has come; returns the next wake_at.
  SteadyTime ReadyDueLocked(SteadyTime now);
  void DropReadyLocked(std::uint64_t id);
  // On the thread, outside every lock.
  void RunReady();
  // With conn_mu_ held: LISTENs armed channels not yet LISTENed.
  void ListenArmedLocked();
  // LISTENs on the key's channel, connecting first if needed.
  bool ListenOn(std::uint64_t key_hash);
  void Run();
  // On the thread: the chore's Step, when due; when it wants to run next.
  Chore::Next RunChore();
  // With conn_mu_ held.
  bool ConnectLocked(SteadyTime deadline);
  bool TryConnectLocked(SteadyTime deadline);  // ConnectLocked but for a failure
  void DropConnectionLocked();
  void DispatchLocked();
  void UnlistenIdleLocked();
  void Disarm(WaitState& wait, int channel);
  void WakeThread();

  const ConnInfo info_;
  const std::string table_;
  const std::chrono::milliseconds connect_timeout_;
  const std::string where_;
  Chore* const chore_;
  Chore::Next chore_next_;  // the thread's alone
  int wake_fd_ = -1;  // eventfd: stop, or (re)connect now

  // Guards conn_; held while talking to the server. Taken before mu_.
  TimedMutex conn_mu_;
  PgConnHandle conn_;

  std::mutex mu_;  // guards everything below
  std::condition_variable_any cv_;
  bool stopping_ = false;
  bool healthy_ = false;  // conn_ is up and its LISTENs are in place
  // The last connection attempt failed or the connection was lost, and no
  // new one is up: Notify() says so rather than promise a wake-up.
  bool outage_ = false;
  bool thread_started_ = false;
  bool chore_due_ = false;
  std::uint64_t next_waiter_id_ = 1;
  std::unordered_map<std::uint64_t, KeyState> keys_;
  std::array<Channel, kChannels> channels_{};
  std::deque<Ready> ready_;
  // Notify()'s waits told of a lease's expiry: (wake_at, key hash, id).
  // Entries go stale (the wait moved on) and are checked when due.
  std::multimap<SteadyTime, std::pair<std::uint64_t, std::uint64_t>> timed_;
  std::thread thread_;
};

}  // namespace dlock::postgres

#endif  // DLOCK_SRC_BACKENDS_POSTGRES_PG_LISTENER_H_
