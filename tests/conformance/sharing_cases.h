// The sharing rule of backend.h as a table of cases. The core's pure
// DecideQueue (tests/core/sharing_test.cc) and every store that shares keys
// (tests/conformance: the C++ stores, PostgreSQL's SQL, Redis's Lua) must
// give the same answers.
//
// A case is a sequence of steps on one key. Arrivals are numbered from 0 in
// order; each is one owner that holds or waits, with its own limit
// (1 a writer, N a semaphore permit, kSharedLimit a reader).
#ifndef DLOCK_TESTS_CONFORMANCE_SHARING_CASES_H_
#define DLOCK_TESTS_CONFORMANCE_SHARING_CASES_H_

#include <cstdint>
#include <vector>

#include "dlock/types.h"

namespace dlock::testing {

struct SharingStep {
  enum class Kind {
    kArrive,  // a new owner with `limit` attempts and keeps its place
    kLeave,   // arrival `who` releases (its holding, or its place)
    kRetry,   // arrival `who`, still waiting, attempts again
  };
  Kind kind;
  std::uint32_t limit = 0;  // kArrive
  std::size_t who = 0;      // kLeave, kRetry
  bool granted = false;     // kArrive, kRetry: what the attempt must answer
};

struct SharingCase {
  const char* name;
  std::vector<SharingStep> steps;
};

inline SharingStep Arrive(std::uint32_t limit, bool granted) {
  return {SharingStep::Kind::kArrive, limit, 0, granted};
}
inline SharingStep Leave(std::size_t who) { return {SharingStep::Kind::kLeave, 0, who, false}; }
inline SharingStep Retry(std::size_t who, bool granted) {
  return {SharingStep::Kind::kRetry, 0, who, granted};
}

inline const std::vector<SharingCase>& SharingCases() {
  constexpr std::uint32_t R = kSharedLimit;
  constexpr bool G = true, W = false;  // granted, waits
  static const std::vector<SharingCase> cases = {
      {"mutex_in_arrival_order",
       {Arrive(1, G), Arrive(1, W), Arrive(1, W), Leave(0), Retry(2, W), Retry(1, G), Leave(1),
        Retry(2, G)}},
      {"readers_share", {Arrive(R, G), Arrive(R, G), Arrive(R, G)}},
      {"a_writer_waits_for_readers", {Arrive(R, G), Arrive(R, G), Arrive(1, W), Leave(0),
                                      Retry(2, W), Leave(1), Retry(2, G)}},
      {"readers_queue_behind_a_waiting_writer",
       {Arrive(R, G), Arrive(1, W), Arrive(R, W), Leave(0), Retry(2, W), Retry(1, G), Leave(1),
        Retry(2, G)}},
      {"readers_behind_a_writer_go_in_together",
       {Arrive(1, G), Arrive(R, W), Arrive(R, W), Leave(0), Retry(2, G), Retry(1, G),
        Arrive(R, G)}},
      {"a_reader_is_refused_by_a_holding_writer", {Arrive(1, G), Arrive(R, W)}},
      {"semaphore_of_three",
       {Arrive(3, G), Arrive(3, G), Arrive(3, G), Arrive(3, W), Leave(1), Retry(3, G),
        Arrive(3, W)}},
      {"the_smallest_limit_rules",
       {Arrive(3, G), Arrive(2, G), Arrive(3, W), Leave(0), Retry(2, G), Arrive(5, W)}},
      {"a_larger_limit_behind_a_smaller_one", {Arrive(2, G), Arrive(5, G), Arrive(5, W)}},
      {"a_writer_behind_permits_and_permits_behind_it",
       {Arrive(3, G), Arrive(1, W), Arrive(3, W), Leave(0), Retry(2, W), Retry(1, G), Leave(1),
        Retry(2, G)}},
      {"a_leaving_waiter_lets_those_behind_it_in",
       {Arrive(R, G), Arrive(1, W), Arrive(R, W), Leave(1), Retry(2, G)}},
  };
  return cases;
}

}  // namespace dlock::testing

#endif  // DLOCK_TESTS_CONFORMANCE_SHARING_CASES_H_
