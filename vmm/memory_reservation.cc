#include "vmm/memory_reservation.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/unique_fd.h"
#include "snapshot/memory_file.h"

namespace kubicle::vmm {
namespace {

std::vector<GuestMemory::Range> GuestRanges(
    const std::vector<snapshot::MemoryRange>& ranges) {
  std::vector<GuestMemory::Range> out;
  for (const snapshot::MemoryRange& r : ranges) out.push_back({r.guest_base, r.size});
  return out;
}

}  // namespace

Result<MemoryReservation> MemoryReservation::Create(
    const std::vector<snapshot::MemoryRange>& ranges) {
  if (ranges.empty()) return Status::InvalidArgument("no memory ranges to reserve");
  MemoryReservation r;
  for (const snapshot::MemoryRange& range : ranges) {
    void* p = ::mmap(nullptr, range.size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return Status::FromErrno("reserve guest memory");
    r.ranges_.push_back(range);
    r.hosts_.push_back(static_cast<uint8_t*>(p));
  }
  return r;
}

MemoryReservation::MemoryReservation(MemoryReservation&& o) noexcept
    : ranges_(std::move(o.ranges_)), hosts_(std::move(o.hosts_)) {
  o.ranges_.clear();
  o.hosts_.clear();
}

MemoryReservation& MemoryReservation::operator=(MemoryReservation&& o) noexcept {
  if (this != &o) {
    Release();
    ranges_ = std::move(o.ranges_);
    hosts_ = std::move(o.hosts_);
    o.ranges_.clear();
    o.hosts_.clear();
  }
  return *this;
}

MemoryReservation::~MemoryReservation() { Release(); }

void MemoryReservation::Release() {
  for (size_t i = 0; i < hosts_.size(); ++i) ::munmap(hosts_[i], ranges_[i].size);
  hosts_.clear();
  ranges_.clear();
}

Status MemoryReservation::RegisterWith(const kvm::VmFd& vm) const {
  for (size_t i = 0; i < ranges_.size(); ++i) {
    RETURN_IF_ERROR(vm.SetUserMemoryRegion(static_cast<uint32_t>(i), ranges_[i].guest_base,
                                           ranges_[i].size, hosts_[i]));
  }
  return Status::Ok();
}

Result<std::unique_ptr<GuestMemory>> MemoryReservation::MapFile(
    const std::string& path, const std::vector<snapshot::MemoryRange>& ranges) {
  if (hosts_.empty()) return Status::FailedPrecondition("memory reservation already consumed");
  if (ranges != ranges_) {
    return Status::InvalidArgument("snapshot memory ranges differ from the reserved ones");
  }
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return Status::FromErrno("open memory file " + path);
  struct stat st{};
  if (::fstat(fd.get(), &st) < 0) return Status::FromErrno("stat memory file " + path);
  uint64_t total = 0;
  for (const snapshot::MemoryRange& r : ranges) total += r.size;
  RETURN_IF_ERROR(snapshot::CheckMemoryFileSize(path, static_cast<uint64_t>(st.st_size), total));
  // MAP_FIXED replaces the reserved pages in place. On a failure part way,
  // the ranges already replaced get fresh anonymous memory back, so the
  // reservation stays whole and still owned here.
  uint64_t offset = 0;
  for (size_t i = 0; i < ranges_.size(); ++i) {
    void* p = ::mmap(hosts_[i], ranges_[i].size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_NORESERVE | MAP_FIXED, fd.get(), static_cast<off_t>(offset));
    if (p == MAP_FAILED) {
      Status failed = Status::FromErrno("map memory file over the reservation");
      for (size_t k = 0; k < i; ++k) {
        ::mmap(hosts_[k], ranges_[k].size, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
      }
      return failed;
    }
    offset += ranges_[i].size;
  }
  std::vector<MmapRegion> maps;
  for (size_t i = 0; i < hosts_.size(); ++i) maps.push_back(MmapRegion::Adopt(hosts_[i], ranges_[i].size));
  hosts_.clear();  // the GuestMemory owns the addresses now
  auto ranges_copy = GuestRanges(ranges_);
  ranges_.clear();
  return GuestMemory::FromMappings(ranges_copy, std::move(maps));
}

Result<std::unique_ptr<GuestMemory>> MemoryReservation::IntoAnonymous() {
  if (hosts_.empty()) return Status::FailedPrecondition("memory reservation already consumed");
  std::vector<MmapRegion> maps;
  for (size_t i = 0; i < hosts_.size(); ++i) maps.push_back(MmapRegion::Adopt(hosts_[i], ranges_[i].size));
  auto ranges = GuestRanges(ranges_);
  hosts_.clear();
  ranges_.clear();
  return GuestMemory::FromMappings(ranges, std::move(maps));
}

}  // namespace kubicle::vmm
