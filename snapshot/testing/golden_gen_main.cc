// snapshot_golden_gen <out-file>: writes the golden state file, the encoding
// of testing::SampleState(). Run once per format version; the result is
// committed under snapshot/testdata/ and must never change afterwards.
#include <cstdio>
#include <fstream>

#include "snapshot/testing/sample_state.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <out-file>\n", argv[0]);
    return 1;
  }
  auto bytes = kubicle::snapshot::EncodeState(kubicle::snapshot::testing::SampleState());
  if (!bytes.ok()) {
    std::fprintf(stderr, "encode: %s\n", bytes.status().ToString().c_str());
    return 1;
  }
  std::ofstream out(argv[1], std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes->data()), static_cast<std::streamsize>(bytes->size()));
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", argv[1]);
    return 1;
  }
  std::printf("wrote %zu bytes to %s\n", bytes->size(), argv[1]);
  return 0;
}
