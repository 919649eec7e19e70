// `dlock serve`'s HTTP side, through cpp-httplib (Debian's libcpp-httplib):
// /metrics for Prometheus, the dashboard at / and the JSON it polls
// (/api/state); one look at the store per request.
#include <signal.h>

#include <iostream>
#include <thread>

#include <httplib.h>

#include "cli/common.h"
#include "cli/dashboard_page.h"
#include "cli/serve_cmd.h"
#include "cli/status_view.h"
#include "cli/store_gauges.h"
#include "dlock/metrics.h"
#include "dlock/waits.h"

namespace dlock::cli {
namespace {

// Compares without leaving the position of the first difference in the
// time it takes.
bool SameSecret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

std::string MetricsPage(Client& client) {
  StoreLook look;
  const TimePoint start = MonotonicClock::now();
  look.holders = client.List();
  if (look.holders.ok()) look.waiters = client.Waiters();
  look.took = MonotonicClock::now() - start;
  std::string page = StoreGaugesText(look);
  if (auto own = PrometheusText(client.Metrics()); own.ok()) page += *own;
  if (auto fences = PrometheusText(FenceMetrics()); fences.ok()) page += *fences;
  return page + ProcessText();
}

void Route(httplib::Server& server, Client& client, const std::optional<std::string>& token) {
  server.set_pre_routing_handler([token](const httplib::Request& req, httplib::Response& res) {
    if (!token || SameSecret(req.get_header_value("Authorization"), "Bearer " + *token)) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    res.status = 401;
    res.set_header("WWW-Authenticate", "Bearer");
    res.set_content("a bearer token is needed (Authorization: Bearer ...)\n", "text/plain");
    return httplib::Server::HandlerResponse::Handled;
  });
  server.Get("/metrics", [&client](const httplib::Request&, httplib::Response& res) {
    res.set_content(MetricsPage(client), "text/plain; version=0.0.4; charset=utf-8");
  });
  server.Get("/api/state", [&client](const httplib::Request& req, httplib::Response& res) {
    res.set_content(JsonText(LookJson(client, req.get_param_value("prefix"), true), -1),
                    "application/json");
  });
  server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    // Everything the page needs is in it: nothing from elsewhere may run.
    res.set_header("Content-Security-Policy",
                   "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                   "connect-src 'self'");
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_content(std::string(DashboardPage()), "text/html; charset=utf-8");
  });
}

}  // namespace

ServeWhere WhereServeRuns() { return ServeWhere::kHere; }

int ServeHttp(Client& client, const ServeConfig& config, const sigset_t& stop) {
  httplib::Server server;
  Route(server, client, config.token);
  const int port = config.port == 0 ? server.bind_to_any_port(config.host)
                                    : (server.bind_to_port(config.host, config.port) ? config.port
                                                                                     : -1);
  if (port < 0) {
    return Fail(kExitUnavailable, "cannot listen on " + config.listen +
                                      " (in use, or not an address of this host)");
  }
  std::cout << "dlock serve: http://" << config.listen.substr(0, config.listen.rfind(':') + 1)
            << port << "/metrics for " << client.Describe() << std::endl;
  std::thread loop([&server] { server.listen_after_bind(); });
  int signal = 0;
  ::sigwait(&stop, &signal);
  server.stop();
  loop.join();
  return kExitOk;
}

}  // namespace dlock::cli
