// EtcdAcquisition: one acquisition of one lock by one owner, the shape of
// etcd's concurrency.Mutex. The first Try puts this owner's member (unless
// it exists) and reads the queue in one transaction; when others are ahead,
// Wait watches the one whose going may let it in; the next Try reads again.
// It owns its member key and revision and what it watches; once granted,
// the holding is the backend's, by (lock name, owner), for Renew and
// Release.
//
// Each Try is read -> decide -> act: read the queue (ReadTxn once the
// member's revision is known, else PutTxn: the two transaction shapes),
// decide (Decide in etcd_queue.h: the sharing rule), then act (put the
// lock-delay marker and report the grant, leave the queue, or record what
// Wait watches).
//
// Thread-safety: as Acquisition, calls never overlap but may come from
// different threads. What other threads read (member()) changes only under
// the backend's mu_.
#ifndef DLOCK_SRC_BACKENDS_ETCD_ETCD_ACQUISITION_H_
#define DLOCK_SRC_BACKENDS_ETCD_ETCD_ACQUISITION_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <utility>

#include "backends/etcd/etcd_backend_impl.h"

namespace dlock::etcd {

class EtcdAcquisition final : public Acquisition {
 public:
  EtcdAcquisition(EtcdBackendImpl& backend, const LeaseRequest& request);
  // Leaves a queued (or unsure) member to the backend as a place that
  // lapses queue_ttl after the last attempt: a waiter that died.
  ~EtcdAcquisition() override;
  EtcdAcquisition(const EtcdAcquisition&) = delete;
  EtcdAcquisition& operator=(const EtcdAcquisition&) = delete;

  Result<Attempt> Try() override;

  // One round of requests with one session.
  struct Round {
    std::shared_ptr<Session> session;
    TimePoint started;
    TimePoint deadline;
    std::optional<KeepAliveCall> keep_alive;  // sent with this round's read
  };
  // Try in two halves, for TryAcquireMany, which sends the first rounds of
  // many acquisitions together (Connection::TxnMany): StartTry begins the
  // first round and gives its transaction; FinishTry takes that
  // transaction's answer (or StartTry's failure) and ends the attempt as Try
  // would, any further round on its own. The caller flushes pending deletes
  // and reaps places once for the whole batch.
  struct FirstRound {
    Round round;
    bool queued = false;  // the read of a member already queued, else the put
    pb::TxnRequest txn;
  };
  Result<FirstRound> StartTry(TimePoint started, TimePoint deadline);
  // `time_left`: the holders' time left by lease, shared by the batch.
  Result<Attempt> FinishTry(TimePoint started, Result<FirstRound> first,
                            Result<pb::TxnResponse> answer,
                            std::map<std::int64_t, std::chrono::milliseconds>* time_left);

  bool Wait(TimePoint until, std::stop_token stop) override;
  // Wait's watch, on the connection's shared watch stream: `wake` runs on
  // the stream's gRPC thread. False (the core polls) only when there is
  // nothing to watch: a single attempt, or a session already gone.
  bool Notify(std::function<void()> wake) override;
  void StopNotify() override;
  void Abandon() override;

  // For the backend, under its mu_: this acquisition's member, and a wake-up
  // for its Wait (its session is gone, and its key with it). A Notify's
  // watch is handed back, for the backend to fire once mu_ is released.
  const Member& member() const { return member_; }
  // For the backend's KeepPlaces, under its mu_: whether this is `owner`'s
  // acquisition and its last Try left it a place in the queue; if so, a
  // drop keeps that place until `until` at least.
  bool KeepPlaceLocked(const OwnerId& owner, TimePoint until);
  DeleteNotice WakeLocked() {
    if (waking_) waking_->request_stop();
    return std::exchange(notice_, {});
  }

 private:
  // A round's transaction and its answer.
  struct Answered {
    Round round;
    bool queued = false;
    Result<pb::TxnResponse> answer;
  };
  // What Wait watches for a deletion: one key (range_end empty; `revision`
  // its create_revision) or a range (`revision` the newest create_revision
  // that counts, `expected` how many such keys there were at `seen_at`).
  // An empty key: nothing to watch.
  struct WatchTarget {
    std::string key;
    std::string range_end;
    std::int64_t revision = 0;
    std::int64_t expected = 0;
    std::int64_t seen_at = 0;  // the store revision it was read at (0: unknown)
  };
  // nullopt: start another round (the session or our key is gone).
  using RoundResult = Result<std::optional<Attempt>>;

  bool sharing() const { return limit_ != 1; }
  // Up to three rounds, the first `first` when given (already answered).
  Result<Attempt> Rounds(TimePoint started, TimePoint deadline, Answered* first);
  // What an attempt that started at `started` leaves behind, and its answer.
  Result<Attempt> Ended(TimePoint started, Result<Attempt> result);
  Result<Round> StartRound(TimePoint started, TimePoint deadline);
  void TakeKeyLocked(std::shared_ptr<Session> session);

  // Read: one transaction, ReadTxn once our member is queued (its revision
  // known), else PutTxn; FromRead and FromPut make a view of its answer.
  pb::TxnRequest ReadTxn() const;
  pb::TxnRequest PutTxn(const Round& round) const;
  // Whether PutTxn puts only into an empty queue (a single exclusive attempt).
  bool IntoEmptyQueue() const;
  Result<std::optional<QueueView>> FromRead(Answered& sent);
  Result<std::optional<QueueView>> FromPut(Answered& sent);
  Result<std::optional<QueueView>> RefusedUnput(std::int64_t read_at, const pb::TxnResponse& got,
                                                TimePoint deadline);
  QueueView SharingView(std::int64_t read_at, const pb::RangeResponse& queue,
                        const pb::RangeResponse& markers) const;
  Result<QueueView> WriterView(std::int64_t read_at, const pb::RangeResponse& first,
                               bool predecessor_known,
                               const std::optional<QueueMember>& predecessor,
                               const pb::RangeResponse& markers, TimePoint deadline);
  std::vector<QueueMember> MarkersOf(const pb::RangeResponse& markers) const;

  // Act.
  RoundResult Act(Round& round, const QueueView& view, const QueueStep& step);
  Result<bool> ConfirmSession(Round& round);
  Result<bool> PutMarker(const Round& round);
  Result<std::shared_ptr<Session>> MarkerLease(const Session& session, TimePoint deadline);
  Attempt Grant(const Round& round);
  Attempt LeaveQueue(const Round& round, const QueueStep& step);
  std::chrono::milliseconds TimeLeft(std::int64_t lease, const Round& round);
  Status RecordWatch(const Round& round, const QueueView& view, const QueueStep& step);

  EtcdBackendImpl& backend_;
  const LeaseRequest request_;
  const PlaceId id_;
  const std::string prefix_;        // the lock's queue
  const std::string delay_prefix_;  // its markers
  const std::string owner_hex_;
  const std::uint32_t limit_;
  Member member_;
  // If dropped now, its place lapses then: queue_ttl after the last
  // attempt or KeepPlaces, at least a TTL after one whose answer was lost.
  // Under mu_ (KeepPlaces runs beside a Try).
  TimePoint keep_until_{};
  // The last Try left a place in the queue (waiting, not granted, not a
  // single attempt): what KeepPlaces keeps. Under mu_.
  bool has_place_ = false;
  bool granted_ = false;  // the last Try granted: the holding is the backend's
  // PutTxn puts unconditionally (a single attempt whose queue holds only
  // a longer name's keys).
  bool plain_put_ = false;
  // FinishTry's: TimeLeft's answers, shared by a batch (null: none).
  std::map<std::int64_t, std::chrono::milliseconds>* time_left_ = nullptr;
  WatchTarget watch_;
  std::stop_source* waking_ = nullptr;  // the Wait in progress; under mu_
  DeleteNotice notice_;                 // what Notify arranged; under mu_
};

}  // namespace dlock::etcd

#endif  // DLOCK_SRC_BACKENDS_ETCD_ETCD_ACQUISITION_H_
