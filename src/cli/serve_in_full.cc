// `dlock serve` in the lean `dlock`: main() hands the command to dlock-full
// (WhereServeRuns), which links the HTTP library; this binary does not.
#include "cli/common.h"
#include "cli/serve_cmd.h"

namespace dlock::cli {

ServeWhere WhereServeRuns() { return ServeWhere::kInFullBinary; }

int ServeHttp(Client&, const ServeConfig&, const sigset_t&) {
  return Fail(kExitSoftware, "dlock serve reached the lean binary; it runs in dlock-full");
}

}  // namespace dlock::cli
