// The store the conformance suite runs on, shared by its files.
#ifndef DLOCK_TESTS_CONFORMANCE_CONFORMANCE_STORE_H_
#define DLOCK_TESTS_CONFORMANCE_CONFORMANCE_STORE_H_

#include <stdlib.h>

#include <fstream>
#include <memory>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "core/registry.h"
#include "dlock/backend.h"
#include "dlock/clock.h"

namespace dlock {

// The store comes from $DLOCK_TEST_URI, or from the file named by
// $DLOCK_TEST_URI_FILE (written by a server fixture, tests/servers/); with
// neither, a fresh SQLite file.
inline std::string StoreUri() {
  if (const char* uri = std::getenv("DLOCK_TEST_URI"); uri && *uri) return uri;
  if (const char* file = std::getenv("DLOCK_TEST_URI_FILE"); file && *file) {
    std::ifstream in(file);
    std::string uri;
    std::getline(in, uri);
    if (!uri.empty()) return uri;
    ADD_FAILURE() << "DLOCK_TEST_URI_FILE " << file << " is empty or missing";
  }
  static const std::string dir = [] {
    char tmpl[] = "/tmp/dlock-conformance.XXXXXX";
    return std::string(mkdtemp(tmpl));
  }();
  return "sqlite://" + dir + "/locks.db";
}

// Keys unique to one test run, so that reruns against a long-lived server do
// not see each other's state.
inline std::string UniqueKey(std::string_view name) {
  static const std::string run = std::to_string(DefaultRandom()->Next() % 1'000'000'000);
  return "conformance/" + run + "/" + std::string(name);
}

// Null (and a failure) when the store does not open. A loaded cluster may
// not answer a connect in time: asked again, as the core asks again an
// attempt the store did not answer.
inline std::unique_ptr<Backend> OpenStore() {
  internal::BackendParams params;
  params.clock = DefaultClock();
  auto b = internal::OpenBackend(StoreUri(), params);
  for (int i = 0; i < 4 && !b.ok() && b.status().code() == StatusCode::kUnavailable; ++i) {
    b = internal::OpenBackend(StoreUri(), params);
  }
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return b.ok() ? std::move(*b) : nullptr;
}

}  // namespace dlock

#endif  // DLOCK_TESTS_CONFORMANCE_CONFORMANCE_STORE_H_
