// The asynchronous API from an installed dlock: a waiter that holds no
// thread (a callback), and a coroutine, both granted when the holder lets
// go; the lease given back with ReleaseAsync. docs/async.md.
//
// Built by examples/CMakeLists.txt (find_package).
#include <stdlib.h>

#include <chrono>
#include <coroutine>
#include <filesystem>
#include <future>
#include <iostream>
#include <string>

#include "dlock/async.h"
#include "dlock/client.h"

namespace {

using namespace std::chrono_literals;

// The smallest coroutine type that runs its body at once; a real program
// uses its framework's task type.
struct Detached {
  struct promise_type {
    Detached get_return_object() { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() {}
    void unhandled_exception() { std::terminate(); }
  };
};

Detached TakeInACoroutine(dlock::Client& client, std::promise<std::string>& said) {
  dlock::Result<dlock::Lease> lease = co_await dlock::Acquiring(client, "example/key", {.wait = 30s});
  if (!lease.ok()) {
    said.set_value(lease.status().ToString());
    co_return;
  }
  said.set_value("coroutine: granted token " + std::to_string(lease->token()));
  lease->ReleaseAsync();  // without waiting for the store
}

}  // namespace

int main() {
  std::string dir = (std::filesystem::temp_directory_path() / "dlock-async-XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) return 1;
  auto client = dlock::Client::Connect("sqlite://" + dir + "/locks.db");
  if (!client.ok()) {
    std::cerr << "async_acquire: " << client.status().ToString() << "\n";
    return 1;
  }
  auto held = (*client)->Acquire("example/key");
  if (!held.ok()) return 1;
  // Pending while the key is held; no thread waits for it.
  std::promise<std::string> first;
  (*client)->AcquireAsync("example/key", {.wait = 30s}, [&](dlock::Result<dlock::Lease> lease) {
    first.set_value(lease.ok() ? "callback: granted token " + std::to_string(lease->token())
                               : lease.status().ToString());
    // Released as the callback returns (the Lease's destructor).
  });
  std::promise<std::string> second;
  TakeInACoroutine(**client, second);
  std::cout << "holder: token " << held->token() << "\n";
  (void)held->Release();
  std::cout << first.get_future().get() << "\n" << second.get_future().get() << "\n";
  client->reset();  // waits for what is still in flight
  std::filesystem::remove_all(dir);
  return 0;
}
