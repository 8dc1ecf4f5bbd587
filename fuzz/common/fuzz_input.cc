#include "fuzz/common/fuzz_input.h"

#include <cstdio>
#include <cstdlib>

#include "common/log.h"

namespace kubicle::fuzz {

void FuzzFail(const char* what, const char* file, int line) {
  std::fprintf(stderr, "fuzz invariant failed: %s at %s:%d\n", what, file, line);
  std::abort();
}

// A minimum level above kError: kubicle::log writes nothing (Write drops
// every level below the minimum). Hostile inputs are rejected with a log
// line each, which would otherwise cost most of the fuzzing time.
void QuietLogs() {
  log::Init("fuzz", false, static_cast<log::Level>(static_cast<int>(log::Level::kError) + 1));
}

}  // namespace kubicle::fuzz
