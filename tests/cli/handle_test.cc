// The detached lock's handle (src/cli/handle.h): every key survives the
// trip through one shell word, and nothing else parses as a handle.
#include "cli/handle.h"

#include <cctype>
#include <vector>

#include <gtest/gtest.h>

namespace dlock::cli {
namespace {

const OwnerId kOwner(0x0123456789abcdefULL, 0xfedcba9876543210ULL);

TEST(HandleTest, EveryByteOfAKeyComesBackFromOneShellSafeWord) {
  std::string key;
  for (int c = 1; c < 256; ++c) key += static_cast<char>(c);
  const Handle in{key, kOwner, 18446744073709551615ULL};
  const std::string text = FormatHandle(in);
  for (char c : text) {
    const bool plain = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ||
                       c == '.' || c == '/' || c == '%' || c == ':';
    EXPECT_TRUE(plain) << "'" << c << "' in " << text;
  }
  auto out = ParseHandle(text);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->key, key);
  EXPECT_EQ(out->owner, kOwner);
  EXPECT_EQ(out->token, in.token);
}

TEST(HandleTest, APlainKeyStaysReadable) {
  EXPECT_EQ(FormatHandle({"deploy/prod-1.2", kOwner, 42}),
            "deploy/prod-1.2:0123456789abcdeffedcba9876543210:42");
  EXPECT_EQ(FormatHandle({"a:b c", kOwner, 7}), "a%3Ab%20c:0123456789abcdeffedcba9876543210:7");
}

TEST(HandleTest, AnythingElseIsRefusedNamingTheForm) {
  const std::string owner = kOwner.ToString();
  for (const std::string& bad : std::vector<std::string>
       {std::string(""), std::string("k"), "k:" + owner, ":" + owner + ":1",
        "k:" + owner + ":", "k:" + owner + ":-1", "k:" + owner + ":1x",
        "k:" + owner + ":18446744073709551616", std::string("k:0123:1"), "k:" + owner + "0:1",
        "k%zz:" + owner + ":1", "k%4:" + owner + ":1", "k%00:" + owner + ":1",
        "k space:" + owner + ":1", "%3A:" + owner.substr(1) + ":1"}) {
    auto parsed = ParseHandle(bad);
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << "'" << bad << "'";
    EXPECT_NE(parsed.status().message().find("KEY:OWNER:TOKEN"), std::string::npos)
        << parsed.status().message();
  }
}

TEST(HandleTest, TheShellFormQuotesWhatTheShellWouldRead) {
  const std::string out = HandleAsShell({"it's $HOME", kOwner, 5}, true);
  EXPECT_EQ(out,
            "export DLOCK_HANDLE='it%27s%20%24HOME:0123456789abcdeffedcba9876543210:5'\n"
            "export DLOCK_KEY='it'\\''s $HOME'\n"
            "export DLOCK_TOKEN=5\n");
  EXPECT_EQ(HandleAsShell({"k", kOwner, 0}, false).find("DLOCK_TOKEN"), std::string::npos);
}

}  // namespace
}  // namespace dlock::cli
