#include "core/key_range.h"

#include <gtest/gtest.h>

#include <string>

namespace dlock::internal {
namespace {

TEST(KeyRangeTest, TheEndIsThePrefixWithItsLastByteRaised) {
  EXPECT_EQ(PrefixEnd("jobs/"), "jobs0");
  EXPECT_EQ(PrefixEnd("a"), "b");
  EXPECT_EQ(PrefixEnd(std::string("a\x7f", 2)), std::string("a\x80", 2));
}

TEST(KeyRangeTest, TrailingFfBytesAreDroppedBeforeRaising) {
  EXPECT_EQ(PrefixEnd(std::string("a\xff", 2)), "b");
  EXPECT_EQ(PrefixEnd(std::string("ab\xff\xff", 4)), "ac");
}

TEST(KeyRangeTest, NoEndForAnEmptyPrefixOrOnlyFfBytes) {
  EXPECT_EQ(PrefixEnd(""), std::nullopt);
  EXPECT_EQ(PrefixEnd(std::string("\xff\xff", 2)), std::nullopt);
}

TEST(KeyRangeTest, EveryKeyWithThePrefixIsInsideTheRangeAndNoOtherIs) {
  const std::string prefix("k\xfe\xff", 3);
  const std::string end = *PrefixEnd(prefix);
  for (const std::string& inside : {prefix, prefix + "x", prefix + std::string(1, '\xff')}) {
    EXPECT_TRUE(inside >= prefix && inside < end) << inside;
  }
  for (const std::string& outside :
       {std::string("k\xfe"), std::string("k\xff"), std::string("l")}) {
    EXPECT_FALSE(outside >= prefix && outside < end) << outside;
  }
}

}  // namespace
}  // namespace dlock::internal
