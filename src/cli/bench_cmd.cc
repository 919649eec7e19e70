// Every figure is measured in one run against one store, and printed as a
// ratio to a floor measured in the same run, because on a shared machine
// only ratios mean anything.
//
//   floor     Client::Ping(): one round trip of the kind a grant costs
//   cycle     TryAcquire + Release, uncontended: two round trips of work,
//             compared with two pings; and the same on a client that
//             records no metrics, in alternating blocks, to show what
//             recording costs
//   hand-off  N contenders on one key: release invoked -> next holder granted
//   hot key   grants per second on that key, against the ideal 1 / hold
//   many keys C clients, one key each: cycles per second, against the same
//             clients pinging (two pings per cycle)
//   memory    client memory per held lease, with L leases held by one client
#include "cli/command.h"
#include "cli/bench_cmd.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "core/duration.h"
#include "core/stats.h"

namespace dlock::cli {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

std::int64_t NowNs() { return MonotonicClock::now().time_since_epoch().count(); }

using internal::Summary;

// Samples in ns, summarised in µs (src/core/stats.h, as the bench programs).
Summary Summarise(const std::vector<std::int64_t>& ns) {
  std::vector<double> us;
  us.reserve(ns.size());
  for (auto v : ns) us.push_back(static_cast<double>(v) / 1e3);
  return internal::Summarize(std::move(us));
}

json ToJson(const Summary& s) {
  return {{"p50_us", s.p50_us}, {"p99_us", s.p99_us}, {"mean_us", s.mean_us}, {"n", s.n}};
}

std::int64_t RssBytes() {
  std::ifstream statm("/proc/self/statm");
  std::int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

double Ratio(double a, double b) { return b > 0 ? a / b : 0; }

std::string Fixed(double v, int digits = 1) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(digits) << v;
  return o.str();
}

}  // namespace

namespace {

// What one run measured, figure by figure.
struct BenchFigures {
  bool have_floor = false;  // the store has Ping
  Summary floor, cycle, handoff;
  Summary cycle_unrecorded;  // the cycle on a client recording no metrics
  int retried = 0;  // requests not answered in time, tried again
  std::vector<int> per_contender;
  double hot_ops = 0, ideal_ops = 0;
  double many_ops = 0, many_floor_ops = 0;
  std::int64_t bytes_per_lease = 0;
};

// One bench run: each figure is one method, run in the order of the list at
// the top of this file.
class Bench {
 public:
  Bench(const BenchFlags& flags, const Store& store, milliseconds hold, milliseconds duration)
      : f_(flags), store_(store), client_(*store.client), hold_(hold), duration_(duration) {
    opts_.ttl = std::chrono::seconds(30);
    opts_.wait = std::chrono::seconds(30);
  }

  Status Floor();
  Status Cycle();
  Status HotKey();
  void ManyKeys();
  Status Memory();
  const BenchFigures& figures() const { return out_; }

 private:
  // A store that does not answer one request in time (a loaded ZooKeeper
  // fsyncing its log, a fresh one preallocating it) costs that sample, not
  // the run: up to three tries per request, counted as `retried`.
  Status WithRetries(const std::function<Status()>& op);
  // `op` timed f_.iterations times after a tenth as many untimed.
  Result<Summary> Sample(const std::function<Status()>& op);
  // `op` timed `n` times into `ns`.
  Status SampleInto(const std::function<Status()>& op, int n, std::vector<std::int64_t>& ns);
  std::unique_ptr<Client> OpenClient() const;
  // One contender of the hot-key run, until `stop_`.
  void Contend(std::size_t index);
  // Operations per second of f_.clients clients, one key each: lock
  // cycles, or (without `locks`) two pings.
  double RunClients(bool locks);

  const BenchFlags& f_;
  const Store& store_;
  Client& client_;
  const milliseconds hold_, duration_;
  const std::string prefix_ =
      "bench/" + std::to_string(DefaultRandom()->Next() % 1'000'000'000) + "/";
  AcquireOptions opts_;
  BenchFigures out_;
  // The hot-key run.
  std::atomic<std::int64_t> release_invoked_{0};
  std::atomic<bool> stop_{false};
  std::atomic<int> errors_{0};
  std::mutex mu_;
  std::vector<std::int64_t> handoffs_;  // under mu_
  std::string first_error_;             // under mu_
};

Status Bench::WithRetries(const std::function<Status()>& op) {
  Status s;
  for (int attempt = 0; attempt < 3; ++attempt) {
    s = op();
    if (s.code() != StatusCode::kUnavailable) return s;
    ++out_.retried;
  }
  return s;
}

Result<Summary> Bench::Sample(const std::function<Status()>& op) {
  std::vector<std::int64_t> samples, warm_up;
  DLOCK_RETURN_IF_ERROR(SampleInto(op, f_.iterations / 10, warm_up));
  DLOCK_RETURN_IF_ERROR(SampleInto(op, f_.iterations, samples));
  return Summarise(samples);
}

Status Bench::SampleInto(const std::function<Status()>& op, int n,
                         std::vector<std::int64_t>& ns) {
  for (int i = 0; i < n; ++i) {
    const auto t0 = NowNs();
    DLOCK_RETURN_IF_ERROR(WithRetries(op));
    ns.push_back(NowNs() - t0);
  }
  return Status::Ok();
}

std::unique_ptr<Client> Bench::OpenClient() const {
  auto c = Client::Connect(store_.uri);
  return c.ok() ? std::move(*c) : nullptr;
}

Status Bench::Floor() {
  Status ping = WithRetries([&] { return client_.Ping(); });
  out_.have_floor = ping.ok();
  if (!out_.have_floor) {
    // kFailedPrecondition: this store has no Ping; no floor, no ratios.
    return ping.code() == StatusCode::kFailedPrecondition ? Status::Ok() : ping;
  }
  DLOCK_ASSIGN_OR_RETURN(out_.floor, Sample([&] { return client_.Ping(); }));
  return Status::Ok();
}

Status Bench::Cycle() {
  ClientOptions unrecorded;
  unrecorded.record_metrics = false;
  DLOCK_ASSIGN_OR_RETURN(std::unique_ptr<Client> quiet, Client::Connect(store_.uri, unrecorded));
  auto cycle_on = [&](Client& c) {
    return [&c, this]() -> Status {
      auto lease = c.TryAcquire(prefix_ + "cycle", opts_);
      if (!lease.ok()) return lease.status();
      return lease->Release();
    };
  };
  // Ten alternating blocks, so that both clients see the same machine.
  std::vector<std::int64_t> recorded, unrecorded_ns, warm_up;
  DLOCK_RETURN_IF_ERROR(SampleInto(cycle_on(client_), f_.iterations / 10, warm_up));
  DLOCK_RETURN_IF_ERROR(SampleInto(cycle_on(*quiet), f_.iterations / 10, warm_up));
  const int block = std::max(f_.iterations / 10, 1);
  for (int i = 0; i < 10; ++i) {
    DLOCK_RETURN_IF_ERROR(SampleInto(cycle_on(client_), block, recorded));
    DLOCK_RETURN_IF_ERROR(SampleInto(cycle_on(*quiet), block, unrecorded_ns));
  }
  out_.cycle = Summarise(recorded);
  out_.cycle_unrecorded = Summarise(unrecorded_ns);
  return Status::Ok();
}

void Bench::Contend(std::size_t index) {
  auto me = OpenClient();
  if (!me) {
    ++errors_;
    return;
  }
  while (!stop_) {
    const std::int64_t asked = NowNs();
    auto lease = me->Acquire(prefix_ + "hot", opts_);
    const std::int64_t granted = NowNs();
    if (!lease.ok()) {
      std::lock_guard l(mu_);
      if (errors_++ == 0) first_error_ = lease.status().ToString();
      continue;
    }
    const std::int64_t released = release_invoked_.load();
    {
      std::lock_guard l(mu_);
      ++out_.per_contender[index];
      // A hand-off: we were waiting when the previous holder let go.
      if (released > asked) handoffs_.push_back(granted - released);
    }
    std::this_thread::sleep_for(hold_);
    release_invoked_ = NowNs();
    (void)lease->Release();
  }
}

Status Bench::HotKey() {
  out_.per_contender.assign(static_cast<std::size_t>(f_.contenders), 0);
  const std::int64_t start = NowNs();
  std::vector<std::thread> threads;
  for (std::size_t c = 0; c < out_.per_contender.size(); ++c) {
    threads.emplace_back([this, c] { Contend(c); });
  }
  std::this_thread::sleep_for(duration_);
  stop_ = true;
  for (auto& t : threads) t.join();
  const double seconds = static_cast<double>(NowNs() - start) / 1e9;
  if (errors_ > 0) {
    return UnavailableError("contended run: " + std::to_string(errors_.load()) +
                            " errors, first: " + first_error_);
  }
  out_.handoff = Summarise(handoffs_);
  int grants = 0;
  for (int n : out_.per_contender) grants += n;
  out_.hot_ops = grants / seconds;
  out_.ideal_ops = 1.0 / std::chrono::duration<double>(hold_).count();
  return Status::Ok();
}

double Bench::RunClients(bool locks) {
  std::atomic<std::int64_t> count{0};
  std::atomic<bool> done{false};
  std::vector<std::thread> threads;
  for (int c = 0; c < f_.clients; ++c) {
    threads.emplace_back([&, c] {
      auto me = OpenClient();
      if (!me) return;
      const std::string key = prefix_ + "many/" + std::to_string(c);
      while (!done) {
        if (locks) {
          auto lease = me->TryAcquire(key, opts_);
          if (lease.ok()) (void)lease->Release();
        } else {
          (void)me->Ping();
          (void)me->Ping();
        }
        ++count;
      }
    });
  }
  const auto t0 = NowNs();
  std::this_thread::sleep_for(duration_ / 2);
  done = true;
  for (auto& t : threads) t.join();
  return static_cast<double>(count.load()) / (static_cast<double>(NowNs() - t0) / 1e9);
}

void Bench::ManyKeys() {
  out_.many_ops = RunClients(true);
  out_.many_floor_ops = out_.have_floor ? RunClients(false) : 0;
}

Status Bench::Memory() {
  std::vector<Lease> held;
  held.reserve(static_cast<std::size_t>(f_.leases));
  const std::int64_t before = RssBytes();
  AcquireOptions long_opts = opts_;
  long_opts.ttl = std::chrono::minutes(10);
  for (int i = 0; i < f_.leases; ++i) {
    Result<Lease> lease = UnavailableError("not tried");
    DLOCK_RETURN_IF_ERROR(WithRetries([&] {
      lease = client_.TryAcquire(prefix_ + "mem/" + std::to_string(i), long_opts);
      return lease.status();
    }));
    held.push_back(std::move(*lease));
  }
  out_.bytes_per_lease = (RssBytes() - before) / f_.leases;
  for (auto& l : held) (void)l.Release();
  return Status::Ok();
}

void PrintLatencies(const BenchFlags& f, const BenchFigures& b) {
  auto line = [](const std::string& what, const Summary& s) {
    std::cout << "  " << std::left << std::setw(34) << what << std::right << std::setw(10)
              << s.p50_us << std::setw(10) << s.p99_us << "   (n=" << s.n << ")\n";
  };
  std::cout << std::fixed << std::setprecision(1)
            << "                                         p50 us    p99 us\n";
  if (b.have_floor) line("floor: one round trip (Ping)", b.floor);
  line("cycle: TryAcquire + Release", b.cycle);
  line("cycle, recording no metrics", b.cycle_unrecorded);
  line("hand-off, " + std::to_string(f.contenders) + " contenders", b.handoff);
  std::cout << "  cycle / cycle recording nothing   "
            << Fixed(Ratio(b.cycle.p50_us, b.cycle_unrecorded.p50_us), 3) << "\n";
  if (b.retried > 0) {
    std::cout << "  (" << b.retried << " request(s) not answered in time were retried)\n";
  }
  if (b.have_floor) {
    std::cout << "  cycle / two round trips           "
              << Fixed(Ratio(b.cycle.p50_us, 2 * b.floor.p50_us), 2) << "\n"
              << "  hand-off / one round trip         "
              << Fixed(Ratio(b.handoff.p50_us, b.floor.p50_us), 2) << "\n";
  } else {
    std::cout << "  (this store has no Ping: no floor, no ratios)\n";
  }
}

void PrintThroughput(const BenchFlags& f, const BenchFigures& b) {
  const auto [fewest, most] = std::minmax_element(b.per_contender.begin(), b.per_contender.end());
  std::cout << "  hot key: " << Fixed(b.hot_ops) << " grants/s with a " << f.hold
            << " hold; ideal 1/hold = " << Fixed(b.ideal_ops) << "/s ("
            << Fixed(100 * Ratio(b.hot_ops, b.ideal_ops)) << "%); per contender " << *fewest
            << ".." << *most << "\n"
            << "  many keys: " << Fixed(b.many_ops) << " cycles/s with " << f.clients
            << " clients";
  if (b.have_floor) {
    std::cout << "; floor " << Fixed(b.many_floor_ops) << " (two pings)/s ("
              << Fixed(100 * Ratio(b.many_ops, b.many_floor_ops)) << "%)";
  }
  std::cout << "\n  memory: " << b.bytes_per_lease << " bytes of client memory per held lease ("
            << f.leases << " leases)\n";
}

json FiguresJson(const BenchFlags& f, const BenchFigures& b, milliseconds hold,
                 const std::string& backend) {
  const json none = nullptr;
  return {{"backend", backend},
          {"floor_rtt_us", b.have_floor ? json(b.floor.p50_us) : none},
          {"floor", b.have_floor ? ToJson(b.floor) : none},
          {"cycle", ToJson(b.cycle)},
          {"cycle_unrecorded", ToJson(b.cycle_unrecorded)},
          {"metrics_cost_ratio", Ratio(b.cycle.p50_us, b.cycle_unrecorded.p50_us)},
          {"cycle_ratio_to_floor",
           b.have_floor ? json(Ratio(b.cycle.p50_us, 2 * b.floor.p50_us)) : none},
          // No hand-off seen (the releaser always took the key back): null,
          // not a zero latency.
          {"handoff", b.handoff.n ? ToJson(b.handoff) : none},
          {"handoff_ratio_to_floor", b.have_floor && b.handoff.n
                                         ? json(Ratio(b.handoff.p50_us, b.floor.p50_us))
                                         : none},
          {"contenders", f.contenders},
          {"hot_key", {{"hold_ms", std::chrono::duration<double, std::milli>(hold).count()},
                       {"ops_per_s", b.hot_ops},
                       {"ideal_ops_per_s", b.ideal_ops},
                       {"ratio_to_ideal", Ratio(b.hot_ops, b.ideal_ops)},
                       {"per_contender", b.per_contender}}},
          {"many_keys",
           {{"clients", f.clients},
            {"ops_per_s", b.many_ops},
            {"floor_ops_per_s", b.have_floor ? json(b.many_floor_ops) : none},
            {"ratio_to_floor", b.have_floor ? json(Ratio(b.many_ops, b.many_floor_ops)) : none}}},
          {"memory", {{"leases", f.leases}, {"bytes_per_lease", b.bytes_per_lease}}},
          {"retried", b.retried}};
}

Status CheckBenchFlags(const BenchFlags& f, milliseconds duration) {
  auto range = [](const char* flag, int value, int low, int high) {
    if (value >= low && value <= high) return Status::Ok();
    return InvalidArgumentError(std::string(flag) + " must be " + std::to_string(low) + " to " +
                                std::to_string(high));
  };
  if (duration <= milliseconds(0)) return InvalidArgumentError("--duration must be positive");
  DLOCK_RETURN_IF_ERROR(range("--iterations", f.iterations, 10, 1'000'000));
  DLOCK_RETURN_IF_ERROR(range("--contenders", f.contenders, 2, 64));
  DLOCK_RETURN_IF_ERROR(range("--clients", f.clients, 1, 64));
  return range("--leases", f.leases, 1, 1'000'000);
}

}  // namespace

int RunBench(const BenchFlags& f) {
  auto hold = internal::ParseDuration(f.hold);
  if (!hold.ok()) return Fail(hold.status().WithContext("--hold"));
  auto duration = internal::ParseDuration(f.duration);
  if (!duration.ok()) return Fail(duration.status().WithContext("--duration"));
  if (Status s = CheckBenchFlags(f, *duration); !s.ok()) return Fail(kExitUsage, s.message());

  auto store = OpenStore(f.backend);
  if (!store.ok()) return Fail(store.status());
  std::cout << "dlock bench on " << store->client->Describe() << std::endl;
  Bench bench(f, *store, *hold, *duration);
  for (const auto& step : {&Bench::Floor, &Bench::Cycle, &Bench::HotKey}) {
    if (Status s = (bench.*step)(); !s.ok()) return Fail(s);
  }
  bench.ManyKeys();
  if (Status s = bench.Memory(); !s.ok()) return Fail(s);

  PrintLatencies(f, bench.figures());
  PrintThroughput(f, bench.figures());
  if (!f.json.empty()) {
    std::ofstream file(f.json, std::ios::trunc);
    file << FiguresJson(f, bench.figures(), *hold, store->client->Describe()).dump(2) << '\n';
    if (!file) return Fail(kExitCantCreate, "cannot write " + f.json);
  }
  return kExitOk;
}

void AddBenchCommand(CLI::App& app, Commands& commands) {
  auto bench = std::make_shared<BenchFlags>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Measure a store: floor, lock cycle, hand-off, hot key, many keys, memory per lease");
  cmd->add_option("--backend", bench->backend, kBackendHelp);
  cmd->add_option("--iterations", bench->iterations, "samples of the floor and the cycle")
      ->capture_default_str();
  cmd->add_option("--contenders", bench->contenders, "clients contending for one key")
      ->capture_default_str();
  cmd->add_option("--hold", bench->hold, "critical section of the contenders")
      ->capture_default_str();
  cmd->add_option("--duration", bench->duration, "length of the contended run")
      ->capture_default_str();
  cmd->add_option("--clients", bench->clients, "clients in the many-key run")
      ->capture_default_str();
  cmd->add_option("--leases", bench->leases, "leases held at once for the memory figure")
      ->capture_default_str();
  cmd->add_option("--json", bench->json,
                  "write every figure to FILE (read by 'dlock plan --from-bench FILE')");
  commands.push_back({cmd, [bench] { return RunBench(*bench); }});
}

}  // namespace dlock::cli
