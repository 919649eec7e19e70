// Shared by the etcd tests: the fixture cluster's URI, its fault verbs
// (scripts/servers/etcd.sh), and raw etcd access for what no dlock client
// would do (a Go Mutex's key, deleting a key or revoking a lease by hand).
#ifndef DLOCK_TESTS_BACKENDS_ETCD_ETCD_TEST_UTIL_H_
#define DLOCK_TESTS_BACKENDS_ETCD_ETCD_TEST_UTIL_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "backends/etcd/etcd_backend.h"
#include "backends/etcd/etcd_connection.h"
#include "dlock/client.h"

namespace dlock::etcd::testing {

// From $DLOCK_TEST_URI, else the file $DLOCK_TEST_URI_FILE names.
std::string ClusterUri();

// Runs `etcd.sh VERB DIR ARGS` on the fixture cluster; its stdout.
std::string Cluster(const std::string& verb, const std::string& args = "");

// A key unique to this test run.
std::string UniqueName(std::string_view name);

std::unique_ptr<Client> NewClient(std::string uri = "");
std::unique_ptr<EtcdBackend> NewBackend(std::string uri = "");

// Plain etcd calls, through dlock's own connection code.
class RawEtcd {
 public:
  RawEtcd();
  std::int64_t GrantLease(std::int64_t ttl_seconds);
  void RevokeLease(std::int64_t lease);
  // Puts `key` (attached to `lease`, 0 for none); its create_revision.
  std::int64_t Put(const std::string& key, const std::string& value, std::int64_t lease);
  void Delete(const std::string& key);
  // The granted TTL of `lease`, in seconds.
  std::int64_t GrantedTtl(std::int64_t lease);
  // The TTL `lease` has left by etcd's clock, in seconds; -1 once it is gone.
  std::int64_t TtlLeft(std::int64_t lease);
  // Whether `key` exists (a linearizable read).
  bool Exists(const std::string& key);

 private:
  std::unique_ptr<Connection> conn_;
  TimePoint Deadline() const { return MonotonicClock::now() + std::chrono::seconds(5); }
};

}  // namespace dlock::etcd::testing

#endif  // DLOCK_TESTS_BACKENDS_ETCD_ETCD_TEST_UTIL_H_
