#include "bench/kube/apiserver_cost.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <cstdio>
#include <set>
#include <vector>

namespace kubicle::bench {

namespace {

const std::set<std::string, std::less<>> kWriteVerbs = {"POST", "PUT", "PATCH", "DELETE", "APPLY"};

// The value of label `name` in a `{a="x",b="y"}` block; "" when absent.
// Prometheus escapes \" and \\ inside values; the labels read here never
// hold them, so an escaped value is simply not matched.
std::string_view LabelValue(std::string_view labels, std::string_view name) {
  size_t pos = 0;
  while (pos < labels.size()) {
    const size_t eq = labels.find("=\"", pos);
    if (eq == std::string_view::npos) return {};
    const size_t end = labels.find('"', eq + 2);
    if (end == std::string_view::npos) return {};
    std::string_view key = labels.substr(pos, eq - pos);
    while (!key.empty() && (key.front() == ',' || key.front() == ' ' || key.front() == '{')) key.remove_prefix(1);
    if (key == name) return labels.substr(eq + 2, end - eq - 2);
    pos = end + 1;
  }
  return {};
}

// The sample value after the closing brace (or the name); nullopt unless a
// finite number >= 0.
std::optional<double> SampleValue(std::string_view rest) {
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  const std::string s(rest.substr(0, rest.find(' ')));  // a timestamp may follow
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(v) || v < 0) return std::nullopt;
  return v;
}

}  // namespace

Result<ApiserverSample> ParseApiserverMetrics(std::string_view text) {
  if (text.size() > kMaxMetricsBytes)
    return Status::InvalidArgument("metrics text of " + std::to_string(text.size()) + " bytes is over the limit");
  ApiserverSample out;
  bool have_cpu = false;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) nl = text.size();
    const std::string_view line = text.substr(start, nl - start);
    start = nl + 1;
    if (line.starts_with("process_cpu_seconds_total ")) {
      if (auto v = SampleValue(line.substr(sizeof("process_cpu_seconds_total") - 1))) {
        out.cpu_seconds = *v;
        have_cpu = true;
      }
      continue;
    }
    constexpr std::string_view kReq = "apiserver_request_total{";
    if (!line.starts_with(kReq)) continue;
    const size_t close = line.find('}');
    if (close == std::string_view::npos) continue;
    const std::string_view labels = line.substr(kReq.size() - 1, close - kReq.size() + 2);
    if (!kWriteVerbs.contains(LabelValue(labels, "verb"))) continue;
    auto v = SampleValue(line.substr(close + 1));
    if (!v) continue;
    std::string key(LabelValue(labels, "resource"));
    if (key.empty()) continue;
    if (std::string_view sub = LabelValue(labels, "subresource"); !sub.empty()) key += "/" + std::string(sub);
    out.writes[key] += *v;  // one series per code, scope, ... summed
  }
  if (!have_cpu) return Status::InvalidArgument("no process_cpu_seconds_total: not an apiserver's /metrics");
  return out;
}

ApiserverSample Diff(const ApiserverSample& before, const ApiserverSample& after) {
  ApiserverSample d;
  d.cpu_seconds = after.cpu_seconds - before.cpu_seconds;
  for (const auto& [k, v] : after.writes) {
    auto it = before.writes.find(k);
    const double n = v - (it == before.writes.end() ? 0 : it->second);
    if (n > 0) d.writes[k] = n;
  }
  return d;
}

double TotalWrites(const ApiserverSample& s) {
  double n = 0;
  for (const auto& [k, v] : s.writes) n += v;
  return n;
}

std::string FormatCost(const ApiserverSample& cost, int sandboxes) {
  std::vector<std::pair<std::string, double>> by(cost.writes.begin(), cost.writes.end());
  std::stable_sort(by.begin(), by.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  char buf[128];
  std::snprintf(buf, sizeof(buf), "apiserver CPU %.2f s; writes per Sandbox %.2f", cost.cpu_seconds,
                TotalWrites(cost) / sandboxes);
  std::string out = buf;
  for (size_t i = 0; i < by.size(); ++i) {
    std::snprintf(buf, sizeof(buf), "%s%s %.2f", i == 0 ? " (" : ", ", by[i].first.c_str(), by[i].second / sandboxes);
    out += buf;
  }
  if (!by.empty()) out += ")";
  return out;
}

}  // namespace kubicle::bench
