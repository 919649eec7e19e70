#include "etcd_test_util.h"

#include <stdio.h>
#include <stdlib.h>

#include <fstream>

#include <gtest/gtest.h>

#include "core/credentials.h"
#include "core/registry.h"

namespace dlock::etcd::testing {

std::string ClusterUri() {
  if (const char* uri = std::getenv("DLOCK_TEST_URI"); uri && *uri) return uri;
  if (const char* file = std::getenv("DLOCK_TEST_URI_FILE"); file && *file) {
    std::ifstream in(file);
    std::string uri;
    std::getline(in, uri);
    if (!uri.empty()) return uri;
  }
  ADD_FAILURE() << "no etcd cluster: set DLOCK_TEST_URI or run under the ctest fixture";
  return "etcd://127.0.0.1:1";
}

std::string Cluster(const std::string& verb, const std::string& args) {
  const char* script = std::getenv("DLOCK_TEST_SERVER_SCRIPT");
  const char* dir = std::getenv("DLOCK_TEST_SERVER_DIR");
  if (!script || !dir) {
    ADD_FAILURE() << "cluster faults need the ctest fixture (DLOCK_TEST_SERVER_SCRIPT/DIR)";
    return "";
  }
  const std::string command =
      std::string("bash ") + script + " " + verb + " " + dir + " " + args + " 2>&1";
  FILE* p = popen(command.c_str(), "r");
  std::string out;
  char buf[256];
  while (p && fgets(buf, sizeof buf, p)) out += buf;
  const int rc = p ? pclose(p) : -1;
  EXPECT_EQ(rc, 0) << command << ": " << out;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::string UniqueName(std::string_view name) {
  static const std::string run = std::to_string(DefaultRandom()->Next() % 1'000'000'000);
  return "etcd-test/" + run + "/" + std::string(name);
}

std::unique_ptr<Client> NewClient(std::string uri) {
  auto c = Client::Connect(uri.empty() ? ClusterUri() : uri);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(*c) : nullptr;
}

std::unique_ptr<EtcdBackend> NewBackend(std::string uri) {
  auto parsed = internal::ParseUri(uri.empty() ? ClusterUri() : uri);
  EXPECT_TRUE(parsed.ok());
  EXPECT_TRUE(internal::ResolveCredentials(*parsed).ok());
  auto options = OptionsFromUri(*parsed);
  EXPECT_TRUE(options.ok()) << options.status().ToString();
  auto b = OpenEtcd(std::move(*options));
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return b.ok() ? std::move(*b) : nullptr;
}

RawEtcd::RawEtcd() {
  auto parsed = internal::ParseUri(ClusterUri());
  EXPECT_TRUE(internal::ResolveCredentials(*parsed).ok());
  auto options = OptionsFromUri(*parsed);
  conn_ = std::make_unique<Connection>(options->endpoints, std::chrono::seconds(5),
                                       options->security);
  const Status s = conn_->Start(options->root + ".dlock-ping", Deadline());
  EXPECT_TRUE(s.ok()) << s.ToString();
}

std::int64_t RawEtcd::GrantLease(std::int64_t ttl_seconds) {
  auto r = conn_->LeaseGrant(ttl_seconds, Deadline());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? r->id() : 0;
}

void RawEtcd::RevokeLease(std::int64_t lease) {
  Status s = conn_->LeaseRevoke(lease, Deadline());
  EXPECT_TRUE(s.ok()) << s.ToString();
}

std::int64_t RawEtcd::Put(const std::string& key, const std::string& value, std::int64_t lease) {
  pb::TxnRequest txn;
  pb::PutRequest* put = txn.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(value);
  put->set_lease(lease);
  auto r = conn_->Txn(txn, Deadline());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? r->header().revision() : 0;
}

void RawEtcd::Delete(const std::string& key) {
  pb::TxnRequest txn;
  txn.add_success()->mutable_request_delete_range()->set_key(key);
  auto r = conn_->Txn(txn, Deadline());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
}

std::int64_t RawEtcd::GrantedTtl(std::int64_t lease) {
  auto r = conn_->LeaseTimeToLive(lease, Deadline());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? r->grantedttl() : 0;
}

std::int64_t RawEtcd::TtlLeft(std::int64_t lease) {
  auto r = conn_->LeaseTimeToLive(lease, Deadline());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? r->ttl() : 0;
}

bool RawEtcd::Exists(const std::string& key) {
  pb::RangeRequest r;
  r.set_key(key);
  r.set_count_only(true);
  auto got = conn_->Range(r, Deadline());
  EXPECT_TRUE(got.ok()) << got.status().ToString();
  return got.ok() && got->count() > 0;
}

}  // namespace dlock::etcd::testing
