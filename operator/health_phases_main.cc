// kubicle-health-phases: prints every case of health_phases.h as one JSON
// line ({kind, phase, object, kstatus, argocd}), the input of the Go
// checker's --expect mode (e2e/health, CTest health_phases).
#include <cstdio>

#include "operator/health_phases.h"

int main() {
  for (const kubicle::op::HealthCase& c : kubicle::op::HealthCases()) {
    std::printf("%s\n", kubicle::op::HealthCaseJson(c).dump().c_str());
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}
