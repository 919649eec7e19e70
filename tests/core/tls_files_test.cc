#include "core/tls_files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace dlock::internal {
namespace {

Uri Parsed(const std::string& text) {
  auto uri = ParseUri(text);
  EXPECT_TRUE(uri.ok()) << uri.status().ToString();
  return uri.ok() ? *uri : Uri{};
}

TEST(TlsFilesTest, ReadsTheThreeParameters) {
  auto files = TlsFilesFromUri(Parsed("rediss://h:1/0?cacert=/c/ca.pem&cert=/c/me.pem&key=/c/me.key"),
                               true, "rediss");
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_EQ(files->ca_file, "/c/ca.pem");
  EXPECT_EQ(files->cert_file, "/c/me.pem");
  EXPECT_EQ(files->key_file, "/c/me.key");
}

TEST(TlsFilesTest, NoneGivenMeansSystemTrustAndNoClientCertificate) {
  auto files = TlsFilesFromUri(Parsed("etcds://h:1"), true, "etcds");
  ASSERT_TRUE(files.ok());
  EXPECT_EQ(files->ca_file, "");
  EXPECT_EQ(files->cert_file, "");
}

TEST(TlsFilesTest, APlaintextSchemeRefusesThemRatherThanIgnoring) {
  auto files = TlsFilesFromUri(Parsed("redis://h:1/0?cacert=/c/ca.pem"), false, "rediss");
  ASSERT_FALSE(files.ok());
  EXPECT_EQ(files.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(files.status().message().find("cacert="), std::string::npos);
  EXPECT_NE(files.status().message().find("rediss://"), std::string::npos);
}

TEST(TlsFilesTest, CertificateAndKeyComeTogether) {
  for (const char* text : {"rediss://h:1/0?cert=/c/me.pem", "rediss://h:1/0?key=/c/me.key"}) {
    auto files = TlsFilesFromUri(Parsed(text), true, "rediss");
    ASSERT_FALSE(files.ok()) << text;
    EXPECT_NE(files.status().message().find("cert= and key="), std::string::npos);
  }
  EXPECT_FALSE(TlsFilesFromUri(Parsed("rediss://h:1/0?cacert="), true, "rediss").ok());
}

class TlsFileReadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char name[] = "/tmp/dlock-tls-XXXXXX";
    ASSERT_NE(::mkdtemp(name), nullptr);
    dir_ = name;
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }
  std::string Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name) << text;
    return dir_ + "/" + name;
  }
  std::string dir_;
};

TEST_F(TlsFileReadTest, ReadsAPemFileWhole) {
  const std::string pem = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
  auto text = ReadTlsFile("cacert", Write("ca.pem", pem));
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text, pem);
}

TEST_F(TlsFileReadTest, EachBadFileIsOneLineNamingTheParameterAndPath) {
  const std::string missing = dir_ + "/missing.pem";
  const std::string empty = Write("empty.pem", "");
  const std::string not_pem = Write("notes.txt", "hello\n");
  const std::string huge = Write("huge.pem", std::string((1 << 20) + 1, 'x'));
  for (const auto& [path, why] : {std::pair{missing, "No such file"}, std::pair{empty, "is empty"},
                                  std::pair{not_pem, "no PEM block"}, std::pair{huge, "1 MiB"}}) {
    auto text = ReadTlsFile("cert", path);
    ASSERT_FALSE(text.ok()) << path;
    EXPECT_EQ(text.status().code(), StatusCode::kInvalidArgument);
    const std::string m = text.status().message();
    EXPECT_NE(m.find("cert= file '" + path + "'"), std::string::npos) << m;
    EXPECT_NE(m.find(why), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace dlock::internal
