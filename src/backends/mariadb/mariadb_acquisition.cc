// MariaDbAcquisition: one acquire of one key by one owner (Backend::Begin).
//
// A waiting one (queue_ttl > 0) keeps a place in the key's queue between its
// attempts. A refused attempt answers who stands ahead, in queue order;
// DecideQueue (the sharing rule's queue side, written once in the core)
// names the one whose departure could let this one in, and Wait blocks
// until that one's wake-up name is let go of (Waker). Its calls may come
// from different threads, one after the other.
#include <chrono>

#include "backends/mariadb/mariadb_backend_impl.h"
#include "dlock/sharing.h"

namespace dlock::mariadb {
namespace {

using std::chrono::milliseconds;

// The owner to wait for, from what stands ahead of a refused attempt: empty
// when no single departure helps (only lock-delays stand in the way), and
// the core's own bound on the wait (the holder's time left, a second at
// most) is all there is.
std::string ChooseWatch(const std::vector<Ahead>& ahead, std::uint32_t limit) {
  std::vector<std::uint32_t> limits, delayed;
  std::vector<const Ahead*> order;
  for (const Ahead& a : ahead) {
    if (a.kind == Ahead::Kind::kDelayed) {
      delayed.push_back(a.limit);
    } else {
      limits.push_back(a.limit);
      order.push_back(&a);
    }
  }
  const QueueDecision decision = DecideQueue(limits, delayed, limit);
  switch (decision.outcome) {
    case QueueDecision::Outcome::kWatchOne:
      return decision.watch < order.size() ? order[decision.watch]->owner : "";
    case QueueDecision::Outcome::kWatchAll:
      // Any of them leaving would do; a session waits on one name, so wait
      // on the first (the core tries again within a second regardless).
      return order.empty() ? "" : order.front()->owner;
    default:
      return "";
  }
}

class MariaDbAcquisition final : public Acquisition {
 public:
  MariaDbAcquisition(MariaDbBackend& backend, LeaseRequest request, Status valid)
      : backend_(backend), request_(std::move(request)), valid_(std::move(valid)) {}

  ~MariaDbAcquisition() override {
    // A waiter that dies: its place lapses by itself; its name goes now.
    if (waiting() && sent_ && !granted_ && !abandoned_) backend_.DropName(request_.owner.ToString());
  }

  Result<Attempt> Try() override;
  bool Wait(TimePoint until, std::stop_token stop) override;
  void Abandon() override;

 private:
  bool waiting() const { return request_.queue_ttl > milliseconds(0); }

  MariaDbBackend& backend_;
  const LeaseRequest request_;
  const Status valid_;
  // Whom the next Wait waits for (an owner id); empty: nobody in particular.
  std::string watch_;
  // An owner whose name a Wait found free although it still stood ahead
  // (its session went away): not waited on again while it stays there.
  std::string found_free_;
  bool sent_ = false;
  // A waiting attempt was sent and no grant answered it: the owner may have
  // a place in the queue.
  bool may_hold_place_ = false;
  // The last attempt's outcome is unknown: it may have granted.
  bool may_be_granted_ = false;
  bool granted_ = false;
  bool abandoned_ = false;
};

Result<Attempt> MariaDbAcquisition::Try() {
  DLOCK_RETURN_IF_ERROR(valid_);
  sent_ = true;
  // Until it holds a place, an attempt may take the lean form first.
  const bool lean_first = !may_hold_place_;
  if (waiting()) may_hold_place_ = true;  // before sending: if the reply is lost, it may exist
  Result<AttemptReply> reply = backend_.RunAttempt(request_, lean_first);
  if (!reply.ok()) {
    if (reply.status().code() == StatusCode::kUnavailable) may_be_granted_ = true;
    return reply.status();
  }
  // An answer: an earlier attempt whose reply was lost granted nothing that
  // still stands, or this one has it back.
  may_be_granted_ = false;
  if (reply->attempt.granted) {
    granted_ = true;
    may_hold_place_ = false;  // the grant removed the place
    watch_.clear();
    return reply->attempt;
  }
  if (waiting()) {
    watch_ = ChooseWatch(reply->ahead, request_.limit);
    if (watch_ != found_free_) found_free_.clear();
  }
  return reply->attempt;
}

bool MariaDbAcquisition::Wait(TimePoint until, std::stop_token stop) {
  if (!waiting() || granted_ || !sent_) return false;
  Clock& clock = backend_.clock();
  if (watch_.empty() || watch_ == found_free_) {
    // Nobody to be woken by: the core's bound is the wake-up (the holder's
    // time left, or its next refresh of the place).
    clock.SleepUntil(until, std::move(stop));
    return true;
  }
  const SteadyTime steady_until = SteadyClock::now() + (until - clock.Now());
  switch (backend_.waker().WaitFor(WakeName(watch_), steady_until, std::move(stop))) {
    case Waker::Outcome::kWasFree:
      found_free_ = watch_;
      return true;
    case Waker::Outcome::kReleased:
    case Waker::Outcome::kTimedOut:
    case Waker::Outcome::kCancelled:
      return true;
    case Waker::Outcome::kUnavailable:
      break;
  }
  return false;  // the core backs off instead
}

void MariaDbAcquisition::Abandon() {
  abandoned_ = true;
  // The release procedure leaves the queue, frees a grant whose reply was
  // lost, and lets go of the wake-up name.
  if ((may_hold_place_ || may_be_granted_) &&
      !backend_.Release(request_.key, request_.owner).ok()) {
    backend_.DropName(request_.owner.ToString());  // the place lapses; the name goes now
  }
  may_hold_place_ = false;
  may_be_granted_ = false;
}

}  // namespace

std::unique_ptr<Acquisition> MakeAcquisition(MariaDbBackend& backend, const LeaseRequest& request,
                                             Status valid) {
  return std::make_unique<MariaDbAcquisition>(backend, request, std::move(valid));
}

}  // namespace dlock::mariadb
