// A program using an installed dlock: take a lock on the SQLite store, write
// a file through a fence with the lock's fencing token, release. Then show
// what the token is for: once someone else has been granted the lock, a
// write still carrying the old token is refused.
//
// Built by examples/CMakeLists.txt (find_package) and examples/Makefile
// (pkg-config); docs/install.md.
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <string>

#include "dlock/client.h"
#include "dlock/fence.h"
#include "dlock/version.h"

namespace {

using namespace std::chrono_literals;

int Fail(const std::string& what, const dlock::Status& status) {
  std::cerr << "fenced_write: " << what << ": " << status.ToString() << "\n";
  return 1;
}

}  // namespace

int main() {
  std::cout << "dlock " << dlock::Version() << "\n";

  // Everything lives in a fresh directory: the lock store and the data.
  std::string dir_template =
      (std::filesystem::temp_directory_path() / "dlock-example-XXXXXX").string();
  if (mkdtemp(dir_template.data()) == nullptr) {
    std::cerr << "fenced_write: cannot make a temporary directory\n";
    return 1;
  }
  const std::filesystem::path dir = dir_template;
  std::filesystem::create_directory(dir / "data");

  auto client = dlock::Client::Connect("sqlite://" + (dir / "locks.db").string());
  if (!client.ok()) return Fail("connect", client.status());
  const dlock::fence::Directory fence((dir / "data").string());

  auto first = (*client)->Acquire("reports/daily", {.ttl = 10s, .wait = 5s});
  if (!first.ok()) return Fail("acquire", first.status());
  std::cout << "acquired reports/daily, token " << first->token() << "\n";
  dlock::Status written =
      fence.Write("reports/daily", first->token(), "report.txt", "written under the first lease\n");
  if (!written.ok()) return Fail("fenced write", written);
  std::cout << "fenced write: admitted\n";
  const dlock::FencingToken old_token = first->token();
  if (dlock::Status s = first->Release(); !s.ok()) return Fail("release", s);
  std::cout << "released\n";

  // The next holder's token is higher. Once it has written, a late write
  // with the old token (a holder that paused past its lease) is refused.
  auto second = (*client)->Acquire("reports/daily", {.ttl = 10s, .wait = 5s});
  if (!second.ok()) return Fail("acquire again", second.status());
  std::cout << "acquired again, token " << second->token() << "\n";
  written = fence.Write("reports/daily", second->token(), "report.txt", "the second lease's\n");
  if (!written.ok()) return Fail("fenced write", written);
  dlock::Status late = fence.Write("reports/daily", old_token, "report.txt", "a late write\n");
  std::cout << "late write with token " << old_token << ": "
            << dlock::StatusCodeName(late.code()) << "\n";
  if (dlock::Status s = second->Release(); !s.ok()) return Fail("release", s);

  std::filesystem::remove_all(dir);
  return late.code() == dlock::StatusCode::kStaleToken ? 0 : 1;
}
