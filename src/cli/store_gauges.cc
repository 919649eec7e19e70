#include "cli/store_gauges.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "core/prometheus_writer.h"
#include "dlock/waits.h"

namespace dlock::cli {
namespace {

using internal::PrometheusWriter;

double Seconds(Duration d) { return std::chrono::duration<double>(d).count(); }

// Holders and waiters per prefix, in one family each.
void WritePerPrefix(PrometheusWriter& w, const std::vector<HolderInfo>& holders,
                    const std::vector<WaiterInfo>* waiters) {
  std::map<std::string, double> held, waiting;
  for (const auto& h : holders) ++held[KeyPrefix(h.key)];
  w.Family("dlock_store_holders_by_prefix", "gauge", "Holders per key prefix (up to the first /).");
  for (const auto& [prefix, n] : held) {
    w.Sample("dlock_store_holders_by_prefix", {{"prefix", prefix}}, PrometheusWriter::Number(n));
  }
  if (waiters == nullptr) return;
  for (const auto& x : *waiters) ++waiting[KeyPrefix(x.key)];
  w.Family("dlock_store_waiters_by_prefix", "gauge", "Waiters per key prefix (up to the first /).");
  for (const auto& [prefix, n] : waiting) {
    w.Sample("dlock_store_waiters_by_prefix", {{"prefix", prefix}}, PrometheusWriter::Number(n));
  }
}

void WriteHolderGauges(PrometheusWriter& w, const std::vector<HolderInfo>& holders) {
  std::vector<std::string> keys;
  std::chrono::milliseconds oldest{0};
  double stopped = 0;
  for (const auto& h : holders) {
    keys.push_back(h.key);
    if (h.held_for) oldest = std::max(oldest, *h.held_for);
    if (!RenewalsArriving(h)) ++stopped;
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  w.Gauge("dlock_store_keys_held", "Keys with at least one holder.", {},
          static_cast<double>(keys.size()));
  w.Gauge("dlock_store_holders", "Holders (a shared key has one per holder).", {},
          static_cast<double>(holders.size()));
  w.Gauge("dlock_store_oldest_hold_seconds",
          "The longest any current holder has held its key (stores that keep grant times).",
          {}, Seconds(oldest));
  w.Gauge("dlock_store_renewals_stopped",
          "Holders whose renewals stopped arriving: they lose the key when the lease expires.",
          {}, stopped);
}

// The numbers of /proc/self/stat after the command's name (field 0 is the
// state), read once per scrape.
std::vector<std::string> StatFields() {
  std::ifstream in("/proc/self/stat");
  std::string all((std::istreambuf_iterator<char>(in)), {});
  const auto close = all.rfind(')');
  std::istringstream words(close == std::string::npos ? "" : all.substr(close + 2));
  std::vector<std::string> fields;
  for (std::string v; words >> v;) fields.push_back(v);
  return fields;
}

double Field(const std::vector<std::string>& fields, std::size_t index) {
  return index < fields.size() ? std::strtod(fields[index].c_str(), nullptr) : 0;
}

double BootTime() {
  std::ifstream in("/proc/stat");
  for (std::string word; in >> word;) {
    if (word == "btime") {
      double t = 0;
      in >> t;
      return t;
    }
  }
  return 0;
}

double OpenFds() {
  double n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d) != nullptr) ++n;
    ::closedir(d);
    n -= 3;  // ".", ".." and the directory's own descriptor
  }
  return n;
}

}  // namespace

std::string KeyPrefix(const std::string& key) {
  const auto slash = key.find('/');
  return slash == std::string::npos ? "-" : key.substr(0, slash + 1);
}

std::string StoreGaugesText(const StoreLook& look) {
  auto w = PrometheusWriter::Make({});
  const bool up = look.holders.ok() &&
                  (look.waiters.ok() ||
                   look.waiters.status().code() == StatusCode::kFailedPrecondition);
  w->Gauge("dlock_store_up", "1 if the last look at the store succeeded.", {}, up ? 1 : 0);
  w->Gauge("dlock_store_look_seconds", "How long the last look at the store took.", {},
           Seconds(look.took));
  if (!up) return w->Take();
  WriteHolderGauges(*w, *look.holders);
  const std::vector<WaiterInfo>* waiters = look.waiters.ok() ? &*look.waiters : nullptr;
  if (waiters != nullptr) {
    w->Gauge("dlock_store_waiters", "Waiters queued for a key.", {},
             static_cast<double>(waiters->size()));
    w->Gauge("dlock_store_deadlock_cycles", "Wait-for cycles: parties that wait for each other.",
             {}, static_cast<double>(AnalyzeWaits(*look.holders, *waiters).cycles.size()));
  }
  WritePerPrefix(*w, *look.holders, waiters);
  return w->Take();
}

std::string ProcessText() {
  auto w = PrometheusWriter::Make({});
  const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  // Counting from 0 at the state: utime 11, stime 12, starttime 19, rss 21.
  const std::vector<std::string> stat = StatFields();
  w->Family("process_cpu_seconds_total", "counter", "User and system CPU time spent, in seconds.");
  w->Sample("process_cpu_seconds_total", {},
            PrometheusWriter::Number((Field(stat, 11) + Field(stat, 12)) / tick));
  w->Gauge("process_resident_memory_bytes", "Resident memory size in bytes.", {},
           Field(stat, 21) * page);
  w->Gauge("process_open_fds", "Open file descriptors.", {}, OpenFds());
  w->Gauge("process_start_time_seconds", "Start time of the process since the Unix epoch.", {},
           BootTime() + Field(stat, 19) / tick);
  return w->Take();
}

}  // namespace dlock::cli
