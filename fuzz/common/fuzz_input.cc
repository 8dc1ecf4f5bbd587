#include "fuzz/common/fuzz_input.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>

namespace kubicle::fuzz {

void FuzzFail(const char* what, const char* file, int line) {
  std::fprintf(stderr, "fuzz invariant failed: %s at %s:%d\n", what, file, line);
  std::abort();
}

void QuietLogs() { spdlog::set_level(spdlog::level::off); }

}  // namespace kubicle::fuzz
