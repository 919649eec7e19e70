// `dlock serve --listen HOST:PORT`: a long-running process over one store
// that serves what an operator watches (docs/operations.md).
#ifndef DLOCK_SRC_CLI_SERVE_CMD_H_
#define DLOCK_SRC_CLI_SERVE_CMD_H_

#include <signal.h>

#include <optional>
#include <string>

#include "dlock/client.h"

namespace dlock::cli {

struct ServeAddress {
  std::string host;
  int port = 0;  // 0: any free port
};

struct ServeConfig {
  std::string host;
  int port = 0;
  std::string listen;                // as given, for messages
  std::optional<std::string> token;  // required as "Authorization: Bearer" when set
};

// Serves until one of the signals in `stop` (blocked by the caller before
// any thread started) arrives; returns the exit code. serve_http.cc, or
// serve_no_http.cc in a build without cpp-httplib.
int ServeHttp(Client& client, const ServeConfig& config, const sigset_t& stop);

// Which binary serves: the HTTP library costs `dlock` (the lean one) half
// again its start-up time, so only dlock-full links it, and `dlock serve`
// is handed to dlock-full as the PostgreSQL and etcd stores are.
enum class ServeWhere { kHere, kInFullBinary, kNotBuilt };
ServeWhere WhereServeRuns();

}  // namespace dlock::cli

#endif  // DLOCK_SRC_CLI_SERVE_CMD_H_
