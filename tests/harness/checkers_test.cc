// Every checker must be able to fail: each test hands it a small, hand-made
// history with exactly the defect it exists to catch, and a clean one.
#include "harness/checkers.h"

#include <tuple>
#include <vector>

#include <gtest/gtest.h>

namespace dlock::harness {
namespace {

constexpr std::int64_t kMs = 1'000'000;

Event Ev(std::int64_t t_ms, int worker, std::string op, EventType type, FencingToken token = 0,
         std::int64_t value = -1, std::string error = {}) {
  Event e;
  e.t_ns = t_ms * kMs;
  e.worker = worker;
  e.op = std::move(op);
  e.type = type;
  e.token = token;
  e.value = value;
  e.error = std::move(error);
  return e;
}

LoggedOp Write(std::int64_t seq, int worker, FencingToken token, std::int64_t read,
               std::int64_t value) {
  return LoggedOp{seq, true, worker, token, read, value};
}
LoggedOp Read(std::int64_t seq, int worker, FencingToken token, std::int64_t value) {
  return LoggedOp{seq, false, worker, token, -1, value};
}

// Worker w: acquire (token) at t, read v, write v+1 (admitted), release.
void Cycle(History& h, std::int64_t t, int w, FencingToken token, std::int64_t v) {
  h.events.push_back(Ev(t, w, "acquire", EventType::kInvoke));
  h.events.push_back(Ev(t + 1, w, "acquire", EventType::kOk, token));
  h.events.push_back(Ev(t + 2, w, "read", EventType::kOk, token, v));
  h.events.push_back(Ev(t + 3, w, "write", EventType::kInvoke, token, v + 1));
  h.events.push_back(Ev(t + 4, w, "write", EventType::kOk, token, v + 1));
  const std::int64_t seq = static_cast<std::int64_t>(h.log.size()) + 1;
  h.log.push_back(Read(seq, w, token, v));
  h.log.push_back(Write(seq + 1, w, token, v, v + 1));
  h.final_counter = v + 1;
}

// A clean history with a pause whose stale write was rejected.
History Clean() {
  History h;
  h.ttl_ms = 100;
  Cycle(h, 0, 0, 1, 0);
  Cycle(h, 10, 1, 2, 1);
  // Worker 0 takes token 3, reads 2, is paused; worker 1 takes over.
  h.events.push_back(Ev(20, 0, "acquire", EventType::kInvoke));
  h.events.push_back(Ev(21, 0, "acquire", EventType::kOk, 3));
  h.events.push_back(Ev(22, 0, "read", EventType::kOk, 3, 2));
  h.log.push_back(Read(5, 0, 3, 2));
  Event pause = Ev(23, -1, "pause", EventType::kInfo, 0, /*target=*/0);
  pause.duration_ns = 300 * kMs;
  h.events.push_back(pause);
  Cycle(h, 130, 1, 4, 2);
  // Worker 1 talks to member 1, which is cut off from the others for a
  // while: its acquire there gets nothing; after the rejoin it is granted.
  h.events.push_back(Ev(0, 1, "member", EventType::kInfo, 0, /*member=*/1));
  h.events.push_back(Ev(140, -1, "isolate", EventType::kInfo, 0, /*member=*/1));
  h.events.push_back(Ev(150, 1, "acquire", EventType::kInvoke));
  h.events.push_back(Ev(180, 1, "acquire", EventType::kUnknown, 0, -1, "no answer"));
  h.events.push_back(Ev(200, -1, "rejoin", EventType::kInfo, 0, 1));
  Cycle(h, 210, 1, 5, 3);
  h.events.push_back(Ev(323, -1, "resume", EventType::kInfo, 0, 0));
  h.events.push_back(Ev(324, 0, "write", EventType::kInvoke, 3, 3));
  h.events.push_back(Ev(325, 0, "write", EventType::kFail, 3, 3, "stale token 3 < 5 for key k"));
  std::stable_sort(h.events.begin(), h.events.end(),
                   [](const Event& a, const Event& b) { return a.t_ns < b.t_ns; });
  return h;
}

const CheckResult& Find(const std::vector<CheckResult>& checks, const std::string& id) {
  for (const auto& c : checks) {
    if (c.id == id) return c;
  }
  static CheckResult none;
  ADD_FAILURE() << "no checker " << id;
  return none;
}

TEST(CheckersTest, CleanHistoryPassesEveryChecker) {
  auto checks = RunCheckers(Clean(), {});
  for (const auto& c : checks) {
    EXPECT_EQ(c.verdict, Verdict::kPass) << c.id << " " << c.name << ": " << c.detail;
  }
}

TEST(CheckersTest, EmptyHistoryIsUnknownNeverPass) {
  History h;
  h.ttl_ms = 100;
  for (const auto& c : RunCheckers(h, {})) {
    EXPECT_EQ(c.verdict, Verdict::kUnknown) << c.id << ": " << c.detail;
  }
}

TEST(CheckersTest, A_TokenGoingBackwardsFails) {
  History h = Clean();
  h.log.push_back(Write(100, 2, 2, 3, 4));  // token 2 after 4
  h.final_counter = 4;
  EXPECT_EQ(Find(RunCheckers(h, {}), "a").verdict, Verdict::kFail);
}

TEST(CheckersTest, B_OverlappingCriticalSectionsFail) {
  History h = Clean();
  // Two admitted writes that both read 3.
  h.log.push_back(Write(100, 2, 5, 3, 4));
  h.log.push_back(Write(101, 3, 6, 3, 4));
  h.final_counter = 4;
  auto b = Find(RunCheckers(h, {}), "b");
  EXPECT_EQ(b.verdict, Verdict::kFail);
  ASSERT_FALSE(b.violations.empty());
  EXPECT_NE(b.violations[0].find("overlapped"), std::string::npos);
}

TEST(CheckersTest, C_StaleWriteAdmittedFails) {
  History h = Clean();
  // The paused holder's write (token 3) admitted after token 4 was seen.
  h.log.push_back(Write(100, 0, 3, 2, 3));
  EXPECT_EQ(Find(RunCheckers(h, {}), "c").verdict, Verdict::kFail);
}

TEST(CheckersTest, D_CounterLostInAFailoverFails) {
  History h = Clean();
  // A grant invoked after token 4's grant completed, yet given token 2
  // again: the store's counter went back.
  h.events.push_back(Ev(400, 2, "acquire", EventType::kInvoke));
  h.events.push_back(Ev(401, 2, "acquire", EventType::kOk, 2));
  auto d = Find(RunCheckers(h, {}), "d");
  EXPECT_EQ(d.verdict, Verdict::kFail);
  ASSERT_FALSE(d.violations.empty());
  EXPECT_NE(d.violations[0].find("token 2"), std::string::npos);
}

TEST(CheckersTest, E_LostUpdateFails) {
  History h = Clean();
  h.final_counter = 2;  // three writes admitted
  EXPECT_EQ(Find(RunCheckers(h, {}), "e").verdict, Verdict::kFail);
}

TEST(CheckersTest, F_NoGrantLongAfterAFaultFails) {
  History h = Clean();
  h.events.push_back(Ev(500, -1, "kill", EventType::kInfo, 0, 1));
  h.events.push_back(Ev(3000, 2, "acquire", EventType::kInvoke));  // run goes on, no grant
  auto f = Find(RunCheckers(h, {}), "f");
  EXPECT_EQ(f.verdict, Verdict::kFail);
  EXPECT_FALSE(f.safety);
}

TEST(CheckersTest, H_GrantFromAnIsolatedMemberFails) {
  History h = Clean();
  h.events.push_back(Ev(160, 1, "acquire", EventType::kInvoke));
  h.events.push_back(Ev(170, 1, "acquire", EventType::kOk, 6));
  std::stable_sort(h.events.begin(), h.events.end(),
                   [](const Event& a, const Event& b) { return a.t_ns < b.t_ns; });
  auto c = Find(RunCheckers(h, {}), "h");
  EXPECT_EQ(c.verdict, Verdict::kFail) << c.detail;
  EXPECT_TRUE(c.safety);
}

TEST(CheckersTest, H_GrantAskedForBeforeTheCutIsNotCounted) {
  // Asked before the isolation, answered in it: the member may have had
  // the grant committed before it was cut off.
  History h = Clean();
  h.events.push_back(Ev(135, 1, "acquire", EventType::kInvoke));
  h.events.push_back(Ev(145, 1, "acquire", EventType::kOk, 6));
  std::stable_sort(h.events.begin(), h.events.end(),
                   [](const Event& a, const Event& b) { return a.t_ns < b.t_ns; });
  EXPECT_EQ(Find(RunCheckers(h, {}), "h").verdict, Verdict::kPass);
}

TEST(CheckersTest, I_NoGrantLongAfterAMemberFaultEndsFails) {
  History h = Clean();
  h.events.push_back(Ev(500, -1, "member-kill", EventType::kInfo, 0, 2));
  h.events.push_back(Ev(900, -1, "member-restart", EventType::kInfo, 0, 2));
  h.events.push_back(Ev(9000, 2, "acquire", EventType::kInvoke));  // run goes on, no grant
  auto c = Find(RunCheckers(h, {}), "i");
  EXPECT_EQ(c.verdict, Verdict::kFail) << c.detail;
  EXPECT_FALSE(c.safety);
}

TEST(CheckersTest, I_AFaultEndAfterTheWorkloadIsNotJudged) {
  // The workers stopped 100 ms after the member came back; the run wound
  // down for 69 s more (a failover awaited, in vain): no grant was missed,
  // and only Clean()'s rejoin is judged.
  History h = Clean();
  h.events.push_back(Ev(500, -1, "member-hold-back", EventType::kInfo, 0, 2));
  h.events.push_back(Ev(900, -1, "member-resume", EventType::kInfo, 0, 2));
  h.events.push_back(Ev(1000, 2, "acquire", EventType::kInvoke));
  h.events.push_back(Ev(70000, -1, "member-fault-failed", EventType::kInfo));
  auto c = Find(RunCheckers(h, {}), "i");
  EXPECT_EQ(c.verdict, Verdict::kPass) << c.detail;
  EXPECT_TRUE(c.violations.empty());
}

TEST(CheckersTest, I_AFaultBeforeTheNextGrantMovesTheMeasure) {
  // The second fault never ends: nothing after the first can be judged.
  History h = Clean();
  h.events.push_back(Ev(500, -1, "member-pause", EventType::kInfo, 0, 2));
  h.events.push_back(Ev(900, -1, "member-resume", EventType::kInfo, 0, 2));
  h.events.push_back(Ev(1000, -1, "isolate", EventType::kInfo, 0, 3));
  h.events.push_back(Ev(9000, 2, "acquire", EventType::kInvoke));
  EXPECT_EQ(Find(RunCheckers(h, {}), "i").verdict, Verdict::kPass);
}

TEST(CheckersTest, G_StaleWriteAdmittedAfterAPauseFails) {
  History h = Clean();
  // Same story, but the paused holder's write was admitted.
  for (auto& e : h.events) {
    if (e.worker == 0 && e.op == "write" && e.type == EventType::kFail) {
      e.type = EventType::kOk;
      e.error.clear();
    }
  }
  EXPECT_EQ(Find(RunCheckers(h, {}), "g").verdict, Verdict::kFail);
}

// Regression (campaign run 1001, SQLite): the paused worker died while
// stopped and was restarted; the new process's first write, with a token
// of its own, is not the paused holder's stale write.
TEST(CheckersTest, G_ARestartedWorkersWriteIsNotThePausedOnes) {
  History h = Clean();
  std::vector<Event> kept;
  for (const Event& e : h.events) {
    if (!(e.worker == 0 && e.op == "write" && e.token == 3)) kept.push_back(e);  // died paused
  }
  h.events = kept;
  std::int64_t t = h.events.back().t_ns / kMs + 10;
  for (auto [op, type, token] : {std::tuple{"acquire", EventType::kOk, FencingToken{5}},
                                 std::tuple{"read", EventType::kOk, FencingToken{5}},
                                 std::tuple{"write", EventType::kOk, FencingToken{5}}}) {
    Event e = Ev(t++, 0, op, type, token, 3);
    e.incarnation = 1;
    h.events.push_back(e);
  }
  auto g = Find(RunCheckers(h, {}), "g");
  EXPECT_NE(g.verdict, Verdict::kFail) << g.detail;
  EXPECT_NE(g.detail.find("tested nothing"), std::string::npos) << g.detail;
}

TEST(CheckersTest, G_PauseThatTestedNothingSaysSo) {
  History h;
  h.ttl_ms = 100;
  Cycle(h, 0, 0, 1, 0);
  Event pause = Ev(2, -1, "pause", EventType::kInfo, 0, 0);  // inside worker 0's hold
  pause.duration_ns = 10 * kMs;
  h.events.push_back(pause);
  std::stable_sort(h.events.begin(), h.events.end(),
                   [](const Event& a, const Event& b) { return a.t_ns < b.t_ns; });
  auto g = Find(RunCheckers(h, {}), "g");
  EXPECT_EQ(g.verdict, Verdict::kUnknown);
  EXPECT_NE(g.detail.find("tested nothing"), std::string::npos) << g.detail;
}

TEST(CheckersTest, HistoryLinesRoundTrip) {
  Event e = Ev(5, 2, "write", EventType::kFail, 7, 8, "stale token 7 < 9 for key k");
  e.duration_ns = 3;
  e.wall_ns = 11;
  e.incarnation = 1;
  auto back = ParseJsonLine(ToJsonLine(e));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->t_ns, e.t_ns);
  EXPECT_EQ(back->worker, 2);
  EXPECT_EQ(back->incarnation, 1);
  EXPECT_EQ(back->op, "write");
  EXPECT_EQ(back->type, EventType::kFail);
  EXPECT_EQ(back->token, 7u);
  EXPECT_EQ(back->value, 8);
  EXPECT_EQ(back->error, e.error);
  EXPECT_FALSE(ParseJsonLine("not json").ok());
}

}  // namespace
}  // namespace dlock::harness
