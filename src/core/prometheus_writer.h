// PrometheusWriter: the text exposition format (version 0.0.4), written once
// for the client's metrics, the fences' tally and `dlock exec
// --metrics-file`.
#ifndef DLOCK_SRC_CORE_PROMETHEUS_WRITER_H_
#define DLOCK_SRC_CORE_PROMETHEUS_WRITER_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "dlock/metrics.h"
#include "dlock/status.h"

namespace dlock::internal {

class PrometheusWriter {
 public:
  // `labels` go on every sample, before the sample's own. kInvalidArgument
  // for a name that is not a Prometheus label name.
  static Result<PrometheusWriter> Make(const MetricLabels& labels);

  // A family's HELP and TYPE lines: once, before its samples.
  void Family(std::string_view name, std::string_view type, std::string_view help);
  void Sample(std::string_view name, const MetricLabels& own, const std::string& value);
  void Counter(std::string_view name, std::string_view help, std::uint64_t value);
  void Gauge(std::string_view name, std::string_view help, const MetricLabels& own,
             double value);
  void Histogram(std::string_view name, std::string_view help, const dlock::Histogram& h);

  std::string Take() { return std::move(out_); }

  // The shortest text that reads back as `v`.
  static std::string Number(double v);

 private:
  explicit PrometheusWriter(std::string labels) : labels_(std::move(labels)) {}
  std::string labels_;  // formatted: a="x",b="y"
  std::string out_;
};

}  // namespace dlock::internal

#endif  // DLOCK_SRC_CORE_PROMETHEUS_WRITER_H_
