#include "harness/member_faults.h"

#include <algorithm>
#include <limits>

#include "dlock/clock.h"

namespace dlock::harness {

bool IsMemberFault(std::string_view kind) {
  return std::find(std::begin(kMemberFaultKinds), std::end(kMemberFaultKinds), kind) !=
         std::end(kMemberFaultKinds);
}

MemberFaults::MemberFaults(LinkedCluster& cluster, Recorder record)
    : cluster_(cluster),
      record_(std::move(record)),
      thread_([this](std::stop_token stop) { Loop(stop); }) {}

MemberFaults::~MemberFaults() {
  EndAll();
  thread_.request_stop();
  wake_.notify_all();
}

void MemberFaults::Loop(std::stop_token stop) {
  for (;;) {
    std::function<Status()> task;
    {
      std::unique_lock lock(mu_);
      if (!wake_.wait(lock, stop, [&] { return !tasks_.empty(); })) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
      working_ = true;
    }
    const Status s = task();
    if (!s.ok()) record_("member-fault-failed", -1, 0, s.message());
    {
      std::lock_guard lock(mu_);
      working_ = false;
    }
    wake_.notify_all();
  }
}

void MemberFaults::Post(std::function<Status()> task) {
  {
    std::lock_guard lock(mu_);
    tasks_.push_back(std::move(task));
  }
  wake_.notify_all();
}

bool MemberFaults::TryStart(std::string_view kind, double length_factor,
                            std::chrono::milliseconds ttl, int holder_member) {
  {
    std::lock_guard lock(mu_);
    if (starting_ || !active_.empty()) return false;
    starting_ = true;
  }
  Post([this, kind = std::string(kind), length_factor, ttl, holder_member] {
    const Status s = Start(kind, length_factor, ttl, holder_member);
    std::lock_guard lock(mu_);
    starting_ = false;
    return s;
  });
  return true;
}

Status MemberFaults::Start(const std::string& kind, double length_factor,
                           std::chrono::milliseconds ttl, int holder_member) {
  DLOCK_ASSIGN_OR_RETURN(const int leader, cluster_.Leader());
  const auto unit = std::max(ttl, std::chrono::milliseconds(1000));
  const auto length_ns = static_cast<std::int64_t>(
      length_factor * static_cast<double>(std::chrono::nanoseconds(unit).count()));
  int member = leader;
  if (kind == "member-isolate") {
    // A follower: the holder's member if it follows, else the next one.
    member = holder_member != leader ? holder_member : leader % cluster_.members() + 1;
  }
  const std::string who =
      "member " + std::to_string(member) + (member == leader ? " (the leader)" : " (a follower)") +
      (member == holder_member ? ", the holder's" : "");
  Active fault{"", member, 0};
  if (kind == "member-isolate" || kind == "leader-isolate") {
    cluster_.Isolate(member);
    fault.end_op = "rejoin";
    record_("isolate", member, length_ns, who + " cut off from the others");
  } else if (kind == "leader-pause") {
    DLOCK_RETURN_IF_ERROR(cluster_.Pause(member));
    fault.end_op = "member-resume";
    record_("member-pause", member, length_ns, who + " stopped (SIGSTOP)");
  } else if (kind == "leader-kill") {
    DLOCK_RETURN_IF_ERROR(cluster_.Kill(member));
    fault.end_op = "member-restart";
    record_("member-kill", member, length_ns, who + " killed (the script's kill)");
  } else if (kind == "leader-lag-kill") {
    DLOCK_ASSIGN_OR_RETURN(fault.held, cluster_.HoldBack());
    fault.end_op = "kill-leader";
    fault.length_ns = length_ns;
    record_("member-hold-back", fault.held, length_ns,
            "member " + std::to_string(fault.held) + " held back: what " + who +
                " writes from now is not replicated; the leader is killed at the end");
  } else {
    return InvalidArgumentError("not a member fault: " + std::string(kind));
  }
  // Timed from now: finding the leader and cutting links take a while.
  fault.until_ns = MonotonicClock::now().time_since_epoch().count() + length_ns;
  std::lock_guard lock(mu_);
  active_.push_back(std::move(fault));
  return Status::Ok();
}

// The second act of leader-lag-kill: the leader dies with its unreplicated
// writes, the follower is let go and promoted; the leader comes back (as a
// follower) after as long again.
Status MemberFaults::KillLeader(const Active& fault, bool last) {
  if (!last) {
    DLOCK_RETURN_IF_ERROR(cluster_.Kill(fault.member));
    record_("member-kill-unreplicated", fault.member, fault.length_ns,
            "the leader, member " + std::to_string(fault.member) +
                ", killed with writes its followers never had");
  }
  DLOCK_RETURN_IF_ERROR(cluster_.Resume(fault.held));
  record_("member-resume", fault.held, 0, "");
  if (last) return Status::Ok();
  std::lock_guard lock(mu_);
  active_.push_back({"member-restart", fault.member,
                     MonotonicClock::now().time_since_epoch().count() + fault.length_ns});
  return Status::Ok();
}

Status MemberFaults::End(const Active& fault, bool last) {
  if (fault.end_op == "kill-leader") return KillLeader(fault, last);
  if (fault.end_op == "rejoin") {
    // Recorded before the links carry bytes again: whatever the member
    // commits from here on may have had the quorum (checker h).
    record_(fault.end_op, fault.member, 0, "");
    cluster_.Rejoin(fault.member);
    return Status::Ok();
  }
  if (fault.end_op == "member-resume") {
    DLOCK_RETURN_IF_ERROR(cluster_.Resume(fault.member));
  } else {
    DLOCK_RETURN_IF_ERROR(cluster_.Restart(fault.member));
  }
  record_(fault.end_op, fault.member, 0, "");
  return Status::Ok();
}

void MemberFaults::EndDue(std::int64_t now_ns) {
  std::vector<Active> due;
  {
    std::lock_guard lock(mu_);
    std::erase_if(active_, [&](const Active& f) {
      if (f.until_ns > now_ns) return false;
      due.push_back(f);
      return true;
    });
  }
  for (Active& f : due) Post([this, f] { return End(f, /*last=*/false); });
}

std::int64_t MemberFaults::NextEnd() const {
  std::lock_guard lock(mu_);
  std::int64_t next = std::numeric_limits<std::int64_t>::max();
  for (const Active& f : active_) next = std::min(next, f.until_ns);
  return next;
}

void MemberFaults::EndAll() {
  std::unique_lock lock(mu_);
  // What is queued or running first (a start may add a fault), then the rest.
  wake_.wait(lock, [&] { return tasks_.empty() && !working_; });
  std::vector<Active> all = std::move(active_);
  active_.clear();
  lock.unlock();
  for (const Active& f : all) {
    if (const Status s = End(f, /*last=*/true); !s.ok()) {
      record_("member-fault-failed", -1, 0, s.message());
    }
  }
}

}  // namespace dlock::harness
