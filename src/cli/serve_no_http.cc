// `dlock serve` in a build without cpp-httplib (libcpp-httplib-dev was not
// installed when it was configured): say so, and how to get it.
#include "cli/common.h"
#include "cli/serve_cmd.h"

namespace dlock::cli {

ServeWhere WhereServeRuns() { return ServeWhere::kNotBuilt; }

int ServeHttp(Client&, const ServeConfig&, const sigset_t&) {
  return Fail(kExitUnavailable,
              "this dlock was built without an HTTP server: install libcpp-httplib-dev "
              "(scripts/install-deps.sh) and build again");
}

}  // namespace dlock::cli
