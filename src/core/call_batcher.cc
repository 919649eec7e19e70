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
    TakeFront(attempts_, attempts, kMaxBatch);
    TakeFront(attempt_answers_, attempt_answers, kMaxBatch);
    TakeFront(releases_, releases, kMaxBatch);
    TakeFront(release_answers_, release_answers, kMaxBatch);
  }
  if (!attempts.empty()) SendAttempts(attempts, attempt_answers);
  if (!releases.empty()) SendReleases(releases, release_answers);
  std::lock_guard lock(mu_);
  --running_;
  if (!attempts_.empty() || !releases_.empty()) PostIfNeededLocked();
}

void CallBatcher::SendAttempts(std::vector<LeaseRequest>& requests,
                               std::vector<AttemptAnswer>& answers) {
  const TimePoint sent = clock_.Now();
  std::vector<Result<Attempt>> got = backend_.TryAcquireMany(requests);
  for (std::size_t i = 0; i < answers.size(); ++i) {
    answers[i](i < got.size() ? std::move(got[i])
                              : InternalError("the store answered fewer attempts than asked"),
               sent);
  }
}

void CallBatcher::SendReleases(std::vector<LeaseRequest>& holdings,
                               std::vector<ReleaseAnswer>& answers) {
  std::vector<Status> got = backend_.ReleaseMany(holdings);
  for (std::size_t i = 0; i < answers.size(); ++i) {
    answers[i](i < got.size() ? std::move(got[i])
                              : InternalError("the store answered fewer releases than asked"));
  }
}

}  // namespace dlock::internal
