// The web dashboard `dlock serve` shows at `/`: one self-contained page
// (no outside scripts or styles) that polls /api/state and draws the
// holders, the waiters and the wait-for graph with its cycles marked.
#ifndef DLOCK_SRC_CLI_DASHBOARD_PAGE_H_
#define DLOCK_SRC_CLI_DASHBOARD_PAGE_H_

#include <string_view>

namespace dlock::cli {

std::string_view DashboardPage();

}  // namespace dlock::cli

#endif  // DLOCK_SRC_CLI_DASHBOARD_PAGE_H_
