#include "harness/member_faults.h"

#include <algorithm>
#include <limits>

#include "dlock/clock.h"

namespace dlock::harness {

bool IsMemberFault(std::string_view kind) {
  return std::find(std::begin(kMemberFaultKinds), std::end(kMemberFaultKinds), kind) !=
         std::end(kMemberFaultKinds);
}

Status MemberFaults::Inject(std::string_view kind, double length_factor,
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
    record_("member-kill", member, length_ns, who + " killed (SIGKILL)");
  } else {
    return InvalidArgumentError("not a member fault: " + std::string(kind));
  }
  // Timed from now: finding the leader and cutting links take a while.
  fault.until_ns = MonotonicClock::now().time_since_epoch().count() + length_ns;
  active_.push_back(std::move(fault));
  return Status::Ok();
}

Status MemberFaults::End(const Active& fault) {
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

Status MemberFaults::EndDue(std::int64_t now_ns) {
  std::vector<Active> due;
  std::erase_if(active_, [&](const Active& f) {
    if (f.until_ns > now_ns) return false;
    due.push_back(f);
    return true;
  });
  for (const Active& f : due) DLOCK_RETURN_IF_ERROR(End(f));
  return Status::Ok();
}

std::int64_t MemberFaults::NextEnd() const {
  std::int64_t next = std::numeric_limits<std::int64_t>::max();
  for (const Active& f : active_) next = std::min(next, f.until_ns);
  return next;
}

Status MemberFaults::EndAll() {
  return EndDue(std::numeric_limits<std::int64_t>::max());
}

}  // namespace dlock::harness
