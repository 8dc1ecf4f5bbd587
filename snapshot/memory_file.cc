#include "snapshot/memory_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "common/file_io.h"
#include "common/unique_fd.h"
#include "snapshot/digest.h"

namespace kubicle::snapshot {
namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kPagesPerChunk = kDigestChunkBytes / kPage;
constexpr uint64_t kPagemapPresent = 1ull << 63;
constexpr uint64_t kPagemapSwapped = 1ull << 62;
alignas(64) const uint8_t kZeroPage[kPage] = {};

struct Vma {
  uintptr_t start, end;
  bool anonymous_private;
};

std::vector<Vma> ReadMaps() {
  std::vector<Vma> out;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    unsigned long start = 0, end = 0, inode = 0;
    char perms[8] = {};
    int path_at = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx %7s %*x %*x:%*x %lu %n", &start, &end, perms, &inode,
                    &path_at) < 4) {
      continue;
    }
    std::string path = path_at > 0 && static_cast<size_t>(path_at) <= line.size()
                           ? line.substr(static_cast<size_t>(path_at)) : "";
    bool anon = inode == 0 && perms[3] == 'p' && (path.empty() || path[0] == '[');
    out.push_back({start, end, anon});
  }
  return out;
}

// For one host range: which pages may hold data. Pages of anonymous private
// memory that were never faulted in nor swapped out are zero by definition.
class PageOracle {
 public:
  PageOracle(const uint8_t* host, uint64_t size, const std::vector<Vma>& vmas)
      : maybe_(size / kPage, true) {
    UniqueFd pagemap(::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC));
    if (!pagemap) return;  // no oracle: every page is read and checked
    auto base = reinterpret_cast<uintptr_t>(host);
    for (const Vma& v : vmas) {
      uintptr_t lo = std::max(v.start, base), hi = std::min<uintptr_t>(v.end, base + size);
      if (lo >= hi || !v.anonymous_private) continue;
      MarkFromPagemap(pagemap.get(), base, lo, hi);
    }
  }
  bool MaybeData(uint64_t page) const { return maybe_[page]; }

 private:
  void MarkFromPagemap(int fd, uintptr_t base, uintptr_t lo, uintptr_t hi) {
    std::vector<uint64_t> entries(8192);
    for (uintptr_t at = lo; at < hi;) {
      size_t n = std::min<size_t>(entries.size(), (hi - at) / kPage);
      ssize_t got = ::pread(fd, entries.data(), n * 8, static_cast<off_t>(at / kPage * 8));
      if (got <= 0) return;  // leave the rest as "maybe"
      size_t k = static_cast<size_t>(got) / 8;
      for (size_t i = 0; i < k; ++i) {
        bool data = entries[i] & (kPagemapPresent | kPagemapSwapped);
        maybe_[(at - base) / kPage + i] = data;
      }
      at += k * kPage;
    }
  }
  std::vector<bool> maybe_;
};

// Guest memory as one logical byte stream in file order.
struct Stream {
  struct Piece {
    const uint8_t* host;
    uint64_t file_offset, size;
    PageOracle oracle;
  };
  std::vector<Piece> pieces;

  // Host pointer and oracle verdict for the page at file offset `off`.
  std::pair<const uint8_t*, bool> Page(uint64_t off) const {
    for (const Piece& p : pieces) {
      if (off >= p.file_offset && off < p.file_offset + p.size) {
        uint64_t rel = off - p.file_offset;
        return {p.host + rel, p.oracle.MaybeData(rel / kPage)};
      }
    }
    return {nullptr, false};
  }
};

class MemoryWriter {
 public:
  MemoryWriter(const Stream& s, int fd, bool digest) : s_(s), fd_(fd), digest_(digest) {}

  Status WriteChunk(uint64_t at, uint64_t len) {
    const uint8_t* page[kPagesPerChunk];
    bool nonzero[kPagesPerChunk];
    bool any = false;
    uint64_t pages = len / kPage;
    for (uint64_t i = 0; i < pages; ++i) {
      auto [host, maybe] = s_.Page(at + i * kPage);
      page[i] = host;
      nonzero[i] = maybe && std::memcmp(host, kZeroPage, kPage) != 0;
      any |= nonzero[i];
    }
    if (digest_) HashChunk(page, nonzero, pages, any);
    if (!any) return Status::Ok();
    // Write runs of non-zero pages that are contiguous in host memory.
    for (uint64_t i = 0; i < pages;) {
      if (!nonzero[i]) {
        ++i;
        continue;
      }
      uint64_t j = i + 1;
      while (j < pages && nonzero[j] && page[j] == page[j - 1] + kPage) ++j;
      RETURN_IF_ERROR(WriteAllAt(fd_, at + i * kPage, page[i], (j - i) * kPage)
                          .WithContext("write memory file"));
      data_bytes_ += (j - i) * kPage;
      i = j;
    }
    return Status::Ok();
  }

  uint64_t data_bytes() const { return data_bytes_; }
  std::string digest() { return digest_ ? chunks_.FinalHex() : ""; }

 private:
  void HashChunk(const uint8_t* const* page, const bool* nonzero, uint64_t pages, bool any) {
    if (!any) {
      chunks_.AddZeroChunk(pages * kPage);
      return;
    }
    Sha256 leaf;
    for (uint64_t i = 0; i < pages; ++i) leaf.Update({nonzero[i] ? page[i] : kZeroPage, kPage});
    chunks_.AddLeaf(leaf.Final());
  }

  const Stream& s_;
  int fd_;
  bool digest_;
  uint64_t data_bytes_ = 0;
  ChunkedDigest chunks_;
};

}  // namespace

Result<MemoryFileInfo> WriteMemoryFile(std::span<const MemoryRegion> regions, int fd,
                                       const MemoryWriteOptions& options) {
  std::vector<Vma> vmas = ReadMaps();
  Stream stream;
  uint64_t total = 0;
  for (const MemoryRegion& r : regions) {
    if (r.size % kPage) return Status::InvalidArgument("guest region size is not page aligned");
    stream.pieces.push_back({r.host, total, r.size, PageOracle(r.host, r.size, vmas)});
    total += r.size;
  }
  if (::ftruncate(fd, static_cast<off_t>(total)) < 0) return Status::FromErrno("ftruncate memory file");
  MemoryWriter writer(stream, fd, options.digest);
  for (uint64_t at = 0; at < total; at += kDigestChunkBytes) {
    RETURN_IF_ERROR(writer.WriteChunk(at, std::min(kDigestChunkBytes, total - at)));
  }
  MemoryFileInfo info;
  info.size = total;
  info.data_bytes = writer.data_bytes();
  info.digest = writer.digest();
  return info;
}

Status CheckMemoryFileSize(const std::string& path, uint64_t size, uint64_t total) {
  if (size < total) {
    return Status::DataLoss("memory file " + path + " is " + std::to_string(size) +
                            " bytes, shorter than the guest's " + std::to_string(total) +
                            " bytes of memory (truncated snapshot)");
  }
  if (size > total) {
    return Status::DataLoss("memory file " + path + " is " + std::to_string(size) +
                            " bytes, longer than the guest's " + std::to_string(total) +
                            " bytes of memory (mismatched snapshot)");
  }
  return Status::Ok();
}

Result<std::vector<MmapRegion>> MapMemoryFile(const std::string& path,
                                              const std::vector<MemoryRange>& ranges) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return Status::FromErrno("open memory file " + path);
  struct stat st{};
  if (::fstat(fd.get(), &st) < 0) return Status::FromErrno("stat memory file " + path);
  uint64_t total = 0;
  for (const MemoryRange& r : ranges) total += r.size;
  RETURN_IF_ERROR(CheckMemoryFileSize(path, static_cast<uint64_t>(st.st_size), total));
  std::vector<MmapRegion> maps;
  uint64_t offset = 0;
  for (const MemoryRange& r : ranges) {
    ASSIGN_OR_RETURN(MmapRegion m, MmapRegion::MapFile(fd.get(), r.size, PROT_READ | PROT_WRITE,
                                                       MAP_PRIVATE | MAP_NORESERVE,
                                                       static_cast<off_t>(offset)));
    maps.push_back(std::move(m));
    offset += r.size;
  }
  return maps;
}

}  // namespace kubicle::snapshot
