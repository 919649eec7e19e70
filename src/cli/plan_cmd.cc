#include "cli/plan_cmd.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/command.h"
#include "cli/common.h"
#include "core/duration.h"
#include "plan/plan.h"

namespace dlock::cli {
namespace {

using plan::PlanReport;
using plan::Seconds;

// Three significant figures or so, trailing zeros trimmed: 25, 11.6, 0.44.
std::string Fmt(double x) {
  const double mag = std::fabs(x);
  int decimals = 0;
  if (mag >= 100)
    decimals = 0;
  else if (mag >= 10)
    decimals = 1;
  else if (mag >= 1 || mag == 0)
    decimals = 2;
  else
    decimals = std::min(6, 1 - static_cast<int>(std::floor(std::log10(mag))));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, x);
  std::string s = buf;
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  return s == "-0" ? "0" : s;
}

std::string Fmt(Seconds d) {
  const double s = d.count();
  if (s == 0) return "0s";
  if (s < 1e-3) return Fmt(s * 1e6) + "us";
  if (s < 1) return Fmt(s * 1e3) + "ms";
  return Fmt(s) + "s";
}

std::string Percent(double share) { return Fmt(share * 100) + "%"; }

struct Inputs {
  plan::PlanInput input;
  std::string rtt_source;  // "default", "--rtt", "--from-bench FILE"
};

Result<std::chrono::nanoseconds> RttFromBench(const std::string& path) {
  std::ifstream in(path);
  if (!in) return InvalidArgumentError("--from-bench: cannot read '" + path + "'");
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgumentError("--from-bench: '" + path + "' is not a JSON object");
  }
  auto it = j.find("floor_rtt_us");
  if (it == j.end() || !it->is_number() || !(it->get<double>() > 0) ||
      !std::isfinite(it->get<double>())) {
    return InvalidArgumentError("--from-bench: '" + path +
                                "' has no positive number field floor_rtt_us (the store's "
                                "round trip, microseconds, as `dlock bench --json` writes it)");
  }
  return std::chrono::nanoseconds(std::llround(it->get<double>() * 1000));
}

Result<Inputs> ParseFlags(const PlanFlags& flags) {
  Inputs out;
  plan::PlanInput& in = out.input;
  auto rate = plan::ParseRate(flags.rate);
  if (!rate.ok()) return rate.status().WithContext("--rate");
  in.rate_per_s = *rate;
  in.peak_factor = flags.peak;
  auto hold = plan::ParseFineDuration(flags.hold);
  if (!hold.ok()) return hold.status().WithContext("--hold");
  in.hold = *hold;
  in.hot_share = flags.hot_share;
  auto lease = plan::ParseFineDuration(flags.lease);
  if (!lease.ok()) return lease.status().WithContext("--lease");
  in.lease = *lease;
  out.rtt_source = "default";
  if (!flags.rtt.empty()) {
    auto rtt = plan::ParseFineDuration(flags.rtt);
    if (!rtt.ok()) return rtt.status().WithContext("--rtt");
    in.rtt = *rtt;
    out.rtt_source = "--rtt";
  } else if (!flags.from_bench.empty()) {
    DLOCK_ASSIGN_OR_RETURN(in.rtt, RttFromBench(flags.from_bench));
    out.rtt_source = "--from-bench " + flags.from_bench;
  }
  if (flags.idempotent == "yes") in.idempotent = true;
  if (flags.idempotent == "no") in.idempotent = false;
  return out;
}

template <typename T>
nlohmann::ordered_json OrNull(const std::optional<T>& v) {
  if (!v) return nullptr;
  if constexpr (std::is_same_v<T, Seconds>) {
    return v->count();
  } else {
    return *v;
  }
}

nlohmann::ordered_json ToJson(const Inputs& inputs, const PlanReport& r) {
  const plan::PlanInput& in = inputs.input;
  nlohmann::ordered_json remedies = nlohmann::ordered_json::array();
  for (plan::Remedy remedy : r.remedies) remedies.push_back(plan::RemedyName(remedy));
  nlohmann::ordered_json j = {
      {"peak_factor", in.peak_factor},
      {"hold_s", Seconds(in.hold).count()},
      {"hot_share", in.hot_share},
      {"lease_s", Seconds(in.lease).count()},
      {"rtt_s", Seconds(in.rtt).count()},
      {"rtt_source", inputs.rtt_source},
      {"coordination_round_trips", plan::kCoordinationRoundTrips},
      {"idempotent", OrNull(in.idempotent)},
      {"avg_rate_per_s", r.avg_rate_per_s},
      {"peak_rate_per_s", r.peak_rate_per_s},
      {"hold_ceiling_ops_per_s", r.hold_ceiling_ops_per_s},
      {"coordination_overhead_s", r.coordination_overhead_s.count()},
      {"coordination_overhead_share", r.coordination_overhead_share},
      {"service_s", r.service_s.count()},
      {"ceiling_ops_per_s", r.ceiling_ops_per_s},
      {"hot_key_rate_per_s", r.hot_key_rate_per_s},
      {"utilisation", r.utilisation},
      {"saturated", r.saturated},
      {"slack_ops_per_s", r.slack_ops_per_s},
      {"concurrency", r.concurrency},
      {"concurrency_with_queue", OrNull(r.concurrency_with_queue)},
      {"queue_model", "M/M/1"},
      {"queue_wait_mean_s", OrNull(r.queue_wait_mean_s)},
      {"queue_wait_p99_s", OrNull(r.queue_wait_p99_s)},
      {"utilisation_limit", plan::kUtilisationLimit},
      {"growth_headroom_factor", r.growth_headroom_factor},
      {"saturation_headroom_factor", r.saturation_headroom_factor},
      {"crash_lease_s", Seconds(r.crash.lease).count()},
      {"crash_backlog_ops", r.crash.backlog_ops},
      {"crash_drain_s", OrNull(r.crash.drain_s)},
      {"crash_degraded_s", OrNull(r.crash.degraded_s)},
      {"comparison_lease_s", Seconds(r.comparison_crash.lease).count()},
      {"comparison_crash_backlog_ops", r.comparison_crash.backlog_ops},
      {"comparison_crash_drain_s", OrNull(r.comparison_crash.drain_s)},
      {"comparison_crash_degraded_s", OrNull(r.comparison_crash.degraded_s)},
      {"crash_cost_ratio", OrNull(r.crash_cost_ratio)},
      {"verdict", plan::VerdictName(r.verdict)},
      {"verdict_text", plan::VerdictText(r.verdict)},
      {"remedies", remedies},
      {"mechanism", r.mechanism ? nlohmann::ordered_json(plan::MechanismName(*r.mechanism))
                                : nlohmann::ordered_json(nullptr)},
      {"mechanism_text", r.mechanism ? nlohmann::ordered_json(plan::MechanismText(*r.mechanism))
                                     : nlohmann::ordered_json(nullptr)},
  };
  return j;
}

// A lease as it would be typed: "30s", "5m"; finer ones in seconds.
std::string FmtLease(std::chrono::microseconds lease) {
  if (lease % std::chrono::milliseconds(1) == std::chrono::microseconds::zero()) {
    return internal::FormatDuration(std::chrono::duration_cast<std::chrono::milliseconds>(lease));
  }
  return Fmt(Seconds(lease));
}

void CrashSentence(std::ostream& out, const PlanReport& r, const plan::CrashCost& c, bool first) {
  const Seconds lease = c.lease;
  if (first) {
    out << "Crash at a " << FmtLease(c.lease) << " lease: a holder that crashes keeps the key "
        << "until the lease expires, while " << Fmt(r.hot_key_rate_per_s) << "/s × " << Fmt(lease)
        << " = " << Fmt(c.backlog_ops) << " operations queue";
    if (c.drain_s) {
      out << "; they drain only at the " << Fmt(r.slack_ops_per_s) << "/s of slack, in "
          << Fmt(*c.drain_s) << ", so one crash is " << Fmt(*c.degraded_s)
          << " of degraded service.\n";
    } else {
      out << ", and they never drain: the key is saturated.\n";
    }
    return;
  }
  out << Fmt(r.hot_key_rate_per_s) << "/s × " << Fmt(lease) << " = " << Fmt(c.backlog_ops)
      << " operations queue";
  if (c.drain_s) {
    out << ", drain in " << Fmt(*c.drain_s) << ": " << Fmt(*c.degraded_s) << " degraded.\n";
  } else {
    out << " and never drain.\n";
  }
}

// PrintText's paragraphs, one each, in the order printed.

void PrintTraffic(std::ostream& out, const PlanFlags& flags, const plan::PlanInput& in,
                  const PlanReport& r) {
  out << "Traffic: ";
  // "1M/day is 11.6/s", but not "3/s is 3/s".
  if (flags.rate != Fmt(r.avg_rate_per_s) && flags.rate != Fmt(r.avg_rate_per_s) + "/s") {
    out << flags.rate << " is ";
  }
  out << Fmt(r.avg_rate_per_s) << "/s on average";
  if (in.peak_factor != 1) {
    out << " and " << Fmt(r.peak_rate_per_s) << "/s at the " << Fmt(in.peak_factor) << "× peak";
  }
  out << ".\n";
}

void PrintCeiling(std::ostream& out, const plan::PlanInput& in, const PlanReport& r) {
  out << "Ceiling: one key allows 1 ÷ " << Fmt(Seconds(in.hold)) << " = "
      << Fmt(r.hold_ceiling_ops_per_s) << " operations per second for the critical section alone";
  if (r.coordination_overhead_s > Seconds::zero()) {
    out << ", and 1 ÷ " << Fmt(r.service_s) << " = " << Fmt(r.ceiling_ops_per_s)
        << "/s with Acquire and Release";
  }
  out << "; adding servers does not move it.\n";
}

void PrintHotKey(std::ostream& out, const plan::PlanInput& in, const PlanReport& r) {
  out << "Hot key: ";
  const char* whole = in.peak_factor != 1 ? "the peak" : "the traffic";
  if (in.hot_share < 1) {
    out << Percent(in.hot_share) << " of " << whole << " is " << Fmt(r.hot_key_rate_per_s)
        << "/s on one key: ";
  } else {
    out << "all of " << whole << ", " << Fmt(r.hot_key_rate_per_s) << "/s, is on one key: ";
  }
  out << Percent(r.utilisation) << " utilisation of a key that admits one holder at a time";
  if (r.saturated) {
    out << ", short by " << Fmt(-r.slack_ops_per_s) << "/s.\n";
  } else {
    out << ", " << Fmt(r.slack_ops_per_s) << " ops/s of slack.\n";
  }
}

void PrintLittlesLaw(std::ostream& out, const PlanReport& r) {
  out << "Little's law: " << Fmt(r.hot_key_rate_per_s) << "/s × " << Fmt(r.service_s) << " = "
      << Fmt(r.concurrency) << " operations in the critical section on average, "
      << (r.saturated ? "more than" : "under") << " the 1 the lock allows";
  if (r.concurrency_with_queue) {
    out << " (" << Fmt(*r.concurrency_with_queue) << " counting those queued)";
  }
  out << ".\n";
}

void PrintQueueing(std::ostream& out, const PlanReport& r) {
  out << "Queueing (M/M/1: Poisson arrivals, exponential hold; a fixed hold halves the mean): ";
  if (r.queue_wait_mean_s) {
    out << "mean wait " << Fmt(*r.queue_wait_mean_s) << ", p99 wait " << Fmt(*r.queue_wait_p99_s);
    if (r.queue_wait_mean_s->count() > 0) {
      out << ", " << Fmt(*r.queue_wait_p99_s / *r.queue_wait_mean_s) << "× the mean";
    }
    out << "; both grow as 1/(1 − utilisation), so p99 queues while the mean still looks "
           "fine.\n";
  } else {
    out << "saturated, so waits grow without bound: there is no finite mean or p99.\n";
  }
}

void PrintGrowth(std::ostream& out, const PlanReport& r) {
  out << "Growth: ";
  if (r.utilisation <= plan::kUtilisationLimit) {
    out << "the hot key takes " << Fmt(r.growth_headroom_factor)
        << "× today's peak before it passes " << Percent(plan::kUtilisationLimit)
        << " utilisation, where p99 waits run away, and " << Fmt(r.saturation_headroom_factor)
        << "× before it saturates.\n";
  } else if (!r.saturated) {
    out << "already past " << Percent(plan::kUtilisationLimit) << " utilisation; "
        << Fmt(r.saturation_headroom_factor) << "× today's peak saturates it.\n";
  } else {
    out << "none: traffic must shrink to " << Fmt(r.saturation_headroom_factor)
        << "× today's peak for the key to keep up.\n";
  }
}

void PrintCrashes(std::ostream& out, const plan::PlanInput& in, const PlanReport& r) {
  CrashSentence(out, r, r.crash, /*first=*/true);
  const bool tenth = in.lease <= plan::kDefaultLease;
  out << "At a " << FmtLease(r.comparison_crash.lease) << " lease instead ("
      << (tenth ? "a tenth of this one" : "the usual 30s") << ", for comparison): ";
  CrashSentence(out, r, r.comparison_crash, /*first=*/false);
  if (r.crash_cost_ratio) {
    out << "One crash at " << FmtLease(in.lease) << " costs " << Fmt(*r.crash_cost_ratio)
        << "× the degraded time of one at " << FmtLease(r.comparison_crash.lease)
        << ", for the same arrival rate: a longer lease buys tolerance of long pauses and pays "
           "for it in recovery.\n";
  }
}

void PrintCoordination(std::ostream& out, const Inputs& inputs, const PlanReport& r) {
  const plan::PlanInput& in = inputs.input;
  out << "Coordination: ";
  if (r.coordination_overhead_s > Seconds::zero()) {
    out << "Acquire + Release, " << plan::kCoordinationRoundTrips << " round trips of "
        << Fmt(Seconds(in.rtt)) << " (" << inputs.rtt_source << "), are "
        << Fmt(r.coordination_overhead_s) << " per operation, "
        << Percent(r.coordination_overhead_share) << " of the " << Fmt(Seconds(in.hold))
        << " hold.\n";
  } else {
    out << "not counted (rtt 0 from " << inputs.rtt_source
        << "): the figures price the critical section alone.\n";
  }
}

void PrintVerdict(std::ostream& out, const plan::PlanInput& in, const PlanReport& r) {
  out << "Verdict: " << plan::VerdictText(r.verdict) << ".\n";
  if (!r.remedies.empty()) {
    out << "Remedies:\n";
    for (plan::Remedy remedy : r.remedies) out << "  - " << plan::RemedyText(remedy) << ".\n";
  }
  if (r.mechanism) {
    out << "Mechanism (" << (*in.idempotent ? "idempotent" : "not idempotent")
        << "): " << plan::MechanismText(*r.mechanism) << ".\n";
  }
}

void PrintText(const PlanFlags& flags, const Inputs& inputs, const PlanReport& r) {
  const plan::PlanInput& in = inputs.input;
  std::ostream& out = std::cout;
  PrintTraffic(out, flags, in, r);
  PrintCeiling(out, in, r);
  PrintHotKey(out, in, r);
  PrintLittlesLaw(out, r);
  PrintQueueing(out, r);
  PrintGrowth(out, r);
  PrintCrashes(out, in, r);
  PrintCoordination(out, inputs, r);
  PrintVerdict(out, in, r);
}

}  // namespace

int RunPlan(const PlanFlags& flags) {
  auto inputs = ParseFlags(flags);
  if (!inputs.ok()) return Fail(inputs.status());
  auto report = plan::Plan(inputs->input);
  if (!report.ok()) return Fail(report.status());
  if (flags.json) {
    std::cout << ToJson(*inputs, *report).dump(2) << '\n';
  } else {
    PrintText(flags, *inputs, *report);
  }
  return kExitOk;
}

void AddPlanCommand(CLI::App& app, Commands& commands) {
  auto plan = std::make_shared<PlanFlags>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "What a lock on one key costs: ceiling, queueing, crash recovery, a verdict");
  cmd->add_option("--rate", plan->rate,
                  "average operations, all keys: 12/s, 500/min, 3.5k/h, 1M/day (bare: per s)")
      ->required();
  cmd->add_option("--peak", plan->peak, "peak rate / average rate")->capture_default_str();
  cmd->add_option("--hold", plan->hold, "critical section: 200us, 40ms, 1.5s")->required();
  cmd->add_option("--hot-share", plan->hot_share,
                  "the hottest key's share of all operations, (0, 1]")
      ->capture_default_str();
  cmd->add_option("--lease", plan->lease, "lease time to live")->capture_default_str();
  auto* rtt = cmd->add_option("--rtt", plan->rtt,
                              "one lock operation's store round trip (default 1ms); Acquire + "
                              "Release cost two");
  cmd->add_option("--from-bench", plan->from_bench,
                  "take the rtt from this `dlock bench --json` file (floor_rtt_us)")
      ->excludes(rtt);
  cmd->add_option("--idempotent", plan->idempotent,
                  "is the protected operation idempotent? recommends a mechanism")
      ->check(CLI::IsMember({"yes", "no"}));
  cmd->add_flag("--json", plan->json, "print every figure as JSON");
  cmd->footer(
      "Example: dlock plan --rate 1M/day --peak 3 --hold 40ms --hot-share 0.3\n"
      "Exit status: 0 planned (a saturated key is a verdict, not an error); 64 bad input.");
  commands.push_back({cmd, [plan] { return RunPlan(*plan); }});
}

}  // namespace dlock::cli
