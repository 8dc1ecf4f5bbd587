// Fuzzes LayerFile::Open (snapshot/layer_file.cc): the disk layer header's
// geometry checks and the A/B allocation map slots. The input is written to
// a file and opened read-only, as LayeredDisk opens a frozen layer; the
// header CRC and both map slot CRCs are repaired first (when the header puts
// the slots inside the file), so mutations reach the geometry checks.
//
// Input: u8 flags (bit 0: keep the header CRC as given, bit 1: keep the map
// CRCs, bit 2: extend the file, sparse, to the size its header declares),
// then the file.
//
// Checked: nothing crashes; a layer that opens has a geometry that fits the
// file (map slots and data inside it, no arithmetic that wrapped) and its
// allocated clusters can be read back.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz/common/fuzz_input.h"
#include "snapshot/crc32c.h"
#include "snapshot/layer_file.h"

namespace kubicle::fuzz {
namespace {

namespace s = snapshot;

constexpr size_t kHeaderBytes = 4096;
constexpr size_t kHeaderCrcOffset = 88;
constexpr size_t kMapHeaderBytes = 32;

const std::string& Path() {
  static const std::string path = [] {
    const char* base = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    std::string tmpl = std::string(base) + "/kubicle-layer-fuzz-XXXXXX";
    int fd = ::mkstemp(tmpl.data());
    FUZZ_CHECK(fd >= 0);
    ::close(fd);
    std::atexit([] { ::unlink(Path().c_str()); });
    return tmpl;
  }();
  return path;
}

template <typename T>
T Get(const std::vector<uint8_t>& b, size_t off) {
  T v;
  std::memcpy(&v, b.data() + off, sizeof(T));
  return v;
}

void RepairMapSlots(std::vector<uint8_t>& b) {
  const uint32_t shift = Get<uint32_t>(b, 16);
  const uint64_t vsize = Get<uint64_t>(b, 24);
  const uint64_t map_offset = Get<uint64_t>(b, 64);
  const uint64_t slot_size = Get<uint64_t>(b, 72);
  if (shift < 12 || shift > 24 || vsize == 0 || vsize > (uint64_t{1} << 48)) return;
  const uint64_t clusters = (vsize + (uint64_t{1} << shift) - 1) >> shift;
  const uint64_t bitmap = (clusters + 7) / 8;
  for (uint64_t slot = 0; slot < 2; ++slot) {
    if (slot_size > b.size() || map_offset > b.size()) return;
    const uint64_t at = map_offset + slot * slot_size;
    if (at > b.size() || kMapHeaderBytes + bitmap > b.size() - at) return;
    std::memcpy(b.data() + at + 16, &clusters, 8);
    uint32_t crc = s::Crc32c({b.data() + at, 24});
    crc = s::Crc32c({b.data() + at + kMapHeaderBytes, bitmap}, crc);
    std::memcpy(b.data() + at + 24, &crc, 4);
  }
}

void CheckOpened(const s::LayerFile& l, uint64_t file_size) {
  FUZZ_CHECK(l.cluster_shift() >= 12 && l.cluster_shift() <= 24);
  FUZZ_CHECK(l.virtual_size() > 0 && l.virtual_size() <= file_size);
  FUZZ_CHECK(l.cluster_count() * l.cluster_size() >= l.virtual_size());
  FUZZ_CHECK(l.bitmap().size() * 64 >= l.cluster_count());
  std::vector<uint8_t> buf(l.cluster_size());
  int reads = 0;
  for (uint64_t c = 0; c < l.cluster_count() && reads < 4; ++c) {
    if (!l.allocated(c)) continue;
    ++reads;
    const uint64_t len = std::min<uint64_t>(l.cluster_size(), l.virtual_size() - c * l.cluster_size());
    iovec iov{buf.data(), len};
    FUZZ_CHECK(l.Read(c * l.cluster_size(), {&iov, 1}).ok());
  }
}

}  // namespace
}  // namespace kubicle::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kubicle::fuzz;
  FuzzInput in(data, size);
  const uint8_t flags = in.U8();
  auto rest = in.Rest();
  std::vector<uint8_t> file(rest.begin(), rest.end());
  if (file.size() >= kHeaderBytes) {
    if (!(flags & 1)) {
      const uint32_t crc = s::Crc32c({file.data(), kHeaderCrcOffset});
      std::memcpy(file.data() + kHeaderCrcOffset, &crc, 4);
    }
    if (!(flags & 2)) RepairMapSlots(file);
  }
  {
    int fd = ::open(Path().c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    FUZZ_CHECK(fd >= 0);
    FUZZ_CHECK(::write(fd, file.data(), file.size()) == static_cast<ssize_t>(file.size()));
    // With bit 2, a sparse tail up to what the header declares (at most
    // 1 GiB), as a real layer has before its clusters are written.
    if ((flags & 4) && file.size() >= kHeaderBytes) {
      uint64_t end = 0;
      if (!__builtin_add_overflow(Get<uint64_t>(file, 80), Get<uint64_t>(file, 24), &end) &&
          end <= (uint64_t{1} << 30) && end > file.size())
        FUZZ_CHECK(::ftruncate(fd, static_cast<off_t>(end)) == 0);
    }
    ::close(fd);
  }
  struct stat st{};
  FUZZ_CHECK(::stat(Path().c_str(), &st) == 0);
  auto layer = s::LayerFile::Open(Path(), /*writable=*/false);
  if (layer.ok()) CheckOpened(**layer, static_cast<uint64_t>(st.st_size));
  return 0;
}
