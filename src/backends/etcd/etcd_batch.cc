// The etcd backend's batched calls, for the asynchronous API
// (Backend::TryAcquireMany, ReleaseMany): the first transaction of every
// call in the batch is in flight at once on one channel
// (Connection::TxnMany), so a batch costs about one round trip, not one per
// call. What an answer then needs (a lock-delay marker, a queue whose
// first key belongs to a longer name; a refused attempt's holder's time
// left, asked once per holder's lease in the batch) is done call by call,
// as the one-at-a-time call does it.
#include <algorithm>
#include <map>
#include <utility>

#include "backends/etcd/etcd_acquisition.h"
#include "backends/etcd/etcd_backend_impl.h"

namespace dlock::etcd {

std::vector<Result<Attempt>> EtcdBackendImpl::TryAcquireMany(
    std::span<const LeaseRequest> requests) {
  const TimePoint started = Now();
  TimePoint deadline = OpDeadline();
  for (const LeaseRequest& r : requests) deadline = std::min(deadline, AttemptDeadline(r.deadline));
  FlushPending(deadline);
  {
    std::lock_guard l(mu_);
    ReapLocked(started);
  }
  // Single attempts: each takes no place in the queue (TryAcquire's rule).
  std::vector<std::unique_ptr<EtcdAcquisition>> acquisitions;
  std::vector<Result<EtcdAcquisition::FirstRound>> firsts;
  std::vector<pb::TxnRequest> txns;
  for (const LeaseRequest& r : requests) {
    LeaseRequest single = r;
    single.queue_ttl = std::chrono::milliseconds(0);
    acquisitions.push_back(std::make_unique<EtcdAcquisition>(*this, single));
    firsts.push_back(acquisitions.back()->StartTry(started, deadline));
    if (firsts.back().ok()) txns.push_back(std::move(firsts.back()->txn));
  }
  std::vector<Result<pb::TxnResponse>> answers = conn_.TxnMany(txns, deadline);
  std::vector<Result<Attempt>> out;
  out.reserve(requests.size());
  std::size_t next = 0;
  std::map<std::int64_t, std::chrono::milliseconds> time_left;  // by holder's lease
  for (std::size_t i = 0; i < requests.size(); ++i) {
    Result<pb::TxnResponse> answer =
        firsts[i].ok() ? std::move(answers[next++]) : Result<pb::TxnResponse>(UnavailableError(""));
    out.push_back(
        acquisitions[i]->FinishTry(started, std::move(firsts[i]), std::move(answer), &time_left));
  }
  return out;
}

std::vector<Status> EtcdBackendImpl::ReleaseMany(std::span<const LeaseRequest> holdings) {
  const TimePoint deadline = OpDeadline();
  FlushPending(deadline);
  std::vector<std::optional<Place>> places;
  {
    std::lock_guard l(mu_);
    for (const LeaseRequest& h : holdings) places.push_back(TakePlaceLocked(PlaceId(h.key, h.owner)));
  }
  // Sent together: the owner-checked delete of each key this client knows.
  // A waiter's key while etcd looks down, or an owner it knows nothing of,
  // goes as Release would send it, on its own.
  std::vector<pb::TxnRequest> txns;
  std::vector<char> batched(holdings.size(), 0);
  for (std::size_t i = 0; i < holdings.size(); ++i) {
    const std::optional<Place>& p = places[i];
    if (!p || p->member.key.empty() || (!p->granted && conn_.LooksDown())) continue;
    batched[i] = 1;
    txns.push_back(ReleaseTxn(holdings[i].key, p->member));
  }
  std::vector<Result<pb::TxnResponse>> answers = conn_.TxnMany(txns, deadline);
  std::vector<Status> out;
  out.reserve(holdings.size());
  std::size_t next = 0;
  for (std::size_t i = 0; i < holdings.size(); ++i) {
    const std::string& name = holdings[i].key;
    const std::string owner_hex = holdings[i].owner.ToString();
    const std::optional<Place>& p = places[i];
    Status s = batched[i] ? Released(name, owner_hex, p->member, std::move(answers[next++]), deadline)
               : p        ? ReleaseMember(name, owner_hex, p->member, p->granted, deadline)
                          : ReleaseUnknown(name, owner_hex, deadline);
    if (!s.ok() && s.code() != StatusCode::kNotOwner) {
      s = s.WithContext("release " + Quoted(name) + " on " + Describe());
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace dlock::etcd
