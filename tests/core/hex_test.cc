#include "core/hex.h"

#include <gtest/gtest.h>

#include <string>

namespace dlock::internal {
namespace {

TEST(HexTest, EveryByteBecomesTwoLowerCaseDigits) {
  EXPECT_EQ(HexEncode(""), "");
  EXPECT_EQ(HexEncode("jobs/a"), "6a6f62732f61");
  EXPECT_EQ(HexEncode(std::string("\x00\x7f\x80\xff", 4)), "007f80ff");
}

TEST(HexTest, DecodingGivesTheBytesBackInEitherCase) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::string back;
  ASSERT_TRUE(HexDecode(HexEncode(all), &back));
  EXPECT_EQ(back, all);
  ASSERT_TRUE(HexDecode("7F80Ff", &back));
  EXPECT_EQ(back, std::string("\x7f\x80\xff", 3));
}

TEST(HexTest, AnOddLengthOrANonDigitIsRefused) {
  std::string out;
  EXPECT_FALSE(HexDecode("abc", &out));
  EXPECT_FALSE(HexDecode("0g", &out));
  EXPECT_FALSE(HexDecode("0 ", &out));
  EXPECT_FALSE(HexDecode("-1", &out));
}

}  // namespace
}  // namespace dlock::internal
