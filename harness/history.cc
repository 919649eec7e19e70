#include "harness/history.h"

#include <nlohmann/json.hpp>

namespace dlock::harness {

std::string_view EventTypeName(EventType type) {
  switch (type) {
    case EventType::kInvoke: return "invoke";
    case EventType::kOk: return "ok";
    case EventType::kFail: return "fail";
    case EventType::kUnknown: return "unknown";
    case EventType::kInfo: return "info";
  }
  return "info";
}

std::string ToJsonLine(const Event& e) {
  nlohmann::json j = {{"t_ns", e.t_ns},       {"worker", e.worker}, {"inc", e.incarnation},
                      {"op", e.op},           {"type", EventTypeName(e.type)}};
  if (e.wall_ns) j["wall_ns"] = e.wall_ns;
  if (e.token) j["token"] = e.token;
  if (e.value != -1) j["value"] = e.value;
  if (e.duration_ns) j["duration_ns"] = e.duration_ns;
  if (!e.error.empty()) j["error"] = e.error;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Result<Event> ParseJsonLine(std::string_view line) {
  auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("t_ns") || !j.contains("op")) {
    return InvalidArgumentError("not a history event: " + std::string(line.substr(0, 120)));
  }
  Event e;
  e.t_ns = j.value("t_ns", std::int64_t{0});
  e.wall_ns = j.value("wall_ns", std::int64_t{0});
  e.worker = j.value("worker", -1);
  e.incarnation = j.value("inc", 0);
  e.op = j.value("op", std::string());
  const std::string type = j.value("type", std::string("info"));
  e.type = type == "invoke"  ? EventType::kInvoke
           : type == "ok"    ? EventType::kOk
           : type == "fail"  ? EventType::kFail
           : type == "unknown" ? EventType::kUnknown
                               : EventType::kInfo;
  e.token = j.value("token", FencingToken{0});
  e.value = j.value("value", std::int64_t{-1});
  e.duration_ns = j.value("duration_ns", std::int64_t{0});
  e.error = j.value("error", std::string());
  return e;
}

}  // namespace dlock::harness
