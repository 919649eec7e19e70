// The ensemble fixture the ZooKeeper tests run against (tests/servers:
// ctest starts it with scripts/servers/zookeeper.sh and names its URI file).
#ifndef DLOCK_TESTS_BACKENDS_ZOOKEEPER_ZK_FIXTURE_H_
#define DLOCK_TESTS_BACKENDS_ZOOKEEPER_ZK_FIXTURE_H_

#include <cstdlib>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "backends/zookeeper/zookeeper_backend.h"
#include "core/uri.h"

namespace dlock::zookeeper::testing {

inline std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

inline std::string FixtureUri() {
  std::ifstream in(Env("DLOCK_TEST_URI_FILE"));
  std::string uri;
  std::getline(in, uri);
  return uri;
}

inline ZkOptions FixtureOptions() {
  auto uri = internal::ParseUri(FixtureUri());
  EXPECT_TRUE(uri.ok()) << "no fixture: run through ctest (DLOCK_TEST_URI_FILE)";
  auto o = OptionsFromUri(*uri);
  EXPECT_TRUE(o.ok()) << o.status().ToString();
  return *o;
}

}  // namespace dlock::zookeeper::testing

#endif  // DLOCK_TESTS_BACKENDS_ZOOKEEPER_ZK_FIXTURE_H_
