#include "common/log.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <mutex>
#include <nlohmann/json.hpp>

namespace kubicle::log {
namespace {

std::mutex g_mu;
std::shared_ptr<spdlog::logger> g_logger;
std::atomic<bool> g_json{false};
std::atomic<int> g_level{static_cast<int>(Level::kInfo)};

spdlog::level::level_enum ToSpd(Level l) {
  switch (l) {
    case Level::kDebug: return spdlog::level::debug;
    case Level::kInfo: return spdlog::level::info;
    case Level::kWarn: return spdlog::level::warn;
    case Level::kError: return spdlog::level::err;
  }
  return spdlog::level::info;
}

std::string_view LevelName(Level l) {
  switch (l) {
    case Level::kDebug: return "debug";
    case Level::kInfo: return "info";
    case Level::kWarn: return "warn";
    case Level::kError: return "error";
  }
  return "info";
}

bool NeedsQuotes(std::string_view v) {
  if (v.empty()) return true;
  for (char c : v)
    if (c == ' ' || c == '"' || c == '=' || c == '\n' || c == '\t') return true;
  return false;
}

std::shared_ptr<spdlog::logger> Logger() {
  std::lock_guard lock(g_mu);
  if (!g_logger) {
    g_logger = std::make_shared<spdlog::logger>(
        "kubicle", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    g_logger->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %l %v", spdlog::pattern_time_type::utc);
    g_logger->set_level(spdlog::level::info);
  }
  return g_logger;
}

std::string g_component = "kubicle";

}  // namespace

void Init(std::string_view component, bool json, Level level) {
  auto logger = Logger();
  std::lock_guard lock(g_mu);
  g_component = std::string(component);
  g_json = json;
  g_level = static_cast<int>(level);
  if (json) {
    logger->set_pattern("%v");
  } else {
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %l " + g_component + " %v",
                        spdlog::pattern_time_type::utc);
  }
  logger->set_level(ToSpd(level));
}

Level ParseLevel(std::string_view name) {
  if (name == "debug") return Level::kDebug;
  if (name == "warn") return Level::kWarn;
  if (name == "error") return Level::kError;
  return Level::kInfo;
}

std::string FormatText(std::string_view event, std::initializer_list<Field> fields) {
  std::string out(event);
  for (const Field& f : fields) {
    out += ' ';
    out += f.key;
    out += '=';
    if (NeedsQuotes(f.value)) {
      out += nlohmann::json(f.value).dump();
    } else {
      out += f.value;
    }
  }
  return out;
}

std::string FormatJson(Level level, std::string_view event, std::initializer_list<Field> fields) {
  nlohmann::json j;
  j["level"] = LevelName(level);
  j["component"] = g_component;
  j["event"] = event;
  for (const Field& f : fields) j[std::string(f.key)] = f.value;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void Write(Level level, std::string_view event, std::initializer_list<Field> fields) {
  if (static_cast<int>(level) < g_level.load()) return;
  auto logger = Logger();
  std::string line = g_json ? FormatJson(level, event, fields) : FormatText(event, fields);
  logger->log(ToSpd(level), "{}", line);
}

}  // namespace kubicle::log
