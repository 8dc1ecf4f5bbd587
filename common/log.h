// Structured logging on spdlog: one line per event with key=value fields.
//
//   log::Info("vm started", {{"vm", id}, {"vcpus", 2}});
//   -> 2026-12-02T11:00:00.123Z info kubicle-vmm vm started vm=abc vcpus=2
// With Init(..., json=true) each line is a JSON object instead. Logs go to
// stderr so stdout stays free for a program's own output.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>

namespace kubicle::log {

enum class Level { kDebug, kInfo, kWarn, kError };

struct Field {
  Field(std::string_view k, std::string_view v) : key(k), value(v) {}
  Field(std::string_view k, const char* v) : key(k), value(v) {}
  Field(std::string_view k, const std::string& v) : key(k), value(v) {}
  template <typename N, typename = std::enable_if_t<std::is_arithmetic_v<N>>>
  Field(std::string_view k, N v) : key(k), value(std::to_string(v)) {}
  std::string_view key;
  std::string value;
};

// Sets the component name, format and minimum level. Safe to call again.
void Init(std::string_view component, bool json = false, Level level = Level::kInfo);
// Parses "debug", "info", "warn", "error"; unknown names give kInfo.
Level ParseLevel(std::string_view name);

void Write(Level level, std::string_view event, std::initializer_list<Field> fields);

inline void Debug(std::string_view e, std::initializer_list<Field> f = {}) { Write(Level::kDebug, e, f); }
inline void Info(std::string_view e, std::initializer_list<Field> f = {}) { Write(Level::kInfo, e, f); }
inline void Warn(std::string_view e, std::initializer_list<Field> f = {}) { Write(Level::kWarn, e, f); }
inline void Error(std::string_view e, std::initializer_list<Field> f = {}) { Write(Level::kError, e, f); }

// Formats fields as they appear in a text line (exposed for tests).
std::string FormatText(std::string_view event, std::initializer_list<Field> fields);
std::string FormatJson(Level level, std::string_view event, std::initializer_list<Field> fields);

}  // namespace kubicle::log
