// kubicle-ext4: the confined helper through which kubicle-node reads and
// writes a workspace's ext4 image without a VM (docs/workspaces.md, "The
// helper"). One process per request: the node starts it with the request
// socket as fd 0 and the image as fd 3, nothing else. Before it reads a
// byte it lowers its limits (address space, CPU time, file size, open
// files, no core), sets no_new_privs and installs a seccomp filter that
// lets it read and write its fds and manage memory, nothing more (no
// open, no exec, no sockets: every other call fails EPERM). The image is
// then parsed by libext2fs inside that box; the node kills it at a wall
// deadline and treats whatever it says as hostile.
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "common/seccomp_filter.h"
#include "noderuntime/ext4/ext4_fs.h"
#include "noderuntime/ext4/ext4_wire.h"

using kubicle::Result;
using kubicle::Status;
using namespace kubicle::noderuntime::ext4;
using json = nlohmann::json;

namespace {

constexpr int kSock = 0;
constexpr int kImage = 3;

bool WriteAll(const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(kSock, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(char* p, size_t n) {
  while (n > 0) {
    ssize_t r = ::read(kSock, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool Frame(char type, const char* p, size_t n) {
  const std::string h = EncodeFrameHeader(type, static_cast<uint32_t>(n));
  return WriteAll(h.data(), h.size()) && WriteAll(p, n);
}

bool Json(const json& j) {
  const std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  return Frame('J', s.data(), s.size());
}

void Limit(int resource, rlim_t value) {
  rlimit r{value, value};
  if (::setrlimit(resource, &r) != 0) {
    std::fprintf(stderr, "kubicle-ext4: setrlimit: %s\n", std::strerror(errno));
    std::_Exit(2);
  }
}

// Allows the calls libext2fs and the C++ runtime need on fds it already
// has; everything else returns EPERM.
void Seccomp() {
  kubicle::seccomp::FilterBuilder b(SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA));
  b.Allow({
      SYS_read, SYS_write, SYS_pread64, SYS_pwrite64, SYS_readv, SYS_writev, SYS_lseek,
      SYS_fstat, SYS_newfstatat, SYS_fcntl, SYS_fsync, SYS_fdatasync, SYS_fallocate,
      SYS_mmap, SYS_munmap, SYS_mremap, SYS_brk, SYS_madvise, SYS_mprotect,
      SYS_close, SYS_exit, SYS_exit_group, SYS_rt_sigreturn, SYS_rt_sigprocmask,
      SYS_futex, SYS_getrandom, SYS_clock_gettime, SYS_gettimeofday, SYS_time,
      SYS_getpid, SYS_gettid, SYS_sysinfo,
  });
  auto program = b.Build();
  Status st = program.ok() ? kubicle::seccomp::Install(*program, /*tsync=*/false) : program.status();
  if (!st.ok()) {
    std::fprintf(stderr, "kubicle-ext4: %s\n", st.ToString().c_str());
    std::_Exit(2);
  }
}

void Confine(uint64_t mem_mib, uint64_t cpu_seconds) {
  struct stat st {};
  if (::fstat(kImage, &st) != 0 || !S_ISREG(st.st_mode)) {
    std::fprintf(stderr, "kubicle-ext4: fd 3 is not the workspace image\n");
    std::_Exit(2);
  }
  for (int fd = 4; fd < 1024; ++fd) ::close(fd);  // the node passes none; be sure
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  Limit(RLIMIT_CORE, 0);
  Limit(RLIMIT_AS, mem_mib << 20);
  Limit(RLIMIT_CPU, cpu_seconds);
  Limit(RLIMIT_FSIZE, static_cast<rlim_t>(st.st_size));  // the image never grows
  Limit(RLIMIT_NOFILE, 8);
  Limit(RLIMIT_NPROC, 0);
  Seccomp();
}

Status Serve(const Request& req) {
  const bool writable = req.op == Op::kWrite || req.op == Op::kRemove;
  ASSIGN_OR_RETURN(auto fs, Ext4Fs::Open(kImage, writable));
  switch (req.op) {
    case Op::kStat: {
      ASSIGN_OR_RETURN(auto s, fs->Stat(req.path));
      json j = {{"ok", true},
                {"stat", {{"type", static_cast<int>(s.type)}, {"size", s.size}, {"mode", s.mode},
                          {"mtimeNs", s.mtime_ns}, {"uid", s.uid}, {"gid", s.gid}}}};
      return Json(j) ? Status::Ok() : Status::Unavailable("node went away");
    }
    case Op::kRead: {
      RETURN_IF_ERROR(fs->Read(
          req.path, kMaxDataFrame,
          [](uint64_t size) {
            return Json({{"size", size}}) ? Status::Ok() : Status::Unavailable("node went away");
          },
          [](const char* p, size_t n) {
            return Frame('D', p, n) ? Status::Ok() : Status::Unavailable("node went away");
          }));
      break;
    }
    case Op::kList: {
      json batch = json::array();
      RETURN_IF_ERROR(fs->List(req.path, 100000, [&](const kubicle::guest::protocol::DirEntry& e) {
        batch.push_back({{"name", e.name}, {"type", static_cast<int>(e.type)}, {"size", e.size},
                         {"mode", e.mode}, {"mtimeNs", e.mtime_ns}});
        if (batch.size() < kListBatch) return Status::Ok();
        const bool ok = Json({{"entries", batch}});
        batch = json::array();
        return ok ? Status::Ok() : Status::Unavailable("node went away");
      }));
      if (!batch.empty() && !Json({{"entries", batch}})) return Status::Unavailable("node went away");
      break;
    }
    case Op::kWrite: {
      RETURN_IF_ERROR(fs->Write(req.path, req.mode, req.size, [](char* buf, size_t max) -> Result<size_t> {
        ssize_t r;
        do r = ::read(kSock, buf, max);
        while (r < 0 && errno == EINTR);
        if (r < 0) return Status::Unavailable("reading the data");
        return static_cast<size_t>(r);
      }));
      RETURN_IF_ERROR(fs->Close());
      break;
    }
    case Op::kRemove:
      RETURN_IF_ERROR(fs->Remove(req.path, req.recursive));
      RETURN_IF_ERROR(fs->Close());
      break;
  }
  return Json({{"ok", true}}) ? Status::Ok() : Status::Unavailable("node went away");
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t mem_mib = 512, cpu = 60;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const uint64_t v = std::strtoull(argv[i + 1], nullptr, 10);
    if (flag == "--mem-mib" && v >= 64 && v <= 65536) mem_mib = v;
    else if (flag == "--cpu-seconds" && v >= 1 && v <= 3600) cpu = v;
    else {
      std::fprintf(stderr, "usage: kubicle-ext4 [--mem-mib N] [--cpu-seconds N] (fd 0: socket, fd 3: image)\n");
      return 2;
    }
  }
  Confine(mem_mib, cpu);
  unsigned char len[4];
  if (!ReadAll(reinterpret_cast<char*>(len), 4)) return 3;
  const uint32_t n = len[0] | (len[1] << 8) | (len[2] << 16) | (uint32_t{len[3]} << 24);
  if (n == 0 || n > kMaxRequestHeader) {
    Json(json::parse(EncodeError(Status::InvalidArgument("request header length out of range"))));
    return 3;
  }
  std::string header(n, '\0');
  if (!ReadAll(header.data(), n)) return 3;
  auto req = DecodeRequest(header);
  Status st = req.ok() ? Serve(*req) : req.status();
  if (!st.ok()) {
    Json(json::parse(EncodeError(st)));
    return 1;
  }
  return 0;
}
