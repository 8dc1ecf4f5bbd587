// Agent: the test guest's request handler, the subset of the agent protocol
// the tiny guest implements (docs/testguest.md): HELLO, PING, ECHO, RAM files
// (write/read/stat/list/remove/chmod), IDENTITY, POST_RESTORE, MEM_FILL,
// MEM_CHECKSUM, ENTROPY_READ, DISK_INFO/READ/WRITE, and EXEC_START of a few
// built-in programs (echo, hostname, cat, sha256sum, printenv, console, true,
// false). Everything else gets
// ERROR Unimplemented.
//
// Portable freestanding C++ with no hardware access: the guest wires it to
// virtio devices through Platform; host unit tests wire it to fakes and drive
// it with the real AgentClient over a socket.
//
// Contracts: every frame gets exactly the replies the protocol defines, or
// one ERROR; a malformed payload never breaks the session. Init must be
// called once before use; the object needs no constructor (static storage).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "guest/protocol/wire.h"
#include "guest/testguest/ramfs.h"
#include "guest/testguest/session.h"

namespace kubicle::guest::testguest {

class Fields;

// A raw disk as its device describes it.
struct DiskProperties {
  uint64_t capacity_sectors = 0;  // 512-byte sectors
  bool read_only = false;
  char id[wire::kMaxDiskIdLen + 1] = {};  // NUL-terminated printable ASCII, may be empty
};

// How a disk request ended, as the device reported it.
enum class DiskResult : uint8_t {
  kOk,
  kIoError,      // VIRTIO_BLK_S_IOERR: read-only, out of range, or a host I/O error
  kUnsupported,  // VIRTIO_BLK_S_UNSUPP
  kBroken,       // the device did not answer or answered nonsense; it is not used again
};

// What the agent needs from the machine.
class Platform {
 public:
  // Fills out[0..n) with bytes from the hardware RNG; false when unavailable.
  virtual bool ReadEntropy(uint8_t* out, uint32_t n) = 0;
  virtual uint32_t CpusRunning() = 0;
  virtual uint64_t UptimeNs() = 0;  // 0 when unknown

  // Raw disks, numbered 0..DiskCount()-1. Requests are passed to the device
  // unchecked (it must refuse bad ones itself: that is what the kvm tests
  // exercise). Buffers hold count * 512 bytes; count <= kMaxDiskSectors.
  virtual uint32_t DiskCount() { return 0; }
  virtual const DiskProperties* Disk(uint32_t index) { return nullptr; }
  virtual DiskResult DiskRead(uint32_t index, uint64_t sector, uint32_t count, uint8_t* out) {
    return DiskResult::kBroken;
  }
  virtual DiskResult DiskWrite(uint32_t index, uint64_t sector, uint32_t count,
                               const uint8_t* data) {
    return DiskResult::kBroken;
  }
  // Flushes the disk's write cache (a no-op success without FLUSH support).
  virtual DiskResult DiskFlush(uint32_t index) { return DiskResult::kBroken; }

  // Writes to the serial console (the `console` built-in, for tests of the
  // host's console log limits).
  virtual void ConsoleWrite(const char* s, uint32_t n) {}

 protected:
  ~Platform() = default;
};

struct AgentConfig {
  uint64_t cid = 0;
  uint64_t memory_bytes = 0;
  uint8_t* fill_area = nullptr;  // free RAM for MEM_FILL
  uint64_t fill_area_size = 0;
  uint8_t* file_data = nullptr;  // RamFs::kDataBytes
};

class Agent {
 public:
  static constexpr const char* kName = "kubicle-testguest";
  static constexpr const char* kSoftwareVersion = "0.1.0";
  static constexpr const char* kDefaultHostname = "kubicle-testguest";
  static constexpr uint32_t kMaxEntropyRead = 4096;
  static constexpr uint32_t kReadChunk = 16 * 1024;

  void Init(Platform* platform, const AgentConfig& config);
  void SetCid(uint64_t cid) { cid_ = cid; }
  uint64_t cid() const { return cid_; }
  const uint8_t* boot_id() const { return boot_id_; }
  bool have_boot_entropy() const { return boot_entropy_ok_; }

  // Answers one complete frame whose header passed DecodeHeader.
  void HandleFrame(Session* s, const wire::FrameHeader& h, const uint8_t* payload);
  // Answers a frame refused whole (its header, or a payload above our
  // limit) with one ERROR, unless it belongs to a stream: a FILE_WRITE
  // frame fails its stream (one ERROR for the stream, the rest dropped);
  // EXEC_STDIN names a built-in exec that ended inside EXEC_START, whose
  // answer is complete, so it is dropped like any stdin.
  void RefuseFrame(Session* s, const wire::FrameHeader& h, wire::ErrorCode code,
                   const char* message);
  void ReleaseWriteSlot(int slot) { fs_.Release(slot); }

 private:
  using Type = wire::MsgType;
  // Built-in exec (agent_exec.cc). ExecArgs points into the request payload.
  struct ExecArgs {
    static constexpr uint32_t kMax = 256;
    const char* argv[kMax] = {};
    uint32_t argv_len[kMax] = {};
    uint32_t argc = 0;  // may exceed kMax (then refused)
    const char* env[kMax] = {};  // "KEY=VALUE" entries, for printenv
    uint32_t env_len[kMax] = {};
    uint32_t envc = 0;  // may exceed kMax (then refused)
    const uint8_t* stdin_data = nullptr;
    uint32_t stdin_len = 0;
    bool background = false;
    uint32_t output_limit = 0;
  };
  // Output of one exec; everything beyond the caps is dropped (truncated).
  struct ExecOut {
    static constexpr uint32_t kOutCap = 64 * 1024;  // fits one reply burst (kMaxReply)
    static constexpr uint32_t kErrCap = 512;
    uint8_t* out = nullptr;  // kOutCap bytes
    uint32_t out_len = 0;
    uint32_t limit = kOutCap;
    uint8_t err[kErrCap] = {};
    uint32_t err_len = 0;
    bool truncated = false;
    void Write(uint8_t stream, const void* data, uint32_t n);
    void WriteStr(uint8_t stream, const char* s);
  };
  void ExecStart(Session* s, uint32_t id, Fields& f, const uint8_t* payload, uint32_t size);
  bool ParseExec(Fields& f, const uint8_t* payload, uint32_t size, ExecArgs* a);
  int32_t RunBuiltin(const ExecArgs& a, ExecOut* o);
  int32_t Cat(const ExecArgs& a, ExecOut* o);
  int32_t Sha256Sum(const ExecArgs& a, ExecOut* o);
  int32_t PrintEnv(const ExecArgs& a, ExecOut* o);
  int32_t Console(const ExecArgs& a, ExecOut* o);
  void SendExecOutput(Session* s, uint32_t id, uint8_t stream, const uint8_t* data, uint32_t len);

  void Hello(Session* s, uint32_t id, Fields& f);
  void Ping(Session* s, uint32_t id, Fields& f);
  void Echo(Session* s, uint32_t id, Fields& f);
  void Identity(Session* s, uint32_t id, Fields& f);
  void PostRestore(Session* s, uint32_t id, Fields& f);
  void MemFill(Session* s, uint32_t id, Fields& f);
  void MemChecksum(Session* s, uint32_t id, Fields& f);
  void EntropyRead(Session* s, uint32_t id, Fields& f);
  // Raw disks (agent_disk.cc).
  void DiskInfo(Session* s, uint32_t id, Fields& f);
  void DiskRead(Session* s, uint32_t id, Fields& f);
  void DiskWrite(Session* s, uint32_t id, Fields& f);
  // Looks up a disk; answers ERROR NotFound and returns null when absent.
  const DiskProperties* FindDisk(Session* s, uint32_t id, uint32_t index);
  // Files (agent_files.cc).
  void FileWrite(Session* s, const wire::FrameHeader& h, Fields& f);
  // Starts a FILE_WRITE stream (first chunk); false after answering ERROR.
  bool OpenWrite(Session* s, const wire::FrameHeader& h, const char* path, uint32_t path_len,
                 uint32_t mode, uint64_t offset);
  void FileRead(Session* s, uint32_t id, Fields& f);
  void Stat(Session* s, uint32_t id, Fields& f);
  void List(Session* s, uint32_t id, Fields& f);
  void Remove(Session* s, uint32_t id, Fields& f);
  void Chmod(Session* s, uint32_t id, Fields& f);
  // Reads a required, valid RamFs path; false (with f failed) otherwise.
  bool ReadPath(Fields& f, const char** path, uint32_t* len);
  void AbortWrite(Session* s, const wire::FrameHeader& h, wire::ErrorCode code, const char* msg);
  // AbortWrite, silent for a stream that already failed.
  void RefuseWrite(Session* s, const wire::FrameHeader& h, wire::ErrorCode code, const char* msg);
  void SendEmpty(Session* s, Type type, uint32_t id);

  Platform* platform_ = nullptr;
  uint64_t cid_ = 0;
  uint64_t memory_bytes_ = 0;
  uint8_t* fill_area_ = nullptr;
  uint64_t fill_area_size_ = 0;
  uint64_t fill_size_ = 0;
  uint64_t fill_seed_ = 0;
  char hostname_[wire::kMaxHostnameLen + 1] = {};
  uint32_t hostname_len_ = 0;
  uint64_t generation_ = 0;
  uint64_t wall_clock_ns_ = 0;
  uint8_t boot_id_[wire::kBootIdLen] = {};
  bool boot_entropy_ok_ = false;
  uint64_t entropy_digest_ = 0;
  uint32_t next_pid_ = 100;  // exec "pids": unique per boot, never 0
  ExecOut exec_out_;
  uint8_t exec_stdout_[ExecOut::kOutCap] = {};
  RamFs fs_;
};

}  // namespace kubicle::guest::testguest
