#include "plan/plan.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace dlock::plan {
namespace {

using std::chrono::microseconds;

std::string Num(double x) {
  // For messages only: enough digits to recognise what was typed.
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::general, 6);
  return ec == std::errc() ? std::string(buf, end) : std::string("?");
}

Status Validate(const PlanInput& in) {
  // Written as !(ok) so that NaN fails too.
  if (!(in.rate_per_s > 0) || !std::isfinite(in.rate_per_s)) {
    return InvalidArgumentError("rate " + Num(in.rate_per_s) +
                                " is not a positive number of operations per second");
  }
  if (!(in.peak_factor >= 1) || !std::isfinite(in.peak_factor)) {
    return InvalidArgumentError("peak factor " + Num(in.peak_factor) +
                                " is below 1: it is the peak rate over the average rate");
  }
  if (in.hold <= microseconds::zero()) {
    return InvalidArgumentError(
        "hold must be positive: it is how long the critical section "
        "keeps the key");
  }
  if (!(in.hot_share > 0 && in.hot_share <= 1)) {
    return InvalidArgumentError("hot share " + Num(in.hot_share) +
                                " is outside (0, 1]: it is the hottest key's share of all "
                                "operations");
  }
  if (in.lease <= microseconds::zero()) return InvalidArgumentError("lease must be positive");
  if (in.rtt < std::chrono::nanoseconds::zero())
    return InvalidArgumentError("rtt must not be negative");
  return Status::Ok();
}

CrashCost PriceCrash(microseconds lease, double rate_per_s, double slack_ops_per_s,
                     bool saturated) {
  // The crashed holder keeps the key until its lease expires; everything
  // arriving meanwhile queues. Afterwards the key serves at its ceiling while
  // new work keeps arriving, so the backlog shrinks only at the slack.
  CrashCost cost;
  cost.lease = lease;
  cost.backlog_ops = rate_per_s * Seconds(lease).count();
  if (!saturated) {
    cost.drain_s = Seconds(cost.backlog_ops / slack_ops_per_s);
    cost.degraded_s = Seconds(lease) + *cost.drain_s;
  }
  return cost;
}

bool AllFinite(const PlanReport& r) {
  auto ok = [](double x) { return std::isfinite(x); };
  auto ok_s = [&](const std::optional<Seconds>& s) { return !s || ok(s->count()); };
  return ok(r.peak_rate_per_s) && ok(r.hold_ceiling_ops_per_s) &&
         ok(r.coordination_overhead_share) && ok(r.ceiling_ops_per_s) && ok(r.hot_key_rate_per_s) &&
         ok(r.utilisation) && ok(r.slack_ops_per_s) && ok(r.growth_headroom_factor) &&
         ok(r.saturation_headroom_factor) && ok(r.crash.backlog_ops) && ok_s(r.crash.drain_s) &&
         ok(r.comparison_crash.backlog_ops) && ok_s(r.comparison_crash.drain_s) &&
         ok_s(r.queue_wait_mean_s) && ok_s(r.queue_wait_p99_s) &&
         (!r.concurrency_with_queue || ok(*r.concurrency_with_queue)) &&
         (!r.crash_cost_ratio || ok(*r.crash_cost_ratio));
}

}  // namespace

microseconds ComparisonLease(microseconds lease) {
  if (lease > kDefaultLease) return kDefaultLease;
  return std::max(lease / 10, microseconds(1));
}

namespace {

// The key's ceiling: how long one operation occupies it, and so how many it
// serves per second.
void PriceCeiling(const PlanInput& in, PlanReport& r) {
  const Seconds hold = in.hold;
  r.avg_rate_per_s = in.rate_per_s;
  r.peak_rate_per_s = in.rate_per_s * in.peak_factor;
  r.hold_ceiling_ops_per_s = 1 / hold.count();

  // The key is busy from the grant until the store applies the Release, and
  // the next waiter needs another round trip to be granted: about one Acquire
  // plus one Release per operation on a contended key.
  r.coordination_overhead_s = kCoordinationRoundTrips * Seconds(in.rtt);
  r.coordination_overhead_share = r.coordination_overhead_s / hold;
  r.service_s = hold + r.coordination_overhead_s;
  r.ceiling_ops_per_s = 1 / r.service_s.count();
}

// The hot key's load against its ceiling, at the peak.
void PriceLoad(const PlanInput& in, PlanReport& r) {
  // The hot key at peak is what fails first; every other key sees less.
  r.hot_key_rate_per_s = in.hot_share * r.peak_rate_per_s;
  // rate × service rather than rate / ceiling: no reciprocal to round, so
  // demand exactly at the ceiling comes out as exactly 1.
  const double rho = r.hot_key_rate_per_s * r.service_s.count();
  r.utilisation = rho;
  r.saturated = rho >= 1;
  r.slack_ops_per_s = (1 - rho) / r.service_s.count();
  // Little's law, L = λW, with W the time in the lock: for a single server it
  // equals the utilisation, and must stay under the one holder the lock allows.
  r.concurrency = rho;
  r.growth_headroom_factor = kUtilisationLimit / rho;
  r.saturation_headroom_factor = 1 / rho;
}

// Queueing model: M/M/1. Arrivals from many independent clients are close
// to Poisson. Service is the critical section, which is rarely constant
// (a slow disk, a GC pause, a retry), and exponential service is the
// variability that gives the tail a closed form: P(wait > t) = ρ·e^{−(μ−λ)t}.
// For a truly fixed hold (M/D/1) the mean wait would be half of this
// (Pollaczek–Khinchine); planning on the pessimistic side is the point.
//   mean wait = ρ·S / (1 − ρ)
//   p99 wait  = ln(100ρ)·S / (1 − ρ), and 0 when ρ <= 1% (99% never wait)
// Both grow as 1 / (1 − ρ); p99 stays ln(100ρ)/ρ ≈ 5–9× the mean across
// 40–95% utilisation, so it reaches seconds while the mean still looks fine.
void PriceQueue(PlanReport& r) {
  if (r.saturated) return;  // the queue grows without bound
  const double rho = r.utilisation;
  const Seconds s = r.service_s;
  r.queue_wait_mean_s = rho * s / (1 - rho);
  r.queue_wait_p99_s = rho > 0.01 ? std::log(100 * rho) * s / (1 - rho) : Seconds(0);
  r.concurrency_with_queue = r.hot_key_rate_per_s * (*r.queue_wait_mean_s + s).count();
}

// One crash at the input lease, and at the shorter one it is compared with.
void PriceCrashes(const PlanInput& in, PlanReport& r) {
  r.crash = PriceCrash(in.lease, r.hot_key_rate_per_s, r.slack_ops_per_s, r.saturated);
  r.comparison_crash =
      PriceCrash(ComparisonLease(in.lease), r.hot_key_rate_per_s, r.slack_ops_per_s, r.saturated);
  if (r.crash.degraded_s && r.comparison_crash.degraded_s) {
    r.crash_cost_ratio = *r.crash.degraded_s / *r.comparison_crash.degraded_s;
  }
}

Verdict Judge(const PlanReport& r) {
  if (r.saturated) return Verdict::kSaturated;
  if (r.utilisation > kUtilisationLimit) return Verdict::kFailsAtP99;
  if (r.growth_headroom_factor < 2) return Verdict::kHoldsFailsBeforeDoubling;
  return Verdict::kHolds;
}

std::vector<Remedy> Remedies(const PlanInput& in, const PlanReport& r) {
  std::vector<Remedy> remedies;
  if (r.verdict != Verdict::kHolds) {
    // The ceiling belongs to the key, so only changing the key's work helps.
    remedies.push_back(Remedy::kShrinkCriticalSection);
    remedies.push_back(Remedy::kSplitKey);
    remedies.push_back(Remedy::kAtomicOperation);
  }
  // 10%: from here a faster or closer store moves the ceiling noticeably.
  if (r.coordination_overhead_share >= 0.1) remedies.push_back(Remedy::kCutCoordination);
  // A lease longer than the usual 30 s is bought to survive long pauses, and
  // costs recovery time; a fencing token makes an early expiry harmless.
  if (in.lease > kDefaultLease) remedies.push_back(Remedy::kFenceAndTuneLease);
  return remedies;
}

}  // namespace

Result<PlanReport> Plan(const PlanInput& in) {
  DLOCK_RETURN_IF_ERROR(Validate(in));
  PlanReport r;
  PriceCeiling(in, r);
  PriceLoad(in, r);
  PriceQueue(r);
  PriceCrashes(in, r);
  r.verdict = Judge(r);
  r.remedies = Remedies(in, r);
  if (in.idempotent) {
    r.mechanism = *in.idempotent ? Mechanism::kExistingStoreLock : Mechanism::kFencingOrDedup;
  }
  if (!AllFinite(r)) {
    return InvalidArgumentError("the inputs are too extreme to compute with (rate " +
                                Num(in.rate_per_s) + "/s, hot share " + Num(in.hot_share) + ")");
  }
  return r;
}

namespace {

// digits[.digits], returned as a double; `pos` moves past it. False if there
// are no digits.
bool ParseDecimal(std::string_view text, std::size_t& pos, double& out) {
  std::size_t start = pos;
  while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') ++pos;
  bool digits = pos > start;
  if (pos < text.size() && text[pos] == '.') {
    std::size_t frac = ++pos;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') ++pos;
    digits = digits || pos > frac;
  }
  if (!digits) return false;
  auto [end, ec] = std::from_chars(text.data() + start, text.data() + pos, out);
  return ec == std::errc() && end == text.data() + pos;
}

}  // namespace

Result<double> ParseRate(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return InvalidArgumentError("invalid rate '" + std::string(text) + "' (" + std::string(why) +
                                "): expected a positive number, optionally k, M or G, per s, "
                                "min, h or day, e.g. 12/s, 500/min, 3.5k/h, 1M/day");
  };
  std::size_t pos = 0;
  double value = 0;
  if (!ParseDecimal(text, pos, value)) {
    if (!text.empty() && text[0] == '-') return bad("negative");
    return bad("no number");
  }
  const std::string_view rest = text.substr(pos);
  const std::size_t slash = rest.find('/');
  const std::string_view multiplier = rest.substr(0, slash);
  if (multiplier == "k" || multiplier == "K")
    value *= 1e3;
  else if (multiplier == "M")
    value *= 1e6;
  else if (multiplier == "G")
    value *= 1e9;
  else if (!multiplier.empty())
    return bad("unknown multiplier '" + std::string(multiplier) + "'");

  double per_s = 1;
  if (slash != std::string_view::npos) {
    const std::string_view unit = rest.substr(slash + 1);
    if (unit == "s" || unit == "sec" || unit == "second")
      per_s = 1;
    else if (unit == "min" || unit == "minute")
      per_s = 60;
    else if (unit == "h" || unit == "hr" || unit == "hour")
      per_s = 3600;
    else if (unit == "d" || unit == "day")
      per_s = 86'400;
    else if (unit.empty())
      return bad("no unit after '/'");
    else
      return bad("unknown unit '" + std::string(unit) + "'");
  }
  if (value == 0) return bad("zero");
  const double rate = value / per_s;
  if (!std::isfinite(rate)) return bad("too large");
  return rate;
}

Result<microseconds> ParseFineDuration(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return InvalidArgumentError("invalid duration '" + std::string(text) + "' (" +
                                std::string(why) +
                                "): expected a number and a unit, us, ms, s, m or h, "
                                "e.g. 200us, 0.5ms, 40ms, 30s, 5m");
  };
  // Integer arithmetic, as in ParseDuration: 0.1 s is exactly 100000 us.
  std::size_t i = 0;
  std::uint64_t whole = 0, frac = 0, frac_scale = 1;
  bool digits = false;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    digits = true;
    if (whole > 1'000'000'000ULL) return bad("too large");
    whole = whole * 10 + static_cast<std::uint64_t>(text[i] - '0');
  }
  if (i < text.size() && text[i] == '.') {
    for (++i; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
      digits = true;
      if (frac_scale >= 1'000'000'000ULL) return bad("too many decimals");
      frac = frac * 10 + static_cast<std::uint64_t>(text[i] - '0');
      frac_scale *= 10;
    }
  }
  if (!digits) {
    if (!text.empty() && text[0] == '-') return bad("negative");
    return bad("no number");
  }
  const std::string_view unit = text.substr(i);
  std::uint64_t unit_us;
  if (unit == "us" || unit == "\u00b5s")
    unit_us = 1;
  else if (unit == "ms")
    unit_us = 1'000;
  else if (unit == "s")
    unit_us = 1'000'000;
  else if (unit == "m" || unit == "min")
    unit_us = 60'000'000;
  else if (unit == "h")
    unit_us = 3'600'000'000ULL;
  else if (unit.empty())
    return bad("no unit");
  else
    return bad("unknown unit '" + std::string(unit) + "'");
  // Beyond this the microsecond count would not fit in a signed 64 bits.
  if (whole > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) / unit_us / 2) {
    return bad("too large");
  }
  const std::uint64_t frac_us_num = frac * unit_us;
  if (frac_us_num % frac_scale != 0) return bad("finer than a microsecond");
  return microseconds(static_cast<std::int64_t>(whole * unit_us + frac_us_num / frac_scale));
}

std::string_view VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kHolds:
      return "holds";
    case Verdict::kHoldsFailsBeforeDoubling:
      return "holds_now_fails_before_doubling";
    case Verdict::kFailsAtP99:
      return "fails_at_p99";
    case Verdict::kSaturated:
      return "saturated";
  }
  return "?";
}

std::string_view VerdictText(Verdict v) {
  switch (v) {
    case Verdict::kHolds:
      return "holds, with room for traffic to double";
    case Verdict::kHoldsFailsBeforeDoubling:
      return "holds now, fails before traffic doubles";
    case Verdict::kFailsAtP99:
      return "fails now at p99: not saturated, but past 80% utilisation waits queue long";
    case Verdict::kSaturated:
      return "fails now: saturated, the hot key wants more operations than one key allows, "
             "and its queue grows without bound";
  }
  return "?";
}

std::string_view RemedyName(Remedy r) {
  switch (r) {
    case Remedy::kShrinkCriticalSection:
      return "shrink_critical_section";
    case Remedy::kSplitKey:
      return "split_key";
    case Remedy::kAtomicOperation:
      return "atomic_operation";
    case Remedy::kCutCoordination:
      return "cut_coordination";
    case Remedy::kFenceAndTuneLease:
      return "fence_and_tune_lease";
  }
  return "?";
}

std::string_view RemedyText(Remedy r) {
  switch (r) {
    case Remedy::kShrinkCriticalSection:
      return "shrink the critical section: the hold sets the ceiling, and a faster lock service "
             "only removes the coordination share";
    case Remedy::kSplitKey:
      return "split the key (per account, per shard, a counter in N parts) so the hottest key "
             "carries a smaller share";
    case Remedy::kAtomicOperation:
      return "use an atomic operation the store already has (INCR, a conditional update on a "
             "version column) instead of a lock";
    case Remedy::kCutCoordination:
      return "cut coordination: Acquire and Release are a large share of the hold, so do more "
             "work per Acquire or use a store closer to the clients";
    case Remedy::kFenceAndTuneLease:
      return "use fencing tokens so the lease can be tuned for recovery: with a token an early "
             "expiry is a rejected write rather than corruption, so the lease need not outlast "
             "the longest pause";
  }
  return "?";
}

std::string_view MechanismName(Mechanism m) {
  switch (m) {
    case Mechanism::kExistingStoreLock:
      return "database_row";
    case Mechanism::kFencingOrDedup:
      return "fencing_token_or_deduplication_key";
  }
  return "?";
}

std::string_view MechanismText(Mechanism m) {
  switch (m) {
    case Mechanism::kExistingStoreLock:
      return "the cheapest lock you already run, e.g. a row in the database you already "
             "operate: a double run wastes work rather than producing a wrong answer, so the "
             "lock is an optimisation";
    case Mechanism::kFencingOrDedup:
      return "a fencing token checked by the resource, or a deduplication key downstream, not "
             "a better lock: a paused holder can still act after its lease expires";
  }
  return "?";
}

}  // namespace dlock::plan
