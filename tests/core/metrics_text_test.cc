// The Prometheus text format of client metrics and the fences' tally.
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "dlock/fence.h"
#include "dlock/metrics.h"

namespace dlock {
namespace {

bool HasLine(const std::string& text, const std::string& line) {
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (l == line) return true;
  }
  return false;
}

TEST(MetricsTextTest, HistogramBucketsAreCumulativeAndEndInTheCount) {
  ClientMetrics m;
  m.hold.counts[0] = 2;   // ≤ 100 µs
  m.hold.counts[14] = 1;  // ≤ 10 s
  m.hold.counts[16] = 1;  // over a minute
  m.hold.count = 4;
  m.hold.sum_seconds = 75.5;
  auto text = PrometheusText(m);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_TRUE(HasLine(*text, "# TYPE dlock_hold_seconds histogram")) << *text;
  EXPECT_TRUE(HasLine(*text, "dlock_hold_seconds_bucket{le=\"0.0001\"} 2"));
  EXPECT_TRUE(HasLine(*text, "dlock_hold_seconds_bucket{le=\"2.5\"} 2"));
  EXPECT_TRUE(HasLine(*text, "dlock_hold_seconds_bucket{le=\"10\"} 3"));
  EXPECT_TRUE(HasLine(*text, "dlock_hold_seconds_bucket{le=\"60\"} 3"));
  EXPECT_TRUE(HasLine(*text, "dlock_hold_seconds_bucket{le=\"+Inf\"} 4"));
  EXPECT_TRUE(HasLine(*text, "dlock_hold_seconds_sum 75.5"));
  EXPECT_TRUE(HasLine(*text, "dlock_hold_seconds_count 4"));
}

TEST(MetricsTextTest, CountersCarryTheirCodeOrCauseAndTheCallersLabels) {
  ClientMetrics m;
  m.grants = 7;
  m.leases_lost[static_cast<std::size_t>(LossCause::kNotOwner)] = 2;
  m.store_errors[static_cast<std::size_t>(StatusCode::kUnavailable)] = 3;
  auto text = PrometheusText(m, {{"service", "bill\"ing\\\n"}});
  ASSERT_TRUE(text.ok());
  EXPECT_TRUE(HasLine(*text, "dlock_grants_total{service=\"bill\\\"ing\\\\\\n\"} 7")) << *text;
  EXPECT_TRUE(HasLine(
      *text, "dlock_leases_lost_total{service=\"bill\\\"ing\\\\\\n\",cause=\"not_owner\"} 2"));
  EXPECT_TRUE(HasLine(
      *text, "dlock_store_errors_total{service=\"bill\\\"ing\\\\\\n\",code=\"Unavailable\"} 3"));
  for (const char* answer : {"LockHeld", "NotOwner", "LeaseLost"}) {
    EXPECT_EQ(text->find("dlock_store_errors_total{service=\"bill\\\"ing\\\\\\n\",code=\"" +
                         std::string(answer) + "\""),
              std::string::npos)
        << answer << " is a lock answer, not a store error";
  }
}

TEST(MetricsTextTest, ABadLabelNameIsRefusedWithWhatIsAccepted) {
  for (const char* name : {"", "1st", "a-b", "__reserved", "sp ace"}) {
    auto text = PrometheusText(ClientMetrics{}, {{name, "v"}});
    EXPECT_EQ(text.status().code(), StatusCode::kInvalidArgument) << name;
    EXPECT_NE(text.status().message().find("letters, digits and _"), std::string::npos);
  }
  EXPECT_TRUE(PrometheusText(ClientMetrics{}, {{"_ok9", "v"}}).ok());
}

TEST(MetricsTextTest, EveryFamilyHasHelpAndTypeOnce) {
  auto text = PrometheusText(ClientMetrics{});
  ASSERT_TRUE(text.ok());
  for (const char* family :
       {"dlock_acquire_seconds", "dlock_wait_seconds", "dlock_handoff_seconds",
        "dlock_hold_seconds", "dlock_renewal_seconds", "dlock_grants_total",
        "dlock_releases_total", "dlock_renewals_failed_total", "dlock_acquires_failed_total",
        "dlock_leases_lost_total", "dlock_store_errors_total"}) {
    const std::string type = "# TYPE " + std::string(family) + " ";
    EXPECT_NE(text->find(type), std::string::npos) << family;
    EXPECT_EQ(text->find(type), text->rfind(type)) << family;
    EXPECT_NE(text->find("# HELP " + std::string(family) + " "), std::string::npos) << family;
  }
}

// Prometheus's own linter (promtool, from scripts/install-deps.sh) accepts
// what we write, histograms, labels and escapes included.
TEST(MetricsTextTest, PromtoolAcceptsTheText) {
  ClientMetrics m;
  m.acquire.counts[3] = 5;
  m.acquire.count = 5;
  m.acquire.sum_seconds = 0.004;
  m.grants = 5;
  auto client = PrometheusText(m, {{"service", "a \"quoted\" \\ name"}});
  auto fences = PrometheusText(FenceMetrics());
  ASSERT_TRUE(client.ok() && fences.ok());
  char path[] = "/tmp/dlock-metrics-text.XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string text = *client + *fences;
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  const std::string command = "promtool check metrics < " + std::string(path) + " 2>&1";
  FILE* p = popen(command.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string said;
  char buf[512];
  while (fgets(buf, sizeof buf, p)) said += buf;
  const int status = pclose(p);
  unlink(path);
  EXPECT_EQ(status, 0) << said << "\n" << text;
}

// Fences count into one process-wide tally; compare before and after.
TEST(FenceMetricsTest, AFenceCountsWhatItAdmitsAndWhatItRejects) {
  auto count = [](std::string_view name) {
    for (const auto& f : FenceMetrics()) {
      if (f.fence == name) return f;
    }
    return FenceCount{std::string(name)};
  };
  const FenceCount before = count("memory");
  fence::Memory fence;
  ASSERT_TRUE(fence.Admit("k", 5).ok());
  ASSERT_TRUE(fence.Admit("k", 5).ok());
  EXPECT_EQ(fence.Admit("k", 4).code(), StatusCode::kStaleToken);
  EXPECT_EQ(fence.Admit("k", 0).code(), StatusCode::kInvalidArgument);  // not a decision
  const FenceCount after = count("memory");
  EXPECT_EQ(after.admitted - before.admitted, 2u);
  EXPECT_EQ(after.rejected - before.rejected, 1u);

  auto text = PrometheusText(FenceMetrics());
  ASSERT_TRUE(text.ok());
  EXPECT_TRUE(HasLine(*text, "dlock_fence_rejected_total{fence=\"memory\"} " +
                                 std::to_string(after.rejected)))
      << *text;
}

}  // namespace
}  // namespace dlock
