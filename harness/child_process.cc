#include "harness/child_process.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

namespace dlock::harness {

std::vector<std::string> EnvironmentWithStore(const std::string& store_uri) {
  std::vector<std::string> env = {"DLOCK_BACKEND=" + store_uri};
  for (char** e = environ; *e; ++e) {
    if (!std::string_view(*e).starts_with("DLOCK_BACKEND=")) env.emplace_back(*e);
  }
  return env;
}

std::vector<char*> NullEnded(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

namespace {

// Reads `fd` to its end.
std::string ReadAll(int fd) {
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) text.append(buf, static_cast<std::size_t>(n));
  }
  return text;
}

}  // namespace

Status RunToLog(std::vector<std::string> argv, const std::string& log_path, std::string* out) {
  int pipe_fds[2] = {-1, -1};
  if (out != nullptr && ::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return InternalError(std::string("cannot make a pipe: ") + std::strerror(errno));
  }
  std::vector<char*> args = NullEnded(argv);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (out != nullptr) {
    posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  } else {
    posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
  }
  posix_spawn_file_actions_addclosefrom_np(&actions, STDERR_FILENO + 1);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (out != nullptr) {
    ::close(pipe_fds[1]);
    if (rc == 0) *out = ReadAll(pipe_fds[0]);
    ::close(pipe_fds[0]);
  }
  if (rc != 0) return UnavailableError("cannot run " + argv[0] + ": " + std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::Ok();
  return UnavailableError(argv[0] + " " + (argv.size() > 1 ? argv[1] : "") +
                          " failed (wait status " + std::to_string(status) +
                          "); its output is in " + log_path);
}

}  // namespace dlock::harness
