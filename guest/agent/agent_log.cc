#include "guest/agent/agent_log.h"

#include <unistd.h>

namespace kubicle::guest::agent {
namespace {
LogLevel g_level = LogLevel::kInfo;
constexpr const char* kNames[] = {"debug", "info", "warn", "error"};
}  // namespace

void SetLogLevel(LogLevel level) { g_level = level; }

bool ParseLogLevel(std::string_view name, LogLevel* out) {
  for (int i = 0; i < 4; ++i) {
    if (name == kNames[i]) {
      *out = LogLevel(i);
      return true;
    }
  }
  return false;
}

void Log(LogLevel level, std::string_view event, const std::string& fields) {
  if (level < g_level) return;
  std::string line = "kubicle-agent: ";
  line += kNames[int(level)];
  line += ' ';
  line += event;
  if (!fields.empty()) {
    line += ' ';
    line += fields;
  }
  line += '\n';
  // One write per line so lines from the agent are never interleaved.
  ssize_t unused = ::write(STDERR_FILENO, line.data(), line.size());
  (void)unused;
}

}  // namespace kubicle::guest::agent
