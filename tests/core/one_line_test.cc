#include "core/one_line.h"

#include <gtest/gtest.h>

namespace dlock::internal {
namespace {

TEST(OnOneLineTest, LineBreaksBecomeSemicolonsAndTheEndIsTrimmed) {
  EXPECT_EQ(OnOneLine("connection to server failed: refused\n\tIs the server running?\n"),
            "connection to server failed: refused; Is the server running?");
  EXPECT_EQ(OnOneLine("Access denied\r\n"), "Access denied");
  EXPECT_EQ(OnOneLine("one line"), "one line");
}

TEST(OnOneLineTest, NothingButBreaksLeavesNothing) {
  EXPECT_EQ(OnOneLine(""), "");
  EXPECT_EQ(OnOneLine("\n\n\t\r "), "");
}

}  // namespace
}  // namespace dlock::internal
