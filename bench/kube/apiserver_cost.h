// What the apiserver spent during one phase of a benchmark, read from its
// own /metrics before and after: process CPU seconds
// (process_cpu_seconds_total) and write requests (apiserver_request_total
// with verb POST, PUT, PATCH, DELETE or APPLY), by resource and
// subresource ("sandboxes", "sandboxes/status", "secrets", "events",
// "leases", ...). So a change to the Kubernetes path shows which writes it
// removed and what that saved, beside each latency figure.
//
// The text is the apiserver's (or kubectl's) and is parsed defensively:
// over kMaxMetricsBytes is refused before parsing; lines that are not
// well-formed samples are skipped; counts must be finite and >= 0.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "common/status.h"

namespace kubicle::bench {

inline constexpr size_t kMaxMetricsBytes = 64u << 20;

struct ApiserverSample {
  double cpu_seconds = 0;
  std::map<std::string, double> writes;  // "resource[/subresource]" -> requests
};

// InvalidArgument when the text is too large or has no
// process_cpu_seconds_total (not an apiserver's /metrics).
Result<ApiserverSample> ParseApiserverMetrics(std::string_view text);

// after - before, per resource (resources with no new writes left out).
ApiserverSample Diff(const ApiserverSample& before, const ApiserverSample& after);

double TotalWrites(const ApiserverSample& s);

// "apiserver CPU 1.23 s; writes per Sandbox 6.95 (sandboxes 1.00,
// sandboxes/status 3.00, secrets 1.00, ...)", resources by count, largest
// first. `sandboxes` > 0.
std::string FormatCost(const ApiserverSample& cost, int sandboxes);

}  // namespace kubicle::bench
