// `dlock serve`: its flags, checked; the serving is serve_http.cc's.
#include "cli/serve_cmd.h"

#include <arpa/inet.h>
#include <signal.h>

#include "cli/command.h"
#include "cli/common.h"
#include "core/read_file.h"

namespace dlock::cli {
namespace {

struct ServeFlags {
  std::string backend;
  std::string listen = "127.0.0.1:9470";
  bool allow_remote = false;
  std::string token_file;
};

Result<ServeAddress> ParseListen(const std::string& text, bool allow_remote) {
  const auto colon = text.rfind(':');
  const std::string what = "--listen " + text;
  if (colon == std::string::npos || colon == 0) {
    return InvalidArgumentError(what + ": want HOST:PORT, e.g. 127.0.0.1:9470 (port 0: any)");
  }
  ServeAddress a{text.substr(0, colon), 0};
  if (a.host.size() > 2 && a.host.front() == '[' && a.host.back() == ']') {
    a.host = a.host.substr(1, a.host.size() - 2);
  }
  const std::string port = text.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(port) > 65535) {
    return InvalidArgumentError(what + ": the port must be a number from 0 to 65535");
  }
  a.port = std::stoi(port);
  in_addr v4{};
  in6_addr v6{};
  const bool is_v4 = ::inet_pton(AF_INET, a.host.c_str(), &v4) == 1;
  const bool is_v6 = ::inet_pton(AF_INET6, a.host.c_str(), &v6) == 1;
  if (!is_v4 && !is_v6) {
    return InvalidArgumentError(what + ": the host must be an IP address (127.0.0.1, ::1)");
  }
  const bool loopback = is_v4 ? (ntohl(v4.s_addr) >> 24) == 127 : IN6_IS_ADDR_LOOPBACK(&v6);
  if (!loopback && !allow_remote) {
    return InvalidArgumentError(what + " is not a loopback address: serving other hosts needs "
                                       "--allow-remote (and, better, --token-file)");
  }
  return a;
}

// The token's first line; refused if empty.
Result<std::string> ReadToken(const std::string& path) {
  DLOCK_ASSIGN_OR_RETURN(std::string text,
                         internal::ReadSmallFile(path, 4096, "--token-file " + path,
                                                 "4 KiB: a token is one line"));
  text = text.substr(0, text.find('\n'));
  if (text.empty()) return InvalidArgumentError("--token-file " + path + " is empty");
  return text;
}

int RunServe(const ServeFlags& flags) {
  auto address = ParseListen(flags.listen, flags.allow_remote);
  if (!address.ok()) return Fail(address.status());
  std::optional<std::string> token;
  if (!flags.token_file.empty()) {
    auto t = ReadToken(flags.token_file);
    if (!t.ok()) return Fail(t.status());
    token = std::move(*t);
  }
  // Signals are read by this thread: block them before any thread starts.
  sigset_t stop;
  sigemptyset(&stop);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stop, s);
  ::pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  auto store = OpenStore(flags.backend);
  if (!store.ok()) return Fail(store.status());
  return ServeHttp(*store->client, {address->host, address->port, flags.listen, token}, stop);
}

}  // namespace

void AddServeCommand(CLI::App& app, Commands& commands) {
  auto flags = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "Serve the store's locks over HTTP: /metrics for Prometheus (docs/operations.md)");
  cmd->add_option("--backend", flags->backend, kBackendHelp);
  cmd->add_option("--listen", flags->listen, "HOST:PORT to listen on (port 0: any free port)")
      ->capture_default_str();
  cmd->add_flag("--allow-remote", flags->allow_remote,
                "allow --listen on an address other hosts can reach");
  cmd->add_option("--token-file", flags->token_file,
                  "require 'Authorization: Bearer TOKEN', TOKEN being this file's first line");
  cmd->footer("Runs until SIGINT, SIGTERM or SIGHUP (exit 0). Exit status: 64 usage; 69 store "
              "unavailable or the address cannot be bound; 77 credentials refused.");
  commands.push_back({cmd, [flags] { return RunServe(*flags); }});
}

}  // namespace dlock::cli
