#include "kube/time_format.h"

#include <cstdio>
#include <ctime>

namespace kubicle::kube {
namespace {

std::string Format(TimePoint t, bool micro) {
  auto secs = std::chrono::time_point_cast<std::chrono::seconds>(t);
  if (secs > t) secs -= std::chrono::seconds(1);
  std::time_t tt = std::chrono::system_clock::to_time_t(secs);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[64];
  size_t n = std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  std::string out(buf, n);
  if (micro) {
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(t - secs).count();
    std::snprintf(buf, sizeof(buf), ".%06lld", static_cast<long long>(us));
    out += buf;
  }
  return out + "Z";
}

}  // namespace

std::string FormatTime(TimePoint t) { return Format(t, false); }
std::string FormatMicroTime(TimePoint t) { return Format(t, true); }

Result<TimePoint> ParseTime(std::string_view s) {
  std::tm tm{};
  std::string str(s);
  const char* rest = strptime(str.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (rest == nullptr) return Status::InvalidArgument("bad timestamp: " + str);
  long long micros = 0;
  if (*rest == '.') {
    ++rest;
    int digits = 0;
    while (*rest >= '0' && *rest <= '9') {
      if (digits < 6) micros = micros * 10 + (*rest - '0');
      ++digits;
      ++rest;
    }
    for (; digits < 6; ++digits) micros *= 10;
  }
  long offset = 0;
  if (*rest == 'Z' || *rest == 'z') {
    ++rest;
  } else if (*rest == '+' || *rest == '-') {
    int hh = 0, mm = 0;
    if (std::sscanf(rest + 1, "%2d:%2d", &hh, &mm) != 2) {
      return Status::InvalidArgument("bad timestamp offset: " + str);
    }
    offset = (hh * 3600L + mm * 60L) * (*rest == '-' ? -1 : 1);
    rest += 6;
  } else {
    return Status::InvalidArgument("timestamp without zone: " + str);
  }
  if (*rest != '\0') return Status::InvalidArgument("trailing text in timestamp: " + str);
  std::time_t secs = timegm(&tm) - offset;
  return std::chrono::system_clock::from_time_t(secs) + std::chrono::microseconds(micros);
}

}  // namespace kubicle::kube
