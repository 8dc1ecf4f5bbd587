// RFC 3339 timestamps as Kubernetes writes them ("2026-01-01T00:00:00Z";
// metav1.MicroTime adds ".000000"). Parsing accepts fractions and "Z" or
// numeric offsets; anything else is an InvalidArgument.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "kube/clock.h"

namespace kubicle::kube {

std::string FormatTime(TimePoint t);       // seconds precision
std::string FormatMicroTime(TimePoint t);  // microseconds, for Leases/Events
Result<TimePoint> ParseTime(std::string_view s);

}  // namespace kubicle::kube
