#include "core/duration.h"

#include <gtest/gtest.h>

namespace dlock::internal {
namespace {

using std::chrono::milliseconds;

TEST(DurationTest, ParsesEveryUnit) {
  EXPECT_EQ(*ParseDuration("250ms"), milliseconds(250));
  EXPECT_EQ(*ParseDuration("30s"), milliseconds(30'000));
  EXPECT_EQ(*ParseDuration("1.5s"), milliseconds(1500));
  EXPECT_EQ(*ParseDuration("5m"), milliseconds(300'000));
  EXPECT_EQ(*ParseDuration("1h"), milliseconds(3'600'000));
  EXPECT_EQ(*ParseDuration("30d"), std::chrono::hours(720));
  EXPECT_EQ(*ParseDuration("0s"), milliseconds(0));
  EXPECT_EQ(*ParseDuration("0.25m"), milliseconds(15'000));
}

TEST(DurationTest, RefusesWhatItCannotReadAndSaysWhatItAccepts) {
  for (const char* bad : {"", "10", "s", "-1s", "1.5ms", "1w", "1 s", "1.s5", "abc",
                          "99999999999999h", "1.0001s"}) {
    auto r = ParseDuration(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(std::string("'") + bad + "'"), std::string::npos);
    EXPECT_NE(r.status().message().find("250ms, 30s"), std::string::npos);
  }
}

TEST(DurationTest, NothingLongerThanAYearWhichNoClockOverflowsOn) {
  EXPECT_EQ(*ParseDuration("8760h"), kMaxDuration);
  EXPECT_EQ(*ParseDuration("365d"), kMaxDuration);
  for (const char* too_long : {"8760.001h", "8761h", "2600000h", "9999999999h", "526000m", "366d"}) {
    auto r = ParseDuration(too_long);
    ASSERT_FALSE(r.ok()) << too_long;
    EXPECT_NE(r.status().message().find("8760h"), std::string::npos) << r.status().message();
  }
}

TEST(DurationTest, FormatsReadably) {
  EXPECT_EQ(FormatDuration(milliseconds(250)), "250ms");
  EXPECT_EQ(FormatDuration(milliseconds(1500)), "1.5s");
  EXPECT_EQ(FormatDuration(milliseconds(30'000)), "30s");
  EXPECT_EQ(FormatDuration(milliseconds(90'000)), "90s");
  EXPECT_EQ(FormatDuration(milliseconds(300'000)), "5m");
  EXPECT_EQ(FormatDuration(milliseconds(7'200'000)), "2h");
  EXPECT_EQ(FormatDuration(milliseconds(-1)), "-1ms");
}

}  // namespace
}  // namespace dlock::internal
