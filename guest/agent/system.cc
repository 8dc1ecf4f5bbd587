#include "guest/agent/system.h"

#include <fcntl.h>
#include <linux/random.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <sys/socket.h>
#include <linux/vm_sockets.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "common/unique_fd.h"
#include "guest/agent/agent.h"
#include "guest/agent/agent_log.h"
#include "guest/protocol/tlv.h"

namespace kubicle::guest::agent {

using protocol::Frame;

SystemService::~SystemService() {
  if (fill_ != nullptr) ::munmap(fill_, fill_size_);
}

namespace {

std::vector<uint8_t> BootId() {
  std::vector<uint8_t> out;
  UniqueFd fd(::open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC));
  char text[64] = {};
  if (!fd || ::read(fd.get(), text, sizeof(text) - 1) <= 0) return out;
  auto hex = [](char ch) -> int {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
  };
  int hi = -1;
  for (const char* p = text; *p != '\0' && out.size() < protocol::kBootIdLen; ++p) {
    const int v = hex(*p);
    if (v < 0) continue;
    if (hi < 0) {
      hi = v;
    } else {
      out.push_back(uint8_t(hi << 4 | v));
      hi = -1;
    }
  }
  if (out.size() != protocol::kBootIdLen) out.clear();
  return out;
}

uint64_t LocalCid() {
  UniqueFd fd(::open("/dev/vsock", O_RDONLY | O_CLOEXEC));
  unsigned int cid = VMADDR_CID_ANY;
  if (!fd || ::ioctl(fd.get(), IOCTL_VM_SOCKETS_GET_LOCAL_CID, &cid) < 0) return 0;
  return cid == VMADDR_CID_ANY ? 0 : cid;
}

uint64_t NowNs(clockid_t clock) {
  timespec ts{};
  ::clock_gettime(clock, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

}  // namespace

void SystemService::HandleIdentity(Connection& c, const Frame& f) {
  auto req = protocol::IdentityRequest::Decode(f.payload);
  if (!req.ok()) return c.SendError(f.id, req.status());
  protocol::IdentityReply r;
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  r.hostname = hostname_override_.empty() ? std::string(host) : hostname_override_;
  if (r.hostname.size() > protocol::kMaxHostnameLen) r.hostname.resize(protocol::kMaxHostnameLen);
  r.cid = LocalCid();
  r.generation = generation_;
  r.boot_id = BootId();
  r.cpus = uint32_t(::sysconf(_SC_NPROCESSORS_ONLN));
  struct sysinfo si {};
  if (::sysinfo(&si) == 0) r.memory_bytes = uint64_t(si.totalram) * si.mem_unit;
  r.uptime_ns = NowNs(CLOCK_BOOTTIME);
  r.wall_clock_ns = wall_clock_ns_;
  uint8_t sample[16] = {};
  if (::getrandom(sample, sizeof(sample), GRND_NONBLOCK) == ssize_t(sizeof(sample))) {
    r.entropy_digest = protocol::Fnv1a64(protocol::kFnvOffset, sample, sizeof(sample));
  }
  r.name = kAgentName;
  r.software_version = kAgentVersion;
  c.Reply(r, f.id);
}

std::string SystemService::Reseed(const std::vector<uint8_t>& seed) {
  UniqueFd fd(::open("/dev/urandom", O_WRONLY | O_CLOEXEC));
  if (!fd) return std::string("open /dev/urandom: ") + strerror(errno);
  // struct rand_pool_info has a flexible array: build it in a word buffer.
  std::vector<uint32_t> buf(2 + (seed.size() + 3) / 4, 0);
  auto* info = reinterpret_cast<rand_pool_info*>(buf.data());
  info->entropy_count = int(seed.size() * 8);
  info->buf_size = int(seed.size());
  std::memcpy(info->buf, seed.data(), seed.size());
  if (::ioctl(fd.get(), RNDADDENTROPY, info) < 0) {
    return std::string("RNDADDENTROPY: ") + strerror(errno);
  }
  if (::ioctl(fd.get(), RNDRESEEDCRNG) < 0) return std::string("RNDRESEEDCRNG: ") + strerror(errno);
  return {};
}

std::string SystemService::SetClock(uint64_t ns) {
  wall_clock_ns_ = ns;
  if (!options_.set_clock) return "clock: not set (--no-set-clock)";
  timespec ts{time_t(ns / 1000000000ull), long(ns % 1000000000ull)};
  if (::clock_settime(CLOCK_REALTIME, &ts) < 0) {
    return std::string("clock_settime: ") + strerror(errno);
  }
  return {};
}

std::string SystemService::SetHostname(const std::string& name) {
  if (!options_.set_hostname) {
    hostname_override_ = name;
    return {};
  }
  if (::sethostname(name.data(), name.size()) < 0) {
    return std::string("sethostname: ") + strerror(errno);
  }
  hostname_override_.clear();
  return {};
}

// A clone's NIC has a new MAC in its device (virtio-net reads the MAC only
// at probe): the interface takes it too, so what the guest sends matches
// what the host gave this clone. virtio-net allows a live change.
std::string SystemService::SetNicMac(const std::vector<uint8_t>& mac) {
  if (options_.nic.empty()) return "nic mac: not set (no --nic)";
  UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return std::string("nic mac: socket: ") + strerror(errno);
  ifreq ifr{};
  if (options_.nic.size() >= sizeof(ifr.ifr_name)) return "nic mac: interface name too long";
  std::memcpy(ifr.ifr_name, options_.nic.data(), options_.nic.size());
  ifr.ifr_hwaddr.sa_family = ARPHRD_ETHER;
  std::memcpy(ifr.ifr_hwaddr.sa_data, mac.data(), 6);
  if (::ioctl(fd.get(), SIOCSIFHWADDR, &ifr) < 0)
    return "nic mac: SIOCSIFHWADDR on " + options_.nic + ": " + strerror(errno);
  return {};
}

void SystemService::HandlePostRestore(Connection& c, const Frame& f) {
  auto req = protocol::PostRestoreRequest::Decode(f.payload);
  if (!req.ok()) return c.SendError(f.id, req.status());
  std::vector<std::string> warnings;
  auto note = [&warnings](std::string w) {
    if (!w.empty()) warnings.push_back(std::move(w));
  };
  if (!req->entropy_seed.empty()) note(Reseed(req->entropy_seed));
  if (req->wall_clock_ns != 0) note(SetClock(req->wall_clock_ns));
  if (!req->hostname.empty()) note(SetHostname(req->hostname));
  if (!req->nic_mac.empty()) note(SetNicMac(req->nic_mac));
  generation_ = req->generation;
  protocol::TlvBuilder b;
  b.U64(protocol::Tag::kGeneration, generation_);
  if (!warnings.empty()) {
    std::string all = "warnings:";
    for (const auto& w : warnings) all += " " + w + ";";
    LogWarn("post-restore incomplete", "generation=" + std::to_string(generation_) + " " + all);
    if (all.size() > protocol::kMaxErrorMessageLen) all.resize(protocol::kMaxErrorMessageLen);
    b.Str(protocol::Tag::kErrorMessage, all);
  }
  c.Send(protocol::MsgType::kPostRestore, f.id, 0, b.Take());
}

void SystemService::HandleMemFill(Connection& c, const Frame& f) {
  auto req = protocol::MemFillRequest::Decode(f.payload);
  if (!req.ok()) return c.SendError(f.id, req.status());
  struct sysinfo si {};
  const uint64_t ram = ::sysinfo(&si) == 0 ? uint64_t(si.totalram) * si.mem_unit : 0;
  if (req->size > kMaxMemFill || req->size > ram / 2) {
    return c.SendError(f.id, Status::OutOfRange("size above half of the guest's RAM"));
  }
  if (fill_ != nullptr) ::munmap(fill_, fill_size_);
  fill_ = nullptr;
  fill_size_ = fill_seed_ = 0;
  if (req->size > 0) {
    void* p = ::mmap(nullptr, req->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return c.SendError(f.id, Status::FromErrno("mmap"));
    fill_ = p;
    auto* words = static_cast<uint64_t*>(p);
    for (uint64_t i = 0; i < req->size / 8; ++i) words[i] = protocol::MemPatternWord(req->seed, i);
  }
  fill_size_ = req->size;
  fill_seed_ = req->seed;
  c.Reply(protocol::MemFillReply{fill_size_}, f.id);
}

void SystemService::HandleMemChecksum(Connection& c, const Frame& f) {
  auto req = protocol::MemChecksumRequest::Decode(f.payload);
  if (!req.ok()) return c.SendError(f.id, req.status());
  protocol::MemChecksumState st;
  if (fill_ != nullptr) st.Update(static_cast<const uint64_t*>(fill_), fill_size_ / 8);
  c.Reply(protocol::MemChecksumReply{fill_size_, fill_seed_, st.Final()}, f.id);
}

void SystemService::HandleEntropyRead(Connection& c, const Frame& f) {
  auto req = protocol::EntropyReadRequest::Decode(f.payload);
  if (!req.ok()) return c.SendError(f.id, req.status());
  protocol::EntropyReadReply r;
  r.data.resize(req->length);
  size_t got = 0;
  while (got < r.data.size()) {
    const ssize_t n = ::getrandom(r.data.data() + got, r.data.size() - got, GRND_NONBLOCK);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return c.SendError(f.id, errno == EAGAIN
                                   ? Status::Unavailable("the kernel CRNG is not initialised yet")
                                   : Status::FromErrno("getrandom"));
    }
    got += size_t(n);
  }
  c.Reply(r, f.id);
}

}  // namespace kubicle::guest::agent
