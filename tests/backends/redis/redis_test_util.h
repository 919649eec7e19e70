// Helpers for the Redis backend tests: the fixture server's URI, topologies
// started with scripts/servers/redis.sh, raw admin connections.
#ifndef DLOCK_TESTS_BACKENDS_REDIS_REDIS_TEST_UTIL_H_
#define DLOCK_TESTS_BACKENDS_REDIS_REDIS_TEST_UTIL_H_

#include <hiredis/hiredis.h>
#include <stdlib.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backends/redis/redis_conn.h"
#include "core/registry.h"
#include "dlock/client.h"

namespace dlock::redis::testing {

inline std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// The fixture server (tests/servers), or "" when the test runs without it.
inline std::string FixtureUri() {
  if (const char* uri = std::getenv("DLOCK_TEST_URI"); uri && *uri) return uri;
  if (const char* file = std::getenv("DLOCK_TEST_URI_FILE"); file && *file) return ReadFirstLine(file);
  return "";
}

inline std::string ServerScript() {
  const char* s = std::getenv("DLOCK_TEST_SERVER_SCRIPT");
  return s != nullptr ? s : "";
}

// The port of the first host in a redis:// URI.
inline int PortOf(const std::string& uri) {
  const std::size_t at = uri.find('@');
  const std::size_t start = at == std::string::npos ? uri.find("//") + 2 : at + 1;
  const std::size_t colon = uri.find(':', start);
  return std::atoi(uri.c_str() + colon + 1);
}

inline std::string UniqueKey(const std::string& name) {
  static const std::string run = std::to_string(DefaultRandom()->Next() % 1'000'000'000);
  return "redis-test/" + run + "/" + name;
}

// Servers started by scripts/servers/redis.sh VERB DIR ARGS; stopped (and
// DIR removed) when this goes out of scope.
class Topology {
 public:
  Topology(const std::string& verb, const std::string& args = "") {
    char tmpl[] = "/tmp/dlock-redis-test.XXXXXX";
    dir_ = mkdtemp(tmpl);
    const std::string cmd = "bash " + ServerScript() + " " + verb + " " + dir_ + " " + args +
                            " > " + dir_ + ".out 2>&1";
    ok_ = !ServerScript().empty() && std::system(cmd.c_str()) == 0;
    if (ok_) uri_ = ReadFirstLine(dir_ + "/uri");
    if (!ok()) {
      std::ifstream out(dir_ + ".out");
      why_.assign(std::istreambuf_iterator<char>(out), std::istreambuf_iterator<char>());
    }
  }
  ~Topology() {
    (void)std::system(("bash " + ServerScript() + " stop " + dir_ + " >/dev/null 2>&1").c_str());
    (void)std::remove((dir_ + ".out").c_str());
  }
  bool ok() const { return ok_ && !uri_.empty(); }
  const std::string& uri() const { return uri_; }
  const std::string& dir() const { return dir_; }
  // What the script said when the topology did not start.
  const std::string& why() const { return why_; }
  int Port(const std::string& member) const { return std::atoi(ReadFirstLine(dir_ + "/" + member + ".port").c_str()); }
  bool Signal(const std::string& verb, const std::string& member) const {
    return std::system(("bash " + ServerScript() + " " + verb + " " + dir_ + " " + member).c_str()) == 0;
  }

 private:
  std::string dir_;
  std::string uri_;
  std::string why_;
  bool ok_ = false;
};

// A plain hiredis connection for poking at a server behind dlock's back.
inline ContextPtr Admin(int port, const std::string& password = "") {
  timeval tv{2, 0};
  ContextPtr c(redisConnectWithTimeout("127.0.0.1", port, tv));
  if (c && c->err == 0 && !password.empty()) {
    ReplyPtr r(static_cast<redisReply*>(redisCommand(c.get(), "AUTH %s", password.c_str())));
  }
  return c;
}

inline ReplyPtr Cmd(redisContext* c, const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<std::size_t> len;
  for (const auto& a : args) {
    argv.push_back(a.data());
    len.push_back(a.size());
  }
  return ReplyPtr(static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), len.data())));
}

// Redis's own clock (TIME), in ms; -1 when it cannot be read.
inline long long RedisNowMs(redisContext* c) {
  ReplyPtr t = Cmd(c, {"TIME"});
  if (!t || t->type != REDIS_REPLY_ARRAY || t->elements != 2) return -1;
  return std::atoll(t->element[0]->str) * 1000 + std::atoll(t->element[1]->str) / 1000;
}

inline std::unique_ptr<Backend> OpenRaw(const std::string& uri, Status* error = nullptr,
                                        std::chrono::milliseconds connect_timeout =
                                            std::chrono::milliseconds(2000)) {
  internal::BackendParams params;
  params.clock = DefaultClock();
  params.connect_timeout = connect_timeout;
  auto b = internal::OpenBackend(uri, params);
  if (!b.ok()) {
    if (error != nullptr) *error = b.status();
    return nullptr;
  }
  return std::move(*b);
}

inline std::unique_ptr<Client> NewClient(const std::string& uri) {
  auto backend = OpenRaw(uri);
  if (!backend) return nullptr;
  return Client::FromBackend(std::move(backend));
}

inline AcquireOptions Opts(std::chrono::milliseconds ttl,
                           std::chrono::milliseconds wait = std::chrono::milliseconds(0)) {
  AcquireOptions o;
  o.ttl = ttl;
  o.wait = wait;
  return o;
}

inline std::int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace dlock::redis::testing

#endif  // DLOCK_TESTS_BACKENDS_REDIS_REDIS_TEST_UTIL_H_
