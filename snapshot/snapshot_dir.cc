#include "snapshot/snapshot_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <ctime>
#include <vector>

#include "common/file_io.h"
#include "common/hex.h"
#include "common/unique_fd.h"
#include "snapshot/digest.h"
#include "snapshot/memory_file.h"

namespace kubicle::snapshot {
namespace {

constexpr uint64_t kMaxMetaBytes = 1 << 20;
constexpr uint64_t kMaxDiskIndexBytes = 4 << 20;

std::string Parent(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string Base(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string NowRfc3339() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  tm utc{};
  ::gmtime_r(&ts.tv_sec, &utc);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buf;
}

Result<UniqueFd> CreateFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd) return Status::FromErrno("create " + path);
  return fd;
}

// fsync, then read-only: a snapshot file is never written again.
Status Seal(int fd, const std::string& path) {
  if (::fsync(fd) < 0) return Status::FromErrno("fsync " + path);
  if (::fchmod(fd, 0444) < 0) return Status::FromErrno("chmod " + path);
  return Status::Ok();
}

Result<FileDigest> WriteSmallFile(const std::string& path, const void* data, size_t len) {
  ASSIGN_OR_RETURN(UniqueFd fd, CreateFile(path));
  RETURN_IF_ERROR(WriteAllAt(fd.get(), 0, data, len).WithContext("write " + path));
  RETURN_IF_ERROR(Seal(fd.get(), path));
  return FileDigest{len, HexEncode(Sha256Of({static_cast<const uint8_t*>(data), len}))};
}

Status FsyncDir(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return Status::FromErrno("open directory " + dir);
  if (::fsync(fd.get()) < 0) return Status::FromErrno("fsync directory " + dir);
  return Status::Ok();
}

// Removes a directory of plain files (our temporary snapshot directory).
void RemoveTree(const std::string& dir) {
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) {
        ::unlink((dir + "/" + e->d_name).c_str());
      }
    }
    ::closedir(d);
  }
  ::rmdir(dir.c_str());
}

Status CheckMemoryMatches(const MachineState& state, std::span<const MemoryRegion> regions) {
  bool same = regions.size() == state.config.memory.size();
  for (size_t i = 0; same && i < regions.size(); ++i) {
    same = regions[i].guest_base == state.config.memory[i].guest_base &&
           regions[i].size == state.config.memory[i].size;
  }
  if (!same) return Status::InvalidArgument("guest memory regions differ from state.config.memory");
  return Status::Ok();
}

Status RenameNoReplace(const std::string& from, const std::string& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) {
    return Status::Ok();
  }
  if (errno == EEXIST) return Status::AlreadyExists("snapshot " + to + " already exists");
  if (errno != EINVAL && errno != ENOSYS) return Status::FromErrno("rename to " + to);
  // No RENAME_NOREPLACE on this filesystem: check, then rename.
  if (::access(to.c_str(), F_OK) == 0) return Status::AlreadyExists("snapshot " + to + " already exists");
  if (::rename(from.c_str(), to.c_str()) < 0) return Status::FromErrno("rename to " + to);
  return Status::Ok();
}

Result<SnapshotMeta> WriteFiles(const std::string& tmp, const MachineState& state,
                                const std::vector<DiskIndexEntry>& disks,
                                std::span<const MemoryRegion> memory, SnapshotMeta meta,
                                const SnapshotWriteOptions& options) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> state_bytes, EncodeState(state));
  ASSIGN_OR_RETURN(meta.state, WriteSmallFile(tmp + "/" + kStateFileName, state_bytes.data(),
                                              state_bytes.size()));
  std::string disk = DiskIndexToJson(disks);
  ASSIGN_OR_RETURN(meta.disk, WriteSmallFile(tmp + "/" + kDiskFileName, disk.data(), disk.size()));
  std::string mem_path = tmp + "/" + kMemoryFileName;
  ASSIGN_OR_RETURN(UniqueFd mem_fd, CreateFile(mem_path));
  ASSIGN_OR_RETURN(MemoryFileInfo info,
                   WriteMemoryFile(memory, mem_fd.get(), {.digest = options.digest_memory}));
  RETURN_IF_ERROR(Seal(mem_fd.get(), mem_path));
  meta.memory = {info.size, info.digest};
  meta.memory_data_bytes = info.data_bytes;
  meta.created_at = NowRfc3339();
  meta.mem_bytes = state.config.mem_bytes;
  meta.vcpus = state.config.vcpus;
  std::string json = MetaToJson(meta);
  RETURN_IF_ERROR(WriteSmallFile(tmp + "/" + kMetaFileName, json.data(), json.size()).status());
  RETURN_IF_ERROR(FsyncDir(tmp));
  return meta;
}

Status Missing(const std::string& path) {
  return Status::NotFound("snapshot file " + path + " is missing");
}

// One of the snapshot's small files (meta, state, disk index), refused above
// `cap` bytes.
Result<std::string> ReadSmallFile(const std::string& path, uint64_t cap) {
  Result<std::string> data = ReadFileToString(path, static_cast<size_t>(cap));
  if (data.ok()) return data;
  if (data.status().code() == StatusCode::kNotFound) return Missing(path);
  if (data.status().code() == StatusCode::kOutOfRange) {
    return Status::InvalidArgument(data.status().message());  // a bad snapshot, like any other
  }
  return data.status();
}

Status CheckSmallFile(const std::string& name, const std::string& data, const FileDigest& want) {
  if (data.size() != want.size) {
    return Status::DataLoss(name + " is " + std::to_string(data.size()) +
                            " bytes, meta.json says " + std::to_string(want.size));
  }
  std::string got = HexEncode(Sha256Of({reinterpret_cast<const uint8_t*>(data.data()), data.size()}));
  if (got != want.sha256) return Status::DataLoss(name + " does not match its SHA-256 in meta.json");
  return Status::Ok();
}

Status CheckMemoryFile(const std::string& path, const SnapshotMeta& meta,
                       const MachineState& state, bool verify_digest) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return errno == ENOENT ? Missing(path) : Status::FromErrno("open " + path);
  struct stat st{};
  if (::fstat(fd.get(), &st) < 0) return Status::FromErrno("stat " + path);
  auto size = static_cast<uint64_t>(st.st_size);
  uint64_t need = state.config.mem_bytes;
  if (size != need) {
    return Status::DataLoss("memory file is " + std::to_string(size) + " bytes, " +
                            (size < need ? "shorter than" : "longer than") + " the guest's " +
                            std::to_string(need) + " bytes of memory");
  }
  if (meta.memory.size != size || meta.mem_bytes != need || meta.vcpus != state.config.vcpus) {
    return Status::DataLoss("meta.json does not describe this snapshot's state and memory");
  }
  if (!verify_digest) return Status::Ok();
  if (meta.memory.sha256.empty()) {
    return Status::FailedPrecondition("snapshot was written without a memory digest");
  }
  ASSIGN_OR_RETURN(std::string digest, ChunkedDigestOfFile(fd.get()));
  if (digest != meta.memory.sha256) {
    return Status::DataLoss("memory file does not match its digest in meta.json");
  }
  return Status::Ok();
}

}  // namespace

Result<SnapshotMeta> SnapshotDir::Write(const std::string& dir, const MachineState& state,
                                        const std::vector<DiskIndexEntry>& disks,
                                        std::span<const MemoryRegion> memory,
                                        const SnapshotMeta& meta,
                                        const SnapshotWriteOptions& options) {
  RETURN_IF_ERROR(ValidateState(state));
  for (size_t i = 0; i < disks.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (disks[i].slot == disks[j].slot)
        return Status::InvalidArgument("two disks in slot " + std::to_string(disks[i].slot));
  RETURN_IF_ERROR(CheckMemoryMatches(state, memory));
  if (::access(dir.c_str(), F_OK) == 0) return Status::AlreadyExists("snapshot " + dir + " already exists");
  std::string parent = Parent(dir);
  std::string tmpl = parent + "/." + Base(dir) + ".tmp-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) return Status::FromErrno("create temporary directory in " + parent);
  std::string tmp(buf.data());
  Result<SnapshotMeta> written = WriteFiles(tmp, state, disks, memory, meta, options);
  Status st = written.ok() ? RenameNoReplace(tmp, dir) : written.status();
  if (!st.ok()) {
    RemoveTree(tmp);
    return st.WithContext("writing snapshot " + dir);
  }
  st = FsyncDir(parent);
  if (!st.ok()) {
    // Renamed but maybe not durable: report failure and leave nothing behind.
    RemoveTree(dir);
    return st.WithContext("writing snapshot " + dir);
  }
  return written;
}

Result<SnapshotDir> SnapshotDir::Open(const std::string& dir, const SnapshotOpenOptions& options) {
  struct stat st{};
  if (::stat(dir.c_str(), &st) < 0) return Status::NotFound("snapshot " + dir + " does not exist");
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument(dir + " is not a snapshot directory");
  ASSIGN_OR_RETURN(std::string meta_text, ReadSmallFile(dir + "/" + kMetaFileName, kMaxMetaBytes));
  ASSIGN_OR_RETURN(SnapshotMeta meta, ParseMeta(meta_text));
  ASSIGN_OR_RETURN(std::string state_bytes,
                   ReadSmallFile(dir + "/" + kStateFileName, options.limits.max_file_bytes));
  // Decode first: its errors say precisely what is wrong with the file.
  ASSIGN_OR_RETURN(MachineState state,
                   DecodeState({reinterpret_cast<const uint8_t*>(state_bytes.data()), state_bytes.size()},
                               options.limits));
  RETURN_IF_ERROR(CheckSmallFile("state", state_bytes, meta.state));
  ASSIGN_OR_RETURN(std::string disk, ReadSmallFile(dir + "/" + kDiskFileName, kMaxDiskIndexBytes));
  RETURN_IF_ERROR(CheckSmallFile("disk", disk, meta.disk));
  ASSIGN_OR_RETURN(std::vector<DiskIndexEntry> disks, ParseDiskIndex(disk));
  RETURN_IF_ERROR(CheckMemoryFile(dir + "/" + kMemoryFileName, meta, state,
                                  options.verify_memory_digest));
  return SnapshotDir(dir, std::move(state), std::move(meta), std::move(disks));
}

Result<std::vector<MmapRegion>> SnapshotDir::MapMemory() const {
  return MapMemoryFile(memory_path(), state_.config.memory);
}

Status SnapshotDir::RemoveStaleTemps(const std::string& parent_dir) {
  DIR* d = ::opendir(parent_dir.c_str());
  if (d == nullptr) return Status::FromErrno("open directory " + parent_dir);
  std::vector<std::string> stale;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.size() > 1 && name[0] == '.' && name.find(".tmp-") != std::string::npos) {
      stale.push_back(parent_dir + "/" + name);
    }
  }
  ::closedir(d);
  for (const std::string& s : stale) RemoveTree(s);
  return Status::Ok();
}

}  // namespace kubicle::snapshot
