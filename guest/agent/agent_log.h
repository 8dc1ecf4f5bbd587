// Minimal logging for kubicle-agent: one line per event on stderr,
// "kubicle-agent: <level> <event> key=value ...". The agent is a static
// binary that runs as PID 1's child (or PID 1) inside the guest, so it uses
// no logging library; the guest's console carries these lines to the host.
#pragma once

#include <string>
#include <string_view>

namespace kubicle::guest::agent {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void SetLogLevel(LogLevel level);
bool ParseLogLevel(std::string_view name, LogLevel* out);
// `fields` is already formatted ("key=value key2=value2"), may be empty.
void Log(LogLevel level, std::string_view event, const std::string& fields = {});

inline void LogInfo(std::string_view e, const std::string& f = {}) { Log(LogLevel::kInfo, e, f); }
inline void LogWarn(std::string_view e, const std::string& f = {}) { Log(LogLevel::kWarn, e, f); }
inline void LogDebug(std::string_view e, const std::string& f = {}) { Log(LogLevel::kDebug, e, f); }

}  // namespace kubicle::guest::agent
