#include "core/prometheus_writer.h"

#include <charconv>

namespace dlock::internal {
namespace {

bool IsLabelName(std::string_view name) {
  if (name.empty() || name.starts_with("__")) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!letter && (i == 0 || c < '0' || c > '9')) return false;
  }
  return true;
}

std::string Escaped(std::string_view value) {
  std::string out;
  for (const char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Joined(const MetricLabels& labels) {
  std::string joined;
  for (const auto& [name, value] : labels) {
    if (!joined.empty()) joined += ",";
    joined += name + "=\"" + Escaped(value) + "\"";
  }
  return joined;
}

}  // namespace

Result<PrometheusWriter> PrometheusWriter::Make(const MetricLabels& labels) {
  for (const auto& label : labels) {
    if (!IsLabelName(label.first)) {
      return InvalidArgumentError("metric label name '" + Escaped(label.first) +
                                  "' is not valid: letters, digits and _, not first a digit, "
                                  "not starting with __");
    }
  }
  return PrometheusWriter(Joined(labels));
}

std::string PrometheusWriter::Number(double v) {
  char buf[32];
  // General: fixed notation down to 0.0001 (the bucket bounds), shortest
  // digits that read back exactly.
  const auto end = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general).ptr;
  return std::string(buf, end);
}

void PrometheusWriter::Family(std::string_view name, std::string_view type,
                              std::string_view help) {
  out_ += "# HELP " + std::string(name) + " " + std::string(help) + "\n";
  out_ += "# TYPE " + std::string(name) + " " + std::string(type) + "\n";
}

void PrometheusWriter::Sample(std::string_view name, const MetricLabels& own,
                              const std::string& value) {
  std::string all = labels_;
  const std::string mine = Joined(own);
  if (!all.empty() && !mine.empty()) all += ",";
  all += mine;
  out_ += std::string(name);
  if (!all.empty()) out_ += "{" + all + "}";
  out_ += " " + value + "\n";
}

void PrometheusWriter::Counter(std::string_view name, std::string_view help,
                               std::uint64_t value) {
  Family(name, "counter", help);
  Sample(name, {}, std::to_string(value));
}

void PrometheusWriter::Gauge(std::string_view name, std::string_view help,
                             const MetricLabels& own, double value) {
  Family(name, "gauge", help);
  Sample(name, own, Number(value));
}

void PrometheusWriter::Histogram(std::string_view name, std::string_view help,
                                 const dlock::Histogram& h) {
  Family(name, "histogram", help);
  const std::string bucket = std::string(name) + "_bucket";
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < kMetricBuckets.size(); ++i) {
    cumulative += h.counts[i];
    Sample(bucket, {{"le", Number(kMetricBuckets[i])}}, std::to_string(cumulative));
  }
  Sample(bucket, {{"le", "+Inf"}}, std::to_string(h.count));
  Sample(std::string(name) + "_sum", {}, Number(h.sum_seconds));
  Sample(std::string(name) + "_count", {}, std::to_string(h.count));
}

}  // namespace dlock::internal
