#include "backends/redis/redis_subscriber.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "backends/redis/redis_slot_map.h"
#include "backends/redis/redis_slots.h"

namespace dlock::redis {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kPollInterval{1000};
constexpr milliseconds kFirstRetry{50};
constexpr milliseconds kMaxRetry{1000};
constexpr milliseconds kFirstRefusedPause{1000};
constexpr milliseconds kMaxRefusedPause{30'000};

}  // namespace

Subscriber::Subscriber(Connect connect, Mode mode, std::function<void()> on_moved,
                       std::function<void(const std::string&)> on_refused)
    : connect_(std::move(connect)),
      mode_(mode),
      on_moved_(std::move(on_moved)),
      on_refused_(std::move(on_refused)) {
  event_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  reader_ = std::thread([this] { Run(); });
}

Subscriber::~Subscriber() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  bg_cv_.notify_all();
  WakeReader();
  reader_.join();
  if (event_fd_ >= 0) close(event_fd_);
}

void Subscriber::WakeReader() {
  if (event_fd_ < 0) return;
  const std::uint64_t one = 1;
  // EAGAIN (counter full) still leaves it readable: nothing to do.
  [[maybe_unused]] ssize_t n = write(event_fd_, &one, sizeof one);
}

void Subscriber::Changed() {
  ++changes_;
  cv_.notify_all();
  if (BackgroundMustAct()) bg_cv_.notify_one();
}

bool Subscriber::BackgroundMustAct() const {
  if (stopping_) return true;
  // Watches to call, and nobody at it (a reader in poll() is woken too).
  if (!fired_.empty() && dispatcher_ == std::thread::id{}) return true;
  if (reading_) return false;
  // Without a connection: only while some channel is wanted.
  if (!conn_) {
    return std::any_of(channels_.begin(), channels_.end(),
                       [](const auto& item) { return item.second.wanted; });
  }
  return active_waiters_ == 0;
}

void Subscriber::WantLocked(Channel& ch) {
  ch.last_used = std::chrono::steady_clock::now();
  if (!ch.wanted || ch.state == State::kNone) {
    ch.wanted = true;
    ch.gone = false;
    WakeReader();
    if (!conn_ && !reading_) bg_cv_.notify_one();  // to connect again
  }
}

std::optional<Subscriber::Ticket> Subscriber::Current(const std::string& channel) {
  std::lock_guard lock(mu_);
  Channel& ch = channels_[channel];
  WantLocked(ch);
  if (ch.state != State::kSubscribed) return std::nullopt;
  return Ticket{ch.epoch, ch.messages};
}

Subscriber::Outcome Subscriber::Wait(const std::string& channel, std::optional<Ticket> ticket,
                                     const std::string& target, SteadyTime deadline,
                                     std::stop_token stop, std::string* message) {
  std::unique_lock lock(mu_);
  if (down_ || stopping_ || RefusedLocked(std::chrono::steady_clock::now())) {
    return Outcome::kDown;
  }
  Channel& ch = channels_[channel];
  ch.waiters++;
  active_waiters_++;
  // A channel found gone since the ticket was taken wakes the waiter (the
  // epoch no longer matches); without a ticket, it is asked for again.
  if (!ticket || !ch.gone) WantLocked(ch);
  auto ready = [&] { return ReadyLocked(ch, ticket, target, message); };
  // A stop request must interrupt a poll() this thread may be in.
  std::stop_callback on_stop(stop, [this] { WakeReader(); });
  Outcome outcome;
  for (;;) {
    if (down_ || stopping_ || RefusedLocked(std::chrono::steady_clock::now())) {
      outcome = Outcome::kDown;
      break;
    }
    if (ready()) {
      outcome = Outcome::kWoken;
      break;
    }
    if (stop.stop_requested()) {
      outcome = Outcome::kStopped;
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      outcome = Outcome::kTimedOut;
      break;
    }
    if (!reading_ && conn_) {
      ReadTurn(lock, deadline, /*background=*/false);
      continue;
    }
    // The background thread reads: ask it to hand over. Otherwise another
    // waiter leads, or the connection is being made: wait for a change.
    if (reading_ && bg_reading_) WakeReader();
    const std::uint64_t seen = changes_;
    cv_.wait_until(lock, stop, deadline, [&] { return changes_ != seen; });
  }
  ch.waiters--;
  ch.last_used = std::chrono::steady_clock::now();
  if (--active_waiters_ == 0) Changed();  // the background thread may read again
  return outcome;
}

bool Subscriber::ReadyLocked(const Channel& ch, const std::optional<Ticket>& ticket,
                             const std::string& target, std::string* message) const {
  if (ch.gone) return true;
  if (!ticket) return ch.state == State::kSubscribed;
  if (ch.epoch != ticket->epoch) return true;
  if (ch.messages - ticket->messages > kRecent) return true;  // some forgotten
  bool found = false;
  for (std::uint64_t m = ticket->messages + 1; m <= ch.messages; ++m) {
    const std::string& payload = ch.recent[m % kRecent];
    if (target.empty() || payload == target) {
      found = true;
    } else if (payload.size() > target.size() && payload.starts_with(target) &&
               payload[target.size()] == ':') {
      // A grant for this waiter: the last one counts.
      if (message) *message = payload.substr(target.size() + 1);
      found = true;
    }
  }
  return found;
}

std::uint64_t Subscriber::Watch(const std::string& channel, std::optional<Ticket> ticket,
                                const std::string& target, Wake wake) {
  std::lock_guard lock(mu_);
  if (down_ || stopping_ || RefusedLocked(std::chrono::steady_clock::now())) return 0;
  Channel& ch = channels_[channel];
  if (!ticket || !ch.gone) WantLocked(ch);
  const std::uint64_t id = next_watch_++;
  std::string grant;
  if (ReadyLocked(ch, ticket, target, &grant)) {
    // Over already (a release between the attempt and now): called by the
    // reader, for the caller must not be called back from inside Watch.
    fired_.push_back({id, std::move(wake), std::move(grant)});
    WakeReader();
    bg_cv_.notify_one();
    return id;
  }
  ch.watchers.emplace(target, id);
  watches_.emplace(id, Watcher{channel, target, std::move(wake)});
  return id;
}

Subscriber::Wake Subscriber::TakeWatchLocked(std::uint64_t id) {
  auto it = watches_.find(id);
  if (it == watches_.end()) return {};
  Watcher& w = it->second;
  if (auto c = channels_.find(w.channel); c != channels_.end()) {
    auto [from, to] = c->second.watchers.equal_range(w.target);
    for (auto at = from; at != to; ++at) {
      if (at->second == id) {
        c->second.watchers.erase(at);
        break;
      }
    }
    c->second.last_used = std::chrono::steady_clock::now();
  }
  Wake wake = std::move(w.wake);
  watches_.erase(it);
  return wake;
}

void Subscriber::Unwatch(std::uint64_t id) {
  std::unique_lock lock(mu_);
  if (TakeWatchLocked(id)) return;
  if (std::erase_if(fired_, [id](const Fired& f) { return f.id == id; }) > 0) return;
  // Perhaps being called on another thread right now: the caller may free
  // what the callback uses once this returns.
  const std::thread::id me = std::this_thread::get_id();
  cv_.wait(lock, [&] {
    return dispatcher_ == me ||
           std::find(in_flight_.begin(), in_flight_.end(), id) == in_flight_.end();
  });
}

std::size_t Subscriber::Watches() {
  std::lock_guard lock(mu_);
  return watches_.size() + fired_.size();
}

void Subscriber::FireLocked(std::uint64_t id, std::string grant) {
  if (Wake wake = TakeWatchLocked(id)) fired_.push_back({id, std::move(wake), std::move(grant)});
}

void Subscriber::FireMessageLocked(Channel& ch, const std::string& payload) {
  if (ch.watchers.empty()) return;
  // As ReadyLocked: a watch for any message, for this exact payload, and
  // for a target the payload begins with, followed by ':' and a grant.
  std::vector<std::pair<std::uint64_t, std::string>> ids;
  auto add = [&](const std::string& target, const std::string& grant) {
    auto [from, to] = ch.watchers.equal_range(target);
    for (auto at = from; at != to; ++at) ids.emplace_back(at->second, grant);
  };
  add("", "");
  add(payload, "");
  for (std::size_t colon = payload.find(':'); colon != std::string::npos;
       colon = payload.find(':', colon + 1)) {
    if (colon > 0) add(payload.substr(0, colon), payload.substr(colon + 1));
  }
  for (auto& [id, grant] : ids) FireLocked(id, std::move(grant));
}

void Subscriber::FireChannelLocked(Channel& ch) {
  std::vector<std::uint64_t> ids;
  for (const auto& [target, id] : ch.watchers) ids.push_back(id);
  for (std::uint64_t id : ids) FireLocked(id);
}

void Subscriber::FireAllLocked() {
  std::vector<std::uint64_t> ids;
  for (const auto& [id, w] : watches_) ids.push_back(id);
  for (std::uint64_t id : ids) FireLocked(id);
}

void Subscriber::DispatchLocked(std::unique_lock<std::mutex>& lock) {
  if (dispatcher_ != std::thread::id{}) return;
  dispatcher_ = std::this_thread::get_id();
  while (!fired_.empty()) {
    std::vector<Fired> batch = std::exchange(fired_, {});
    for (const Fired& f : batch) in_flight_.push_back(f.id);
    lock.unlock();
    for (Fired& f : batch) f.wake(f.grant);
    batch.clear();  // what the callbacks hold goes outside the lock too
    lock.lock();
    in_flight_.clear();
    cv_.notify_all();  // an Unwatch may be waiting for these
  }
  dispatcher_ = std::thread::id{};
}

void Subscriber::PlanCommands(std::vector<Command>* out, SteadyTime now) {
  const bool sharded = mode_ == Mode::kSharded;
  const bool refused = RefusedLocked(now);
  Command subscribe{sharded ? "SSUBSCRIBE" : "SUBSCRIBE"};
  Command unsubscribe{sharded ? "SUNSUBSCRIBE" : "UNSUBSCRIBE"};
  for (auto& [name, ch] : channels_) {
    if (ch.wanted && Unused(ch) && now - ch.last_used > kLinger) ch.wanted = false;
    // Sharded: one command per channel, for the channels' slots differ (a
    // command naming several must keep to one slot).
    if (ch.wanted && ch.state == State::kNone && !refused) {
      if (sharded) {
        out->push_back({subscribe[0], name});
      } else {
        subscribe.push_back(name);
      }
      ch.state = State::kSubscribing;
    } else if (!ch.wanted && ch.state == State::kSubscribed) {
      if (sharded) {
        out->push_back({unsubscribe[0], name});
      } else {
        unsubscribe.push_back(name);
      }
      ch.state = State::kUnsubscribing;
    }
  }
  std::erase_if(channels_, [](const auto& item) {
    const Channel& ch = item.second;
    return !ch.wanted && Unused(ch) && ch.state == State::kNone;
  });
  if (subscribe.size() > 1) out->push_back(std::move(subscribe));
  if (unsubscribe.size() > 1) out->push_back(std::move(unsubscribe));
}

void Subscriber::GoneLocked(Channel& ch) {
  ch.gone = true;
  ch.wanted = false;
  ch.state = State::kNone;
  ch.epoch = 0;
  ch.messages++;
  ch.recent[ch.messages % kRecent].clear();
  FireChannelLocked(ch);
}

void Subscriber::HandleError(std::string_view error) {
  // Only (S)SUBSCRIBE is answered with an error here. A redirection (or a
  // malformed one) names a slot whose channels must go elsewhere: their
  // waiters attempt again, and find the slot's new node.
  if (mode_ == Mode::kSharded && (error.starts_with("MOVED") || error.starts_with("ASK"))) {
    std::optional<std::uint16_t> slot;
    if (auto redirect = ParseRedirect(error, Endpoint{}, "subscriber");
        redirect.ok() && *redirect) {
      slot = (*redirect)->slot;
    }
    for (auto& [name, ch] : channels_) {
      if (ch.state == State::kSubscribing && (!slot || HashSlot(name) == *slot)) GoneLocked(ch);
    }
    if (on_moved_) on_moved_();
    return;
  }
  // Anything else refuses the subscription itself (NOPERM, CLUSTERDOWN):
  // marking the channels gone would wake their waiters at once, again and
  // again. Waiters poll instead (Wait: kDown) until a later try succeeds.
  for (auto& [name, ch] : channels_) {
    if (ch.state != State::kSubscribing) continue;
    ch.state = State::kNone;
    FireChannelLocked(ch);  // as Wait's kDown: they poll for now
  }
  refused_until_ = std::chrono::steady_clock::now() + refused_pause_;
  refused_pause_ = std::min(refused_pause_ * 2, kMaxRefusedPause);
  if (mode_ == Mode::kSharded && error.starts_with("CLUSTERDOWN") && on_moved_) on_moved_();
  if (!std::exchange(refusal_reported_, true) && on_refused_) on_refused_(std::string(error));
}

void Subscriber::HandleReply(const redisReply* r) {
  if (r->type == REDIS_REPLY_ERROR) return HandleError(ReplyString(r));
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 3) return;
  std::string kind = ReplyString(r->element[0]);
  const bool sharded = mode_ == Mode::kSharded;
  if (sharded && kind.starts_with('s')) kind.erase(0, 1);  // smessage, ssubscribe, sunsubscribe
  const std::string name = ReplyString(r->element[1]);
  auto it = channels_.find(name);
  if (it == channels_.end()) return;
  Channel& ch = it->second;
  if (kind == "message") {
    ch.messages++;
    ch.recent[ch.messages % kRecent] = ReplyString(r->element[2]);
    FireMessageLocked(ch, ch.recent[ch.messages % kRecent]);
  } else if (kind == "subscribe") {
    ch.state = State::kSubscribed;
    ch.epoch = next_epoch_++;
    refused_pause_ = kFirstRefusedPause;
    // Those without a ticket: their next attempt is covered. (One with a
    // ticket has an older epoch.)
    FireChannelLocked(ch);
  } else if (kind == "unsubscribe" && sharded && ch.state == State::kSubscribed) {
    // Unasked: the channel's slot left this node (a migration, a failover).
    GoneLocked(ch);
    if (on_moved_) on_moved_();
  } else if (kind == "unsubscribe") {
    ch.state = State::kNone;  // PlanCommands subscribes again if wanted
    ch.epoch = 0;
    FireChannelLocked(ch);
  }
}

void Subscriber::ConnectionLostLocked() {
  conn_.reset();
  for (auto& [name, ch] : channels_) {
    // Messages may have been missed: every waiter retries.
    ch.state = State::kNone;
    ch.epoch = 0;
    ch.messages++;
    ch.recent[ch.messages % kRecent].clear();
  }
  FireAllLocked();
}

void Subscriber::ReadTurn(std::unique_lock<std::mutex>& lock, SteadyTime until, bool background) {
  reading_ = true;
  bg_reading_ = background;
  DispatchLocked(lock);  // watches over when they were made
  std::vector<Command> commands;
  const auto now = std::chrono::steady_clock::now();
  PlanCommands(&commands, now);
  Connection* c = conn_.get();
  lock.unlock();

  constexpr std::string_view kWhat = "subscribe for wake-ups";
  bool lost = !commands.empty() && !c->Send(commands, kPollInterval, kWhat).ok();
  std::vector<ReplyPtr> replies;
  if (!lost) {
    const auto left = std::chrono::ceil<milliseconds>(until - now);
    const int timeout_ms =
        static_cast<int>(std::clamp(left, milliseconds(0), kPollInterval).count());
    pollfd fds[2] = {{c->fd(), POLLIN, 0}, {event_fd_, POLLIN, 0}};
    const int n = poll(fds, 2, timeout_ms);
    if (n < 0 && errno != EINTR) lost = true;
    if (n > 0 && (fds[1].revents & POLLIN)) {
      std::uint64_t drained;
      [[maybe_unused]] ssize_t r = read(event_fd_, &drained, sizeof drained);
    }
    if (n > 0 && (fds[0].revents & (POLLIN | POLLERR | POLLHUP))) {
      auto got = c->ReceiveAvailable(kWhat);
      if (got.ok()) {
        replies = std::move(*got);
      } else {
        lost = true;
      }
    }
  }

  lock.lock();
  for (const ReplyPtr& r : replies) HandleReply(r.get());
  if (lost) ConnectionLostLocked();
  DispatchLocked(lock);
  reading_ = false;
  bg_reading_ = false;
  Changed();
}

void Subscriber::Run() {
  milliseconds retry = kFirstRetry;
  std::unique_lock lock(mu_);
  while (!stopping_) {
    if (!BackgroundMustAct()) {  // a waiter leads, or will
      bg_cv_.wait(lock, [&] { return BackgroundMustAct(); });
      continue;
    }
    if (!fired_.empty() && dispatcher_ == std::thread::id{}) {
      DispatchLocked(lock);
      continue;
    }
    if (!conn_) {
      reading_ = true;  // nobody reads while we connect
      lock.unlock();
      auto conn = connect_();
      lock.lock();
      reading_ = false;
      if (stopping_) break;
      if (!conn.ok()) {
        down_ = true;
        // Channels nobody waited on for a while are given up here too (a
        // connected reader does it in PlanCommands): with none wanted, a
        // node that is gone is not dialled again and again.
        const auto now = std::chrono::steady_clock::now();
        for (auto& [name, ch] : channels_) {
          if (ch.wanted && Unused(ch) && now - ch.last_used > kLinger) ch.wanted = false;
        }
        FireAllLocked();  // as Wait's kDown: they poll meanwhile
        DispatchLocked(lock);
        Changed();
        // Waiters poll meanwhile; try again with backoff.
        bg_cv_.wait_for(lock, retry, [&] { return stopping_; });
        retry = std::min(retry * 2, kMaxRetry);
        continue;
      }
      conn_ = std::move(*conn);
      retry = kFirstRetry;
      down_ = false;
      for (auto& [name, ch] : channels_) ch.state = State::kNone;
      Changed();
      continue;
    }
    ReadTurn(lock, std::chrono::steady_clock::now() + kPollInterval, /*background=*/true);
  }
}

SubscriberReaper::SubscriberReaper()
    : thread_([this](const std::stop_token& stop) { Run(stop); }) {}

SubscriberReaper::~SubscriberReaper() {
  thread_.request_stop();
  thread_.join();
  for (Subscriber* s : queue_) delete s;  // any handed over since
}

void SubscriberReaper::Destroy(Subscriber* s) {
  std::lock_guard lock(mu_);
  queue_.push_back(s);
  cv_.notify_one();
}

void SubscriberReaper::Run(const std::stop_token& stop) {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, stop, [&] { return !queue_.empty(); });
    std::vector<Subscriber*> batch = std::exchange(queue_, {});
    if (batch.empty()) return;  // asked to stop, nothing left
    lock.unlock();
    for (Subscriber* s : batch) delete s;
    lock.lock();
  }
}

}  // namespace dlock::redis
