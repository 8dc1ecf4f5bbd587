#include "snapshot/layer_file.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cstring>

#include "common/file_io.h"
#include "snapshot/crc32c.h"

namespace kubicle::snapshot {
namespace {

constexpr char kShortLayer[] = "disk layer file shorter than its header says";

constexpr char kLayerMagic[8] = {'K', 'B', 'L', 'L', 'A', 'Y', 'E', 'R'};
constexpr char kMapMagic[8] = {'K', 'B', 'L', 'M', 'A', 'P', 0, 0};
constexpr uint16_t kLayerMajor = 1;
constexpr uint16_t kLayerMinor = 0;
constexpr uint64_t kHeaderBytes = 4096;
constexpr size_t kHeaderCrcOffset = 88;
constexpr size_t kMapHeaderBytes = 32;
constexpr uint64_t kMaxClusters = uint64_t{1} << 26;

template <typename T>
void Put(std::vector<uint8_t>& b, size_t off, T v) {
  std::memcpy(b.data() + off, &v, sizeof(T));
}
template <typename T>
T Get(const std::vector<uint8_t>& b, size_t off) {
  T v;
  std::memcpy(&v, b.data() + off, sizeof(T));
  return v;
}

uint64_t RoundUp(uint64_t v, uint64_t align) { return (v + align - 1) / align * align; }

// Clusters of a disk of virtual_size bytes; false when the size is 0 or
// rounding it up to a cluster would wrap 64 bits.
bool ClusterCount(uint64_t virtual_size, uint32_t cluster_shift, uint64_t* count) {
  uint64_t rounded;
  if (virtual_size == 0 ||
      __builtin_add_overflow(virtual_size, (uint64_t{1} << cluster_shift) - 1, &rounded)) {
    return false;
  }
  *count = rounded >> cluster_shift;
  return true;
}

// Where the header puts the maps and the data must lie inside a file of
// file_size bytes, in this order, without any sum or product wrapping:
//   header | map A | map B | ... | data (virtual_size bytes)
bool GeometryFits(uint64_t map_offset, uint64_t map_slot_size, uint64_t data_offset,
                  uint64_t virtual_size, uint64_t bitmap_bytes, uint64_t file_size) {
  uint64_t maps_bytes, maps_end, data_end;
  return map_slot_size >= kMapHeaderBytes + bitmap_bytes && map_offset >= kHeaderBytes &&
         !__builtin_mul_overflow(map_slot_size, 2, &maps_bytes) &&
         !__builtin_add_overflow(map_offset, maps_bytes, &maps_end) && data_offset >= maps_end &&
         !__builtin_add_overflow(data_offset, virtual_size, &data_end) && data_end <= file_size;
}

Status PwriteAll(int fd, const void* p, size_t len, uint64_t off) {
  iovec iov{const_cast<void*>(p), len};
  return TransferAll(fd, off, {&iov, 1}, true, kShortLayer);
}
Status PreadAll(int fd, void* p, size_t len, uint64_t off) {
  iovec iov{p, len};
  return TransferAll(fd, off, {&iov, 1}, false, kShortLayer);
}

Status FsyncParentDir(const std::string& path) {
  size_t slash = path.find_last_of('/');
  std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return Status::FromErrno("open directory " + dir);
  if (::fsync(fd.get()) < 0) return Status::FromErrno("fsync directory " + dir);
  return Status::Ok();
}

}  // namespace

LayerId NewLayerId() {
  LayerId id{};
  size_t got = 0;
  while (got < id.size()) {
    ssize_t n = ::getrandom(id.data() + got, id.size() - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  return id;
}

Result<std::unique_ptr<LayerFile>> LayerFile::Create(const std::string& path, uint64_t virtual_size,
                                                     const LayerId& parent,
                                                     const CreateOptions& options) {
  if (options.cluster_shift < 12 || options.cluster_shift > 24) {
    return Status::InvalidArgument("layer cluster size must be 4 KiB .. 16 MiB");
  }
  std::unique_ptr<LayerFile> l(new LayerFile());
  l->path_ = path;
  l->writable_ = true;
  l->id_ = options.id.value_or(NewLayerId());
  l->parent_ = parent;
  l->virtual_size_ = virtual_size;
  l->cluster_shift_ = options.cluster_shift;
  if (!ClusterCount(virtual_size, options.cluster_shift, &l->cluster_count_) ||
      l->cluster_count_ > kMaxClusters) {
    return Status::InvalidArgument("disk of " + std::to_string(virtual_size) +
                                   " bytes cannot be layered (empty or too many clusters)");
  }
  l->map_offset_ = kHeaderBytes;
  l->map_slot_size_ = RoundUp(kMapHeaderBytes + (l->cluster_count_ + 7) / 8, 4096);
  l->data_offset_ = RoundUp(l->map_offset_ + 2 * l->map_slot_size_, l->cluster_size());
  l->bitmap_.assign((l->cluster_count_ + 63) / 64, 0);
  l->fd_.reset(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!l->fd_) return Status::FromErrno("create disk layer " + path);

  std::vector<uint8_t> h(kHeaderBytes, 0);
  std::memcpy(h.data(), kLayerMagic, 8);
  Put<uint16_t>(h, 8, kLayerMajor);
  Put<uint16_t>(h, 10, kLayerMinor);
  Put<uint32_t>(h, 12, static_cast<uint32_t>(kHeaderBytes));
  Put<uint32_t>(h, 16, options.cluster_shift);
  Put<uint32_t>(h, 20, 0);
  Put<uint64_t>(h, 24, virtual_size);
  std::memcpy(h.data() + 32, l->id_.data(), 16);
  std::memcpy(h.data() + 48, parent.data(), 16);
  Put<uint64_t>(h, 64, l->map_offset_);
  Put<uint64_t>(h, 72, l->map_slot_size_);
  Put<uint64_t>(h, 80, l->data_offset_);
  Put<uint32_t>(h, kHeaderCrcOffset, Crc32c({h.data(), kHeaderCrcOffset}));
  Status st = PwriteAll(l->fd_.get(), h.data(), h.size(), 0);
  if (st.ok()) st = l->WriteMapSlot(0, 1);  // slot B stays zero (invalid)
  if (st.ok() && ::ftruncate(l->fd_.get(), static_cast<off_t>(l->data_offset_ + virtual_size)) < 0) {
    st = Status::FromErrno("size disk layer " + path);
  }
  l->created_durable_ = false;
  if (st.ok() && options.durable) st = l->MakeCreationDurable();
  if (!st.ok()) {
    ::unlink(path.c_str());
    return st;
  }
  l->active_slot_ = 0;
  l->generation_ = 1;
  return l;
}

Result<std::unique_ptr<LayerFile>> LayerFile::Open(const std::string& path, bool writable) {
  std::unique_ptr<LayerFile> l(new LayerFile());
  l->path_ = path;
  l->writable_ = writable;
  l->fd_.reset(::open(path.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC));
  if (!l->fd_) return Status::FromErrno("open disk layer " + path);
  struct stat st{};
  if (::fstat(l->fd_.get(), &st) < 0) return Status::FromErrno("stat disk layer " + path);
  std::vector<uint8_t> h(kHeaderBytes, 0);
  if (static_cast<uint64_t>(st.st_size) < kHeaderBytes) {
    return Status::DataLoss("disk layer " + path + " is truncated (no header)");
  }
  RETURN_IF_ERROR(PreadAll(l->fd_.get(), h.data(), h.size(), 0));
  if (std::memcmp(h.data(), kLayerMagic, 8) != 0) {
    return Status::InvalidArgument(path + " is not a Kubicle disk layer (bad magic)");
  }
  if (Get<uint16_t>(h, 8) != kLayerMajor) {
    return Status::FailedPrecondition("disk layer " + path + " has format major version " +
                                      std::to_string(Get<uint16_t>(h, 8)) + ", this build reads 1");
  }
  if (Get<uint32_t>(h, kHeaderCrcOffset) != Crc32c({h.data(), kHeaderCrcOffset})) {
    return Status::DataLoss("disk layer " + path + " header checksum mismatch");
  }
  l->cluster_shift_ = Get<uint32_t>(h, 16);
  l->virtual_size_ = Get<uint64_t>(h, 24);
  std::memcpy(l->id_.data(), h.data() + 32, 16);
  std::memcpy(l->parent_.data(), h.data() + 48, 16);
  l->map_offset_ = Get<uint64_t>(h, 64);
  l->map_slot_size_ = Get<uint64_t>(h, 72);
  l->data_offset_ = Get<uint64_t>(h, 80);
  if (l->cluster_shift_ < 12 || l->cluster_shift_ > 24 ||
      !ClusterCount(l->virtual_size_, l->cluster_shift_, &l->cluster_count_)) {
    return Status::DataLoss("disk layer " + path + " header has impossible geometry");
  }
  if (l->cluster_count_ > kMaxClusters ||
      !GeometryFits(l->map_offset_, l->map_slot_size_, l->data_offset_, l->virtual_size_,
                    (l->cluster_count_ + 7) / 8, static_cast<uint64_t>(st.st_size))) {
    return Status::DataLoss("disk layer " + path + " is truncated or its header is inconsistent");
  }
  RETURN_IF_ERROR(l->LoadMap());
  return l;
}

Status LayerFile::LoadMap() {
  size_t bitmap_bytes = (cluster_count_ + 7) / 8;
  bitmap_.assign((cluster_count_ + 63) / 64, 0);
  int best = -1;
  uint64_t best_gen = 0;
  std::vector<uint8_t> slot(kMapHeaderBytes + bitmap_bytes);
  for (int s = 0; s < 2; ++s) {
    RETURN_IF_ERROR(PreadAll(fd_.get(), slot.data(), slot.size(), MapSlotOffset(s)));
    if (std::memcmp(slot.data(), kMapMagic, 8) != 0) continue;
    uint64_t gen = Get<uint64_t>(slot, 8);
    if (Get<uint64_t>(slot, 16) != cluster_count_) continue;
    uint32_t crc = Crc32c({slot.data(), 24});
    crc = Crc32c({slot.data() + kMapHeaderBytes, bitmap_bytes}, crc);
    if (crc != Get<uint32_t>(slot, 24) || gen <= best_gen) continue;
    best = s;
    best_gen = gen;
    std::memcpy(bitmap_.data(), slot.data() + kMapHeaderBytes, bitmap_bytes);
  }
  if (best < 0) return Status::DataLoss("disk layer " + path_ + " has no valid allocation map");
  active_slot_ = best;
  generation_ = best_gen;
  return Status::Ok();
}

Status LayerFile::WriteMapSlot(int slot, uint64_t generation) {
  size_t bitmap_bytes = (cluster_count_ + 7) / 8;
  std::vector<uint8_t> buf(RoundUp(kMapHeaderBytes + bitmap_bytes, 4096), 0);
  std::memcpy(buf.data(), kMapMagic, 8);
  Put<uint64_t>(buf, 8, generation);
  Put<uint64_t>(buf, 16, cluster_count_);
  // Little-endian words laid out in memory are the on-disk byte bitmap.
  std::memcpy(buf.data() + kMapHeaderBytes, bitmap_.data(), bitmap_bytes);
  uint32_t crc = Crc32c({buf.data(), 24});
  Put<uint32_t>(buf, 24, Crc32c({buf.data() + kMapHeaderBytes, bitmap_bytes}, crc));
  return PwriteAll(fd_.get(), buf.data(), buf.size(), MapSlotOffset(slot));
}

uint64_t LayerFile::allocated_count() const {
  uint64_t n = 0;
  for (uint64_t w : bitmap_) n += static_cast<uint64_t>(std::popcount(w));
  return n;
}

Status LayerFile::Read(uint64_t offset, std::span<const iovec> iov) const {
  return TransferAll(fd_.get(), data_offset_ + offset, iov, false, kShortLayer);
}

Status LayerFile::Write(uint64_t offset, std::span<const iovec> iov) {
  if (!writable_) return Status::PermissionDenied("disk layer " + path_ + " is frozen");
  data_dirty_ = true;
  return TransferAll(fd_.get(), data_offset_ + offset, iov, true, kShortLayer);
}

void LayerFile::MarkAllocated(uint64_t cluster) {
  bitmap_[cluster / 64] |= uint64_t{1} << (cluster % 64);
  map_dirty_ = true;
}

Status LayerFile::MakeCreationDurable() {
  if (created_durable_) return Status::Ok();
  if (::fsync(fd_.get()) < 0) return Status::FromErrno("fsync disk layer " + path_);
  RETURN_IF_ERROR(FsyncParentDir(path_));
  created_durable_ = true;
  return Status::Ok();
}

Status LayerFile::Sync() {
  if (!writable_ || (!data_dirty_ && !map_dirty_)) return Status::Ok();
  // Header and directory entry before any map that relies on them; data
  // before the map: the map must never name a cluster whose data is not
  // durable (the fsync of a new file covers its data too).
  if (!created_durable_) {
    RETURN_IF_ERROR(MakeCreationDurable());
  } else if (::fdatasync(fd_.get()) < 0) {
    return Status::FromErrno("fdatasync disk layer " + path_);
  }
  data_dirty_ = false;
  if (!map_dirty_) return Status::Ok();
  int next = active_slot_ ^ 1;
  RETURN_IF_ERROR(WriteMapSlot(next, generation_ + 1));
  if (::fdatasync(fd_.get()) < 0) return Status::FromErrno("fdatasync disk layer map " + path_);
  active_slot_ = next;
  ++generation_;
  map_dirty_ = false;
  return Status::Ok();
}

Status LayerFile::Seal() {
  if (!writable_) return Status::Ok();
  RETURN_IF_ERROR(Sync());
  RETURN_IF_ERROR(MakeCreationDurable());  // a never-written layer is shared too
  if (::fchmod(fd_.get(), 0444) < 0) return Status::FromErrno("chmod disk layer " + path_);
  UniqueFd ro(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
  if (!ro) return Status::FromErrno("reopen frozen disk layer " + path_);
  fd_ = std::move(ro);
  writable_ = false;
  return Status::Ok();
}

}  // namespace kubicle::snapshot
