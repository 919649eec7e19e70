// The arithmetic behind `dlock plan`, checked against the source text's
// "What a lock costs" section and its three "Check yourself" worked answers
// (docs/cli.md shows the same cases as commands).
#include "plan/plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace dlock::plan {
namespace {

using namespace std::chrono_literals;

bool Has(const PlanReport& r, Remedy remedy) {
  return std::find(r.remedies.begin(), r.remedies.end(), remedy) != r.remedies.end();
}

// Worked answer 1: one million payment captures a day, 3× peak, a 40 ms
// per-account lock, one merchant 30% of the traffic.
PlanInput Captures() {
  PlanInput in;
  in.rate_per_s = 1'000'000.0 / 86'400;
  in.peak_factor = 3;
  in.hold = 40ms;
  in.hot_share = 0.3;
  // The worked answers price the critical section alone; coordination is
  // priced separately in the text (and by CoordinationOverheadAsInTheText).
  in.rtt = 0ns;
  return in;
}

// Worked answer 2: 200 ms hold, 3/s on one key, the lease raised to 5 minutes.
PlanInput OneKeyLongLease() {
  PlanInput in;
  in.rate_per_s = 3;
  in.hold = 200ms;
  in.lease = 5min;
  in.rtt = 0ns;
  return in;
}

TEST(PlanTest, WorkedAnswer1CapturesHoldNowAndFailBeforeDoubling) {
  auto r = Plan(Captures());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // The text rounds: "≈ 12 QPS average, ~36 at 3x peak" (3 × 12), "0.30 × 36 ≈ 11",
  // "44% utilisation" (11 / 25). Unrounded: 11.57, 34.7, 10.4, 41.7%.
  EXPECT_NEAR(r->avg_rate_per_s, 12, 0.5);
  EXPECT_NEAR(r->peak_rate_per_s, 35, 1.0);
  EXPECT_DOUBLE_EQ(r->hold_ceiling_ops_per_s, 25);
  EXPECT_DOUBLE_EQ(r->ceiling_ops_per_s, 25);
  EXPECT_GE(r->hot_key_rate_per_s, 10);
  EXPECT_LE(r->hot_key_rate_per_s, 11);
  EXPECT_GE(r->utilisation, 0.415);  // 42% once rounded
  EXPECT_LE(r->utilisation, 0.44);
  EXPECT_FALSE(r->saturated);
  // "its concurrency is pinned at 1": Little's law puts it well under.
  EXPECT_NEAR(r->concurrency, r->utilisation, 1e-12);
  EXPECT_LT(r->concurrency, 1);
  // "p99 queues while the mean still looks fine".
  ASSERT_TRUE(r->queue_wait_mean_s && r->queue_wait_p99_s);
  EXPECT_LT(*r->queue_wait_mean_s, 40ms);
  EXPECT_GT(*r->queue_wait_p99_s, 5 * *r->queue_wait_mean_s);
  // "It holds now and fails before traffic doubles" — fails at p99, before
  // the key saturates (which would take 2.4×).
  EXPECT_EQ(r->verdict, Verdict::kHoldsFailsBeforeDoubling);
  EXPECT_EQ(VerdictText(r->verdict), "holds now, fails before traffic doubles");
  EXPECT_LT(r->growth_headroom_factor, 2);
  EXPECT_GT(r->growth_headroom_factor, 1);
  EXPECT_GT(r->saturation_headroom_factor, 2);
  // "shrink the critical section or split the key, because a faster lock
  // service does not move the 25".
  EXPECT_TRUE(Has(*r, Remedy::kShrinkCriticalSection));
  EXPECT_TRUE(Has(*r, Remedy::kSplitKey));
  EXPECT_FALSE(Has(*r, Remedy::kCutCoordination));
  EXPECT_FALSE(Has(*r, Remedy::kFenceAndTuneLease));
}

TEST(PlanTest, WorkedAnswer1SurvivesTheDefaultRoundTrip) {
  PlanInput in = Captures();
  in.rtt = kDefaultRtt;  // 1 ms: 2 ms of Acquire + Release on a 40 ms hold
  auto r = Plan(in);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(r->hold_ceiling_ops_per_s, 25);
  EXPECT_NEAR(r->ceiling_ops_per_s, 1 / 0.042, 1e-9);
  EXPECT_NEAR(r->coordination_overhead_share, 0.05, 1e-12);
  EXPECT_GE(r->utilisation, 0.42);
  EXPECT_LE(r->utilisation, 0.44);
  EXPECT_EQ(r->verdict, Verdict::kHoldsFailsBeforeDoubling);
}

TEST(PlanTest, WorkedAnswer2KeyFitsWithSlack) {
  auto r = Plan(OneKeyLongLease());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(r->ceiling_ops_per_s, 5);
  EXPECT_NEAR(r->utilisation, 0.6, 1e-12);
  EXPECT_NEAR(r->concurrency, 0.6, 1e-12);  // 3 × 0.2
  EXPECT_NEAR(r->slack_ops_per_s, 2, 1e-12);
  EXPECT_NE(r->verdict, Verdict::kSaturated);
  EXPECT_NE(r->verdict, Verdict::kFailsAtP99);
}

TEST(PlanTest, WorkedAnswer2FiveMinuteLeaseCostsTenTimesTheRecovery) {
  auto r = Plan(OneKeyLongLease());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->crash.lease, 5min);
  EXPECT_NEAR(r->crash.backlog_ops, 900, 1e-9);  // 3 × 300
  ASSERT_TRUE(r->crash.drain_s && r->crash.degraded_s);
  EXPECT_NEAR(r->crash.drain_s->count(), 450, 1e-9);     // 900 ÷ 2
  EXPECT_NEAR(r->crash.degraded_s->count(), 750, 1e-9);  // 300 + 450
  // Compared with the usual 30 s lease.
  EXPECT_EQ(r->comparison_crash.lease, 30s);
  EXPECT_NEAR(r->comparison_crash.backlog_ops, 90, 1e-9);
  ASSERT_TRUE(r->comparison_crash.degraded_s);
  EXPECT_NEAR(r->comparison_crash.degraded_s->count(), 75, 1e-9);
  ASSERT_TRUE(r->crash_cost_ratio);
  EXPECT_NEAR(*r->crash_cost_ratio, 10, 1e-9);
  // "tune the lease for recovery time and let the token carry safety".
  EXPECT_TRUE(Has(*r, Remedy::kFenceAndTuneLease));
}

TEST(PlanTest, WorkedAnswer2ThirtySecondLeaseIsThe75Seconds) {
  PlanInput in = OneKeyLongLease();
  in.lease = 30s;
  auto r = Plan(in);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->crash.degraded_s);
  EXPECT_NEAR(r->crash.degraded_s->count(), 75, 1e-9);
  EXPECT_EQ(r->comparison_crash.lease, 3s);  // a tenth, when not above 30 s
  EXPECT_FALSE(Has(*r, Remedy::kFenceAndTuneLease));
}

TEST(PlanTest, WorkedAnswer2SurvivesTheDefaultRoundTrip) {
  PlanInput in = OneKeyLongLease();
  in.rtt = kDefaultRtt;  // 2 ms on 200 ms: the slack shrinks by 2.5%
  auto r = Plan(in);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NEAR(r->ceiling_ops_per_s, 5, 0.05);
  EXPECT_NEAR(r->utilisation, 0.6, 0.01);
  ASSERT_TRUE(r->crash.degraded_s && r->comparison_crash.degraded_s && r->crash_cost_ratio);
  EXPECT_NEAR(r->crash.degraded_s->count(), 750, 750 * 0.02);
  EXPECT_NEAR(r->comparison_crash.degraded_s->count(), 75, 75 * 0.02);
  EXPECT_NEAR(*r->crash_cost_ratio, 10, 0.1);
}

TEST(PlanTest, WorkedAnswer3IdempotentJobTakesADatabaseRow) {
  PlanInput in;
  in.rate_per_s = 1.0 / 86'400;  // nightly
  in.hold = 10min;
  in.idempotent = true;
  auto r = Plan(in);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->mechanism);
  EXPECT_EQ(*r->mechanism, Mechanism::kExistingStoreLock);
  EXPECT_EQ(MechanismName(*r->mechanism), "database_row");
  EXPECT_NE(MechanismText(*r->mechanism).find("a row in the database"), std::string_view::npos);
}

TEST(PlanTest, WorkedAnswer3JobMovingMoneyNeedsFencingOrDeduplication) {
  PlanInput in;
  in.rate_per_s = 1.0 / 86'400;
  in.hold = 10min;
  in.idempotent = false;
  auto r = Plan(in);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->mechanism);
  EXPECT_EQ(*r->mechanism, Mechanism::kFencingOrDedup);
  const std::string_view text = MechanismText(*r->mechanism);
  EXPECT_NE(text.find("fencing token"), std::string_view::npos);
  EXPECT_NE(text.find("deduplication key"), std::string_view::npos);
}

TEST(PlanTest, NoMechanismWithoutIdempotency) {
  auto r = Plan(Captures());
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->mechanism);
}

TEST(PlanTest, CoordinationOverheadAsInTheText) {
  // "release costs the same again: 20% overhead on a 10 ms critical section,
  // ten times the work protected on a 200 µs one."
  PlanInput in;
  in.rate_per_s = 1;
  in.hold = 10ms;
  auto r = Plan(in);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->coordination_overhead_s, 2ms);
  EXPECT_NEAR(r->coordination_overhead_share, 0.2, 1e-12);
  EXPECT_TRUE(Has(*r, Remedy::kCutCoordination));
  in.hold = 200us;
  r = Plan(in);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->coordination_overhead_share, 10, 1e-9);
  // "10 ms held allows 1 ÷ 0.010 = 100 operations per second".
  in.hold = 10ms;
  in.rtt = 0ns;
  r = Plan(in);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->ceiling_ops_per_s, 100);
}

TEST(PlanTest, SaturatedKeyIsAVerdictWithNoInfiniteFigures) {
  PlanInput in = Captures();
  in.hot_share = 1;
  in.peak_factor = 1;
  in.rate_per_s = 30;  // 30/s on a key that allows 25
  auto r = Plan(in);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->saturated);
  EXPECT_EQ(r->verdict, Verdict::kSaturated);
  EXPECT_NEAR(r->utilisation, 1.2, 1e-12);
  EXPECT_NEAR(r->slack_ops_per_s, -5, 1e-9);
  EXPECT_FALSE(r->queue_wait_mean_s);
  EXPECT_FALSE(r->queue_wait_p99_s);
  EXPECT_FALSE(r->concurrency_with_queue);
  EXPECT_FALSE(r->crash.drain_s);
  EXPECT_FALSE(r->crash.degraded_s);
  EXPECT_FALSE(r->comparison_crash.degraded_s);
  EXPECT_FALSE(r->crash_cost_ratio);
  EXPECT_NEAR(r->crash.backlog_ops, 900, 1e-9);  // still finite: 30 × 30 s
  EXPECT_TRUE(std::isfinite(r->growth_headroom_factor));
  EXPECT_LT(r->saturation_headroom_factor, 1);
  EXPECT_TRUE(Has(*r, Remedy::kShrinkCriticalSection));
}

TEST(PlanTest, DemandExactlyAtTheCeilingIsSaturated) {
  PlanInput in = Captures();
  in.hot_share = 1;
  in.peak_factor = 1;
  in.rate_per_s = 25;  // hold = 1 / rate-per-key
  auto r = Plan(in);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->saturated);
  EXPECT_FALSE(r->crash.drain_s);
}

TEST(PlanTest, CoordinationCanTipAKeyIntoSaturation) {
  PlanInput in = Captures();
  in.hot_share = 1;
  in.peak_factor = 1;
  in.rate_per_s = 24;  // under 1 / 40 ms, over 1 / 42 ms
  ASSERT_FALSE(Plan(in)->saturated);
  in.rtt = 1ms;
  EXPECT_TRUE(Plan(in)->saturated);
}

TEST(PlanTest, P99IsFarWorseThanTheMeanNearSaturation) {
  PlanInput in = Captures();
  in.hot_share = 1;
  in.peak_factor = 1;
  in.rate_per_s = 23.75;  // 95% of 25/s
  auto hot = Plan(in);
  auto calm = Plan(Captures());
  ASSERT_TRUE(hot.ok() && calm.ok());
  EXPECT_EQ(hot->verdict, Verdict::kFailsAtP99);
  ASSERT_TRUE(hot->queue_wait_mean_s && hot->queue_wait_p99_s && calm->queue_wait_p99_s);
  // M/M/1: mean = ρS/(1−ρ) = 0.76 s, p99 = ln(95)·S/(1−ρ) = 3.64 s.
  EXPECT_NEAR(hot->queue_wait_mean_s->count(), 0.95 * 0.04 / 0.05, 1e-9);
  EXPECT_NEAR(hot->queue_wait_p99_s->count(), std::log(95.0) * 0.04 / 0.05, 1e-9);
  EXPECT_GT(*hot->queue_wait_p99_s, 4 * *hot->queue_wait_mean_s);
  EXPECT_GT(*hot->queue_wait_p99_s, 50 * 40ms);
  EXPECT_GT(*hot->queue_wait_p99_s, 10 * *calm->queue_wait_p99_s);
}

TEST(PlanTest, AlmostIdleKeyHasNoP99Wait) {
  PlanInput in = Captures();
  in.rate_per_s = 0.1;  // ρ = 0.001: 99.9% of operations find the key free
  auto r = Plan(in);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->verdict, Verdict::kHolds);
  EXPECT_TRUE(r->remedies.empty());
  ASSERT_TRUE(r->queue_wait_p99_s);
  EXPECT_EQ(*r->queue_wait_p99_s, Seconds(0));
  EXPECT_GT(*r->queue_wait_mean_s, Seconds(0));
}

TEST(PlanTest, ComparisonLease) {
  EXPECT_EQ(ComparisonLease(5min), 30s);
  EXPECT_EQ(ComparisonLease(31s), 30s);
  EXPECT_EQ(ComparisonLease(30s), 3s);
  EXPECT_EQ(ComparisonLease(10s), 1s);
  EXPECT_EQ(ComparisonLease(5us), 1us);  // never zero
}

TEST(PlanTest, RejectsBadInput) {
  auto expect_bad = [](PlanInput in, std::string_view words) {
    auto r = Plan(in);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status().message();
  };
  PlanInput in = Captures();
  in.rate_per_s = 0;
  expect_bad(in, "rate 0 is not a positive");
  in.rate_per_s = -5;
  expect_bad(in, "rate -5");
  in.rate_per_s = std::nan("");
  expect_bad(in, "rate");
  in.rate_per_s = INFINITY;
  expect_bad(in, "rate");
  in = Captures();
  in.peak_factor = 0.5;
  expect_bad(in, "peak factor 0.5 is below 1");
  in = Captures();
  in.hold = 0us;
  expect_bad(in, "hold must be positive");
  in = Captures();
  for (double share : {0.0, -0.1, 1.5, std::nan("")}) {
    in.hot_share = share;
    expect_bad(in, "is outside (0, 1]");
  }
  in = Captures();
  in.lease = 0us;
  expect_bad(in, "lease must be positive");
  in = Captures();
  in.rtt = -1ns;
  expect_bad(in, "rtt must not be negative");
  in = Captures();
  in.rate_per_s = 1e300;
  in.peak_factor = 1e10;
  expect_bad(in, "too extreme");
}

TEST(PlanTest, ParseRate) {
  struct Case {
    std::string_view text;
    double per_s;
  };
  for (const Case& c :
       {Case{"12", 12}, Case{"12/s", 12}, Case{"12/sec", 12}, Case{"500/min", 500.0 / 60},
        Case{"3.5k/h", 3500.0 / 3600}, Case{"3.5K/hour", 3500.0 / 3600},
        Case{"1M/day", 1e6 / 86'400}, Case{"1000000/day", 1e6 / 86'400}, Case{"1M/d", 1e6 / 86'400},
        Case{"2G/day", 2e9 / 86'400}, Case{"0.5/s", 0.5}, Case{".5/s", 0.5},
        Case{"7/minute", 7.0 / 60}, Case{"1.5M", 1.5e6}}) {
    auto r = ParseRate(c.text);
    ASSERT_TRUE(r.ok()) << c.text << ": " << r.status().ToString();
    EXPECT_NEAR(*r, c.per_s, c.per_s * 1e-12) << c.text;
  }
}

TEST(PlanTest, ParseRateRejects) {
  struct Case {
    std::string_view text, why;
  };
  for (const Case& c :
       {Case{"", "(no number)"}, Case{"-5/s", "(negative)"}, Case{"0/s", "(zero)"},
        Case{"0", "(zero)"}, Case{"0.0k/day", "(zero)"},
        Case{"5/fortnight", "(unknown unit 'fortnight')"}, Case{"5x/s", "(unknown multiplier 'x')"},
        Case{"5/", "(no unit after '/')"}, Case{"/s", "(no number)"}, Case{"abc", "(no number)"},
        Case{"1e3/s", "(unknown multiplier 'e3')"}, Case{"nan", "(no number)"},
        Case{"inf/s", "(no number)"}, Case{"12 /s", "(unknown multiplier ' ')"},
        Case{"5/ms", "(unknown unit 'ms')"}}) {
    auto r = ParseRate(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    const std::string m = r.status().message();  // status() is a copy
    EXPECT_NE(m.find("invalid rate '" + std::string(c.text) + "' " + std::string(c.why)),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("e.g. 12/s, 500/min, 3.5k/h, 1M/day"), std::string::npos) << m;
  }
}

TEST(PlanTest, ParseFineDuration) {
  EXPECT_EQ(*ParseFineDuration("200us"), 200us);
  EXPECT_EQ(*ParseFineDuration("200\u00b5s"), 200us);
  EXPECT_EQ(*ParseFineDuration("0.5ms"), 500us);
  EXPECT_EQ(*ParseFineDuration("40ms"), 40ms);
  EXPECT_EQ(*ParseFineDuration("1.5s"), 1500ms);
  EXPECT_EQ(*ParseFineDuration("0.1s"), 100ms);
  EXPECT_EQ(*ParseFineDuration("5m"), 5min);
  EXPECT_EQ(*ParseFineDuration("5min"), 5min);
  EXPECT_EQ(*ParseFineDuration("1h"), 1h);
  EXPECT_EQ(*ParseFineDuration("0ms"), 0us);
  for (std::string_view bad : {"", "30", "10x", "-1s", "0.5us", "ms", "1.2.3s", "99999999999h"}) {
    auto r = ParseFineDuration(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("invalid duration '" + std::string(bad) + "'"),
              std::string::npos)
        << r.status().message();
  }
  EXPECT_NE(ParseFineDuration("0.5us").status().message().find("finer than a microsecond"),
            std::string::npos);
  EXPECT_NE(ParseFineDuration("-1s").status().message().find("(negative)"), std::string::npos);
}

}  // namespace
}  // namespace dlock::plan
