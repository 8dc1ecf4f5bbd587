// Small helpers for benchmarks: timing and percentiles over samples.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace kubicle::bench {

using Clock = std::chrono::steady_clock;

inline double MillisSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Nearest-rank percentile (p in [0, 100]) of samples; 0 for no samples.
inline double Percentile(std::vector<double> samples, double p) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  size_t rank = static_cast<size_t>(p / 100.0 * static_cast<double>(samples.size()) + 0.999999);
  rank = std::clamp<size_t>(rank, 1, samples.size());
  return samples[rank - 1];
}

// Prints "name: p50 X unit, p99 Y unit (n=N)".
inline void PrintPercentiles(const std::string& name, const std::vector<double>& samples,
                             const char* unit) {
  std::printf("%-44s p50 %9.3f %s   p99 %9.3f %s   (n=%zu)\n", name.c_str(),
              Percentile(samples, 50), unit, Percentile(samples, 99), unit, samples.size());
}

}  // namespace kubicle::bench
