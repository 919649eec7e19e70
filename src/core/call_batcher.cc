#include "core/call_batcher.h"

#include <algorithm>
#include <utility>

#include "core/async_driver.h"

namespace dlock::internal {
namespace {

// Moves up to `n` of `from`'s first entries to `to`.
template <typename T>
void TakeFront(std::deque<T>& from, std::vector<T>& to, std::size_t n) {
  n = std::min(n, from.size());
  to.assign(std::make_move_iterator(from.begin()), std::make_move_iterator(from.begin() + n));
  from.erase(from.begin(), from.begin() + n);
}

}  // namespace

CallBatcher::CallBatcher(Backend& backend, AsyncDriver& driver, Clock& clock,
                         unsigned max_running)
    : backend_(backend), driver_(driver), clock_(clock), max_running_(std::max(1U, max_running)) {}

void CallBatcher::QueueAttempt(LeaseRequest request, AttemptAnswer answer) {
  std::lock_guard lock(mu_);
  attempts_.push_back(std::move(request));
  attempt_answers_.push_back(std::move(answer));
  PostIfNeededLocked();
}

void CallBatcher::QueueRelease(LeaseRequest holding, ReleaseAnswer answer) {
  std::lock_guard lock(mu_);
  releases_.push_back(std::move(holding));
  release_answers_.push_back(std::move(answer));
  PostIfNeededLocked();
}

void CallBatcher::PostIfNeededLocked() {
  // A new job only while fewer run than the workers: the calls queued
  // meanwhile wait for the next batch rather than take a round trip each.
  if (running_ >= max_running_) return;
  ++running_;
  driver_.Post([this] { Drain(); });
}

void CallBatcher::Drain() {
  std::vector<LeaseRequest> attempts, releases;
  std::vector<AttemptAnswer> attempt_answers;
  std::vector<ReleaseAnswer> release_answers;
  {
    std::lock_guard lock(mu_);
    const std::size_t attempt_count = FittingLocked(attempts_);
    TakeFront(attempts_, attempts, attempt_count);
    TakeFront(attempt_answers_, attempt_answers, attempt_count);
    const std::size_t release_count = FittingLocked(releases_);
    TakeFront(releases_, releases, release_count);
    TakeFront(release_answers_, release_answers, release_count);
  }
  // Releases first: each ends a lease that ages while it waits, where an
  // attempt's lease starts only when its batch is sent.
  if (!releases.empty()) SendReleases(releases, release_answers);
  if (!attempts.empty()) SendAttempts(attempts, attempt_answers);
  std::lock_guard lock(mu_);
  --running_;
  if (!attempts_.empty() || !releases_.empty()) PostIfNeededLocked();
}

std::size_t CallBatcher::FittingLocked(const std::deque<LeaseRequest>& queue) const {
  const std::size_t most = std::min(queue.size(), kMaxBatch);
  if (per_call_ <= Duration::zero()) return std::min(most, kFirstBatch);
  Duration shortest = Duration::max();
  std::size_t n = 0;
  for (; n < most; ++n) {
    if (queue[n].ttl > Duration::zero()) shortest = std::min<Duration>(shortest, queue[n].ttl);
    const auto calls = static_cast<Duration::rep>(n + 1);
    if (n > 0 && per_call_ * calls > shortest / kTtlShare) break;
  }
  return n;
}

void CallBatcher::Measured(std::size_t calls, Duration took) {
  std::lock_guard lock(mu_);
  per_call_ = std::max(Duration(1), took / static_cast<Duration::rep>(calls));
}

void CallBatcher::SendAttempts(std::vector<LeaseRequest>& requests,
                               std::vector<AttemptAnswer>& answers) {
  const TimePoint sent = clock_.Now();
  std::vector<Result<Attempt>> got = backend_.TryAcquireMany(requests);
  Measured(requests.size(), clock_.Now() - sent);
  for (std::size_t i = 0; i < answers.size(); ++i) {
    answers[i](i < got.size() ? std::move(got[i])
                              : InternalError("the store answered fewer attempts than asked"),
               sent);
  }
}

void CallBatcher::SendReleases(std::vector<LeaseRequest>& holdings,
                               std::vector<ReleaseAnswer>& answers) {
  const TimePoint sent = clock_.Now();
  std::vector<Status> got = backend_.ReleaseMany(holdings);
  Measured(holdings.size(), clock_.Now() - sent);
  for (std::size_t i = 0; i < answers.size(); ++i) {
    answers[i](i < got.size() ? std::move(got[i])
                              : InternalError("the store answered fewer releases than asked"));
  }
}

}  // namespace dlock::internal
