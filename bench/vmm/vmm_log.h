// Reading kubicle-vmm's own log lines (key=value fields) in benchmarks.
#pragma once

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace kubicle::bench {

// Values of `key=N` (microseconds) on every log line containing `marker`,
// in ms.
inline std::vector<double> LogField(const std::string& log, const std::string& marker,
                                    const std::string& key) {
  std::vector<double> out;
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find(marker) == std::string::npos) continue;
    auto at = line.find(" " + key + "=");
    if (at != std::string::npos) out.push_back(std::atof(line.c_str() + at + key.size() + 2) / 1000.0);
  }
  return out;
}

}  // namespace kubicle::bench
