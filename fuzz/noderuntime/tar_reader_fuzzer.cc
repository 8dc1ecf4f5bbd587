// Fuzzes an image layer's tar stream as BuildRootfs reads it
// (noderuntime/oci/tar_reader.cc, rootfs_tree.cc): TarReader over the
// input, handed out in short reads, and every entry applied to a RootfsTree
// with small limits (the OCI layer rules: whiteouts, opaque directories,
// hard links, replacements, refusals).
//
// Checked: nothing crashes, hangs or grows without bound; an entry's data is
// exactly its size (ReadData never returns more, and 0 only at its end);
// the reader's offset stays on 512-byte blocks between entries; a refused
// entry stops the layer, as BuildRootfs does.
#include <algorithm>
#include <cstring>
#include <string>

#include "fuzz/common/fuzz_input.h"
#include "noderuntime/oci/rootfs_tree.h"
#include "noderuntime/oci/tar_reader.h"

namespace {

namespace oci = kubicle::noderuntime::oci;

// The input as a stream of reads of 1..1024 bytes (sizes from the data
// itself, so short reads at every boundary are reached).
class Source : public oci::ByteSource {
 public:
  Source(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  kubicle::Result<size_t> Read(char* buf, size_t max) override {
    if (at_ >= size_) return size_t{0};
    const size_t step = 1 + (data_[at_] * 4 % 1024);
    const size_t n = std::min({max, step, size_ - at_});
    std::memcpy(buf, data_ + at_, n);
    at_ += n;
    return n;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Source src(data, size);
  oci::TarLimits limits;
  limits.max_path_bytes = 1024;
  limits.max_pax_bytes = 64 << 10;
  oci::TarReader reader(&src, limits);
  oci::RootfsTree tree(oci::TreeLimits{1 << 20, 4 << 20, 512});
  oci::TarEntry e;
  char buf[700];
  for (uint64_t ordinal = 0; ordinal < 4096; ++ordinal) {
    auto more = reader.Next(&e);
    if (!more.ok() || !*more) break;
    FUZZ_CHECK(reader.offset() % 512 == 0);
    uint64_t got = 0;
    for (;;) {
      auto n = reader.ReadData(buf, sizeof(buf));
      if (!n.ok()) break;
      FUZZ_CHECK(*n <= sizeof(buf));
      if (*n == 0) {
        FUZZ_CHECK(got == e.size);
        break;
      }
      got += *n;
      FUZZ_CHECK(got <= e.size);
    }
    // Layer 0 and 1 alternate every 8 entries, so whiteouts and opaque
    // markers act on lower entries too.
    if (!tree.Apply(static_cast<uint32_t>(ordinal / 8), ordinal, e).ok()) break;
  }
  (void)tree.Stats();
  for (uint32_t layer = 0; layer < 520 / 8; ++layer) (void)tree.FilesOfLayer(layer);
  return 0;
}
