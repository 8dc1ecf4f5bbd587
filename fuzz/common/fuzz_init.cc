// libFuzzer's start-up hook, shared by every fuzzer (linked as an object, so
// it is always present): hostile inputs are refused with a log line each,
// which would otherwise cost most of the fuzzing time.
#include "fuzz/common/fuzz_input.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kubicle::fuzz::QuietLogs();
  return 0;
}
