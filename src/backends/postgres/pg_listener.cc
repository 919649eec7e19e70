#include "backends/postgres/pg_listener.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <optional>
#include <utility>
#include <vector>

namespace dlock::postgres {
namespace {

using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

constexpr milliseconds kFirstBackoff{100};
constexpr milliseconds kMaxBackoff{2000};
// A channel nobody waited on for this long is UNLISTENed (re-LISTENing costs
// a round trip, so a key contended now and then keeps its channel).
constexpr std::chrono::seconds kIdleUnlisten{30};
// How often the thread wakes with nothing to do (housekeeping only).
constexpr std::chrono::seconds kIdleTick{1};

int ChannelOf(std::uint64_t key_hash) { return static_cast<int>(key_hash % kChannels); }

}  // namespace

std::uint64_t KeyHash(std::string_view key) {
  std::uint64_t h = 14695981039346656037ull;
  for (char c : key) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

std::string ChannelName(std::string_view table, std::uint64_t key_hash) {
  char suffix[8];
  std::snprintf(suffix, sizeof suffix, "_%02x", ChannelOf(key_hash));
  return std::string(table) + suffix;
}

std::string KeyHashText(std::uint64_t key_hash) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(key_hash));
  return text;
}

Listener::Listener(ConnInfo info, std::string table, milliseconds connect_timeout,
                   std::string where, Chore* chore)
    : info_(std::move(info)),
      table_(std::move(table)),
      connect_timeout_(connect_timeout),
      where_(std::move(where)),
      chore_(chore),
      wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

Listener::~Listener() {
  Stop();
  if (wake_fd_ >= 0) close(wake_fd_);
}

void Listener::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    healthy_ = false;
  }
  cv_.notify_all();
  WakeThread();
  if (thread_.joinable()) thread_.join();
}

void Listener::ChoreDue() {
  std::lock_guard lock(mu_);
  if (chore_ == nullptr || stopping_) return;
  chore_due_ = true;
  StartThreadLocked();
  WakeThread();
}

void Listener::WakeThread() {
  if (wake_fd_ < 0) return;
  const std::uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof one);
}

void Listener::ArmLocked(WaitState& wait, int channel) {
  if (wait.armed) return;
  wait.armed = true;
  channels_[channel].armed++;
}

void Listener::Disarm(WaitState& wait, int channel) {
  if (!wait.armed) return;
  channels_[channel].armed--;
  channels_[channel].last_used = SteadyClock::now();
  wait.armed = false;
}

std::uint64_t Listener::NewWaiterId() {
  std::lock_guard lock(mu_);
  return next_waiter_id_++;
}

void Listener::BeforeAttempt(const Waiter& waiter) {
  std::lock_guard lock(mu_);
  const int channel = ChannelOf(waiter.key_hash);
  // When the key's channel is LISTENed already, this attempt is covered from
  // its start: arm now, and a refused attempt can wait at once. Otherwise
  // the first Wait() LISTENs and asks for one more attempt.
  const bool listening = healthy_ && channels_[channel].listening;
  auto key = keys_.find(waiter.key_hash);
  if (key == keys_.end()) {
    if (!listening) return;
    key = keys_.try_emplace(waiter.key_hash).first;
  }
  WaitState& wait = key->second.waits[waiter.id];
  wait.owner = waiter.owner;
  if (listening && !wait.armed) {
    ArmLocked(wait, channel);
    channels_[channel].last_used = SteadyClock::now();
  }
  wait.seen = wait.notified;
  wait.attempt_listened = listening;
  wait.wake_at = SteadyTime::max();
  // The core does not try while a wake-up is arranged; should it, the
  // attempt supersedes it.
  wait.wake = nullptr;
  wait.wake_when_listening = false;
}

void Listener::AfterRefused(const Waiter& waiter) {
  std::lock_guard lock(mu_);
  KeyState& key = keys_[waiter.key_hash];
  auto [wait, inserted] = key.waits.try_emplace(waiter.id);
  if (inserted) wait->second.owner = waiter.owner;
}

void Listener::Forget(const Waiter& waiter) {
  std::lock_guard lock(mu_);
  auto key = keys_.find(waiter.key_hash);
  if (key == keys_.end()) return;
  auto& waits = key->second.waits;
  if (auto wait = waits.find(waiter.id); wait != waits.end()) {
    Disarm(wait->second, ChannelOf(waiter.key_hash));
    waits.erase(wait);
  }
  if (waits.empty()) keys_.erase(key);
  DropReadyLocked(waiter.id);
}

bool Listener::Listening(std::uint64_t key_hash) {
  std::lock_guard lock(mu_);
  return healthy_ && channels_[ChannelOf(key_hash)].listening;
}

bool Listener::Wait(const Waiter& waiter, SteadyTime until, std::stop_token stop) {
  const std::uint64_t key_hash = waiter.key_hash;
  const int channel = ChannelOf(key_hash);
  std::unique_lock lock(mu_);
  // The waiter's state, or null once it was forgotten.
  auto mine = [&]() -> WaitState* {
    auto k = keys_.find(key_hash);
    if (k == keys_.end()) return nullptr;
    auto w = k->second.waits.find(waiter.id);
    return w == k->second.waits.end() ? nullptr : &w->second;
  };
  const WaitState* wait = mine();
  if (wait == nullptr) return false;
  if (!wait->armed) {
    lock.unlock();
    // LISTEN now, and let the core try again at once: a release between its
    // refused attempt and this LISTEN would otherwise go unnoticed.
    return Arm(waiter);
  }
  if (!healthy_ || !channels_[channel].listening) {
    WakeThread();  // reconnect soon; meanwhile the core polls
    return false;
  }
  const std::uint64_t seen = wait->seen;
  auto woken = [&] {
    if (stopping_ || !healthy_) return true;
    return mine() == nullptr || mine()->notified != seen;
  };
  for (;;) {
    if (woken() || stop.stop_requested()) return true;
    const SteadyTime deadline = std::min(until, mine()->wake_at);
    if (SteadyClock::now() >= deadline) return true;
    cv_.wait_until(lock, stop, deadline, [&] {
      // Woken, or told of an earlier expiry than this wait's deadline.
      return woken() || mine()->wake_at < deadline;
    });
  }
}

bool Listener::Notify(const Waiter& waiter, std::function<void()> wake) {
  const int channel = ChannelOf(waiter.key_hash);
  std::lock_guard lock(mu_);
  auto key = keys_.find(waiter.key_hash);
  if (key == keys_.end()) return false;
  auto found = key->second.waits.find(waiter.id);
  if (found == key->second.waits.end()) return false;
  WaitState& wait = found->second;
  if (stopping_) return false;  // no thread to run `wake`
  // Armed, on a channel LISTENed since the attempt began: whatever named
  // this owner since then was counted. Otherwise a release may have
  // gone unheard: arm, and have the core try again once the channel is
  // LISTENed.
  const bool covered = wait.armed && wait.attempt_listened;
  if (!wait.armed) {
    ArmLocked(wait, channel);
    channels_[channel].last_used = SteadyClock::now();
    StartThreadLocked();
  }
  if (outage_) {
    WakeThread();  // reconnect soon; meanwhile the core polls
    return false;
  }
  wait.wake = std::move(wake);
  if (!healthy_ || !channels_[channel].listening) {
    wait.wake_when_listening = true;  // the thread connects or LISTENs first
    WakeThread();
    return true;
  }
  if (!covered || wait.notified != wait.seen || wait.wake_at <= SteadyClock::now()) {
    ReadyLocked(waiter.id, wait);
  } else if (wait.wake_at != SteadyTime::max()) {
    timed_.emplace(wait.wake_at, std::pair(waiter.key_hash, waiter.id));
    WakeThread();  // to wake at it
  }
  return true;
}

void Listener::StopNotify(const Waiter& waiter) {
  std::lock_guard lock(mu_);
  if (WaitState* wait = FindLocked(waiter.key_hash, waiter.id)) {
    wait->wake = nullptr;
    wait->wake_when_listening = false;
  }
  DropReadyLocked(waiter.id);
}

std::size_t Listener::PendingWakes() {
  std::lock_guard lock(mu_);
  std::size_t n = ready_.size();
  for (const auto& [hash, key] : keys_) {
    for (const auto& [id, wait] : key.waits) n += wait.wake ? 1 : 0;
  }
  return n;
}

Listener::WaitState* Listener::FindLocked(std::uint64_t key_hash, std::uint64_t id) {
  auto key = keys_.find(key_hash);
  if (key == keys_.end()) return nullptr;
  auto wait = key->second.waits.find(id);
  return wait == key->second.waits.end() ? nullptr : &wait->second;
}

void Listener::ReadyLocked(std::uint64_t id, WaitState& wait) {
  if (!wait.wake) return;
  ready_.push_back({id, std::move(wait.wake)});
  wait.wake = nullptr;
  wait.wake_when_listening = false;
  // The thread runs what it readied before it next sleeps.
  if (std::this_thread::get_id() != thread_.get_id()) WakeThread();
}

void Listener::NotifyAllLocked() {
  for (auto& [hash, key] : keys_) {
    for (auto& [id, wait] : key.waits) wait.notified++;
  }
}

bool Listener::Notified(const Waiter& waiter) {
  std::lock_guard lock(mu_);
  const WaitState* wait = FindLocked(waiter.key_hash, waiter.id);
  return wait != nullptr && wait->notified != wait->seen;
}

void Listener::ReadyAllLocked() {
  for (auto& [hash, key] : keys_) {
    for (auto& [id, wait] : key.waits) ReadyLocked(id, wait);
  }
}

void Listener::ReadyListeningLocked() {
  if (!healthy_) return;
  for (auto& [hash, key] : keys_) {
    if (!channels_[ChannelOf(hash)].listening) continue;
    for (auto& [id, wait] : key.waits) {
      if (wait.wake_when_listening) ReadyLocked(id, wait);
    }
  }
}

SteadyTime Listener::ReadyDueLocked(SteadyTime now) {
  while (!timed_.empty() && timed_.begin()->first <= now) {
    const auto [hash, id] = timed_.begin()->second;
    timed_.erase(timed_.begin());
    WaitState* wait = FindLocked(hash, id);
    if (wait != nullptr && wait->wake_at <= now) ReadyLocked(id, *wait);
  }
  return timed_.empty() ? SteadyTime::max() : timed_.begin()->first;
}

void Listener::DropReadyLocked(std::uint64_t id) {
  std::erase_if(ready_, [id](const Ready& r) { return r.id == id; });
}

void Listener::RunReady() {
  for (;;) {
    std::function<void()> wake;
    {
      std::lock_guard lock(mu_);
      if (stopping_ || ready_.empty()) return;
      wake = std::move(ready_.front().wake);
      ready_.pop_front();
    }
    wake();
  }
}

bool Listener::Arm(const Waiter& waiter) {
  const int channel = ChannelOf(waiter.key_hash);
  {
    std::lock_guard lock(mu_);
    auto key = keys_.find(waiter.key_hash);
    if (key == keys_.end()) return false;
    auto wait = key->second.waits.find(waiter.id);
    if (wait == key->second.waits.end() || stopping_) return false;
    ArmLocked(wait->second, channel);
    channels_[channel].last_used = SteadyClock::now();
    StartThreadLocked();
    if (healthy_ && channels_[channel].listening) return true;
  }
  return ListenOn(waiter.key_hash);
}

void Listener::StartThreadLocked() {
  if (thread_started_ || stopping_) return;  // none starts after Stop()
  thread_started_ = true;
  thread_ = std::thread([this] { Run(); });
}

bool Listener::ListenOn(std::uint64_t key_hash) {
  const int channel = ChannelOf(key_hash);
  const SteadyTime deadline = SteadyClock::now() + connect_timeout_;
  std::unique_lock conn_lock(conn_mu_, std::defer_lock);
  if (!conn_lock.try_lock_until(deadline)) return false;
  if (!conn_) {
    const bool ok = ConnectLocked(deadline);  // LISTENs every armed channel
    WakeThread();                              // to poll the new socket
    return ok;
  }
  {
    std::lock_guard lock(mu_);
    if (healthy_ && channels_[channel].listening) return true;
  }
  const std::string sql = "LISTEN \"" + ChannelName(table_, key_hash) + "\"";
  if (PQsendQuery(conn_.get(), sql.c_str()) == 0) {
    DropConnectionLocked();
    return false;
  }
  if (!Await(conn_.get(), deadline, "listen", where_).ok()) {
    DropConnectionLocked();
    return false;
  }
  DispatchLocked();
  std::lock_guard lock(mu_);
  channels_[channel].listening = healthy_;
  ReadyListeningLocked();
  return healthy_;
}

bool Listener::ConnectLocked(SteadyTime deadline) {
  if (TryConnectLocked(deadline)) return true;
  {
    std::lock_guard lock(mu_);
    outage_ = true;
    // Those told to wait for this connection poll instead.
    ReadyAllLocked();
  }
  return false;
}

bool Listener::TryConnectLocked(SteadyTime deadline) {
  auto conn = Connect(info_, deadline, where_);
  if (!conn.ok()) return false;
  std::string sql;
  std::vector<int> armed;
  {
    std::lock_guard lock(mu_);
    for (int c = 0; c < kChannels; ++c) {
      if (channels_[c].armed > 0) {
        armed.push_back(c);
        sql += "LISTEN \"" + ChannelName(table_, static_cast<std::uint64_t>(c)) + "\";";
      }
    }
  }
  if (!sql.empty()) {
    if (PQsendQuery(conn->get(), sql.c_str()) == 0) return false;
    if (!Await(conn->get(), deadline, "listen", where_).ok()) return false;
  }
  conn_ = std::move(*conn);
  {
    std::lock_guard lock(mu_);
    if (stopping_) return false;  // Stop() came meanwhile: stay down
    healthy_ = true;
    outage_ = false;
    for (int c : armed) channels_[c].listening = true;
    // Whatever was sent while there was no connection is lost: everybody
    // looks again.
    NotifyAllLocked();
    ReadyAllLocked();
  }
  cv_.notify_all();
  DispatchLocked();
  return true;
}

void Listener::DropConnectionLocked() {
  conn_.reset();
  {
    std::lock_guard lock(mu_);
    healthy_ = false;
    outage_ = true;
    for (Channel& c : channels_) c.listening = false;
    NotifyAllLocked();
    ReadyAllLocked();
  }
  cv_.notify_all();
  WakeThread();
}

void Listener::DispatchLocked() {
  if (!conn_) return;
  bool woke = false;
  while (PGnotify* n = PQnotifies(conn_.get())) {
    const std::string_view payload = n->extra != nullptr ? n->extra : "";
    std::uint64_t hash = 0;
    bool parsed = payload.size() >= 16;
    for (std::size_t i = 0; parsed && i < 16; ++i) {
      const char c = payload[i];
      const int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (v < 0) parsed = false;
      hash = hash * 16 + static_cast<std::uint64_t>(v);
    }
    // "<hash> <owner>" (a release) or "<hash> <owner> <ttl_ms>" (a grant).
    std::string owner;
    std::optional<long long> ttl_ms;
    if (payload.size() > 17) {
      const std::string_view rest = payload.substr(17);
      const std::size_t space = rest.find(' ');
      owner = std::string(rest.substr(0, space));
      if (space != std::string_view::npos) {
        long long ms = 0;
        const std::string_view digits = rest.substr(space + 1);
        auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), ms);
        if (ec == std::errc() && end == digits.data() + digits.size() && ms >= 0) ttl_ms = ms;
      }
    }
    PQfreemem(n);
    if (!parsed) continue;
    std::lock_guard lock(mu_);
    auto key = keys_.find(hash);
    if (key == keys_.end()) continue;
    if (ttl_ms) {
      // Received after the grant: waking at receipt + ttl is never early.
      const SteadyTime expiry = SteadyClock::now() + milliseconds(*ttl_ms);
      for (auto& [id, wait] : key->second.waits) {
        if (wait.owner == owner) {
          wait.wake_at = expiry;
          woke = true;
          if (wait.wake) {
            timed_.emplace(expiry, std::pair(hash, id));
            WakeThread();  // to sleep no later than it
          }
        }
      }
    } else {
      // Only the owner named (or, naming nobody, all): the others' turn has
      // not come, and they sleep on, blocked or not.
      for (auto& [id, wait] : key->second.waits) {
        if (!owner.empty() && wait.owner != owner) continue;
        wait.notified++;
        woke = true;
        ReadyLocked(id, wait);
      }
    }
  }
  if (woke) cv_.notify_all();
}

void Listener::ListenArmedLocked() {
  std::string sql;
  std::vector<int> pending;
  {
    std::lock_guard lock(mu_);
    if (!healthy_) return;
    for (int c = 0; c < kChannels; ++c) {
      if (channels_[c].armed > 0 && !channels_[c].listening) {
        pending.push_back(c);
        sql += "LISTEN \"" + ChannelName(table_, static_cast<std::uint64_t>(c)) + "\";";
      }
    }
  }
  if (sql.empty()) return;
  if (PQsendQuery(conn_.get(), sql.c_str()) == 0 ||
      !Await(conn_.get(), SteadyClock::now() + connect_timeout_, "listen", where_).ok()) {
    DropConnectionLocked();
    return;
  }
  DispatchLocked();
  std::lock_guard lock(mu_);
  for (int c : pending) channels_[c].listening = healthy_;
  ReadyListeningLocked();
}

void Listener::UnlistenIdleLocked() {
  std::string sql;
  std::vector<int> idle;
  const auto now = SteadyClock::now();
  {
    std::lock_guard lock(mu_);
    for (int c = 0; c < kChannels; ++c) {
      const Channel& ch = channels_[c];
      if (ch.listening && ch.armed == 0 && now - ch.last_used > kIdleUnlisten) {
        idle.push_back(c);
        sql += "UNLISTEN \"" + ChannelName(table_, static_cast<std::uint64_t>(c)) + "\";";
      }
    }
  }
  if (sql.empty()) return;
  if (PQsendQuery(conn_.get(), sql.c_str()) == 0 ||
      !Await(conn_.get(), now + connect_timeout_, "unlisten", where_).ok()) {
    DropConnectionLocked();
    return;
  }
  DispatchLocked();
  std::lock_guard lock(mu_);
  for (int c : idle) {
    if (channels_[c].armed == 0) channels_[c].listening = false;
  }
}

void Listener::Run() {
  milliseconds backoff = kFirstBackoff;
  SteadyTime next_connect{};
  for (;;) {
    int fd = -1;
    SteadyTime wake_at;
    {
      std::unique_lock conn_lock(conn_mu_);
      bool want = false;
      {
        std::lock_guard lock(mu_);
        if (stopping_) return;
        want = std::any_of(channels_.begin(), channels_.end(),
                           [](const Channel& c) { return c.armed > 0; });
      }
      if (conn_) {
        if (PQconsumeInput(conn_.get()) == 0 || PQstatus(conn_.get()) != CONNECTION_OK) {
          DropConnectionLocked();
        } else {
          DispatchLocked();
        }
      }
      auto now = SteadyClock::now();
      if (!conn_ && want && now >= next_connect) {
        if (ConnectLocked(now + connect_timeout_)) {
          backoff = kFirstBackoff;
        } else {
          now = SteadyClock::now();
          next_connect = now + backoff;
          backoff = std::min(backoff * 2, kMaxBackoff);
        }
      }
      if (conn_) ListenArmedLocked();  // first Notify() waits on a channel
      if (conn_) UnlistenIdleLocked();
      now = SteadyClock::now();
      if (conn_) {
        fd = PQsocket(conn_.get());
        wake_at = now + kIdleTick;
      } else {
        // Nothing to look after until somebody waits or the chore is due.
        wake_at = want ? std::max(next_connect, now) : SteadyTime::max();
      }
    }
    {
      std::lock_guard lock(mu_);
      wake_at = std::min(wake_at, ReadyDueLocked(SteadyClock::now()));
    }
    RunReady();  // outside every lock: a callback may call the listener
    const Chore::Next chore = RunChore();
    std::array<pollfd, 3> fds{
        {{fd, POLLIN, 0}, {chore.fd, chore.events, 0}, {wake_fd_, POLLIN, 0}}};
    PollFds(fds, std::min(wake_at, chore.at));
    std::uint64_t drained;
    [[maybe_unused]] ssize_t n = read(wake_fd_, &drained, sizeof drained);
  }
}

Listener::Chore::Next Listener::RunChore() {
  if (chore_ == nullptr) return {};
  bool due = false;
  {
    std::lock_guard lock(mu_);
    due = std::exchange(chore_due_, false);
  }
  // A socket it waits on: Step looks (without blocking) whether it spoke.
  if (due || chore_next_.fd >= 0 || SteadyClock::now() >= chore_next_.at) {
    chore_next_ = chore_->Step();
  }
  return chore_next_;
}

}  // namespace dlock::postgres
