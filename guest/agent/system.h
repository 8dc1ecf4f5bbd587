// SystemService: the messages about the machine rather than files or
// processes: IDENTITY, POST_RESTORE (the clone hook), and the test extras
// MEM_FILL, MEM_CHECKSUM and ENTROPY_READ.
//
// POST_RESTORE, in order: mix the host's seed into the kernel pool
// (RNDADDENTROPY, credited at 8 bits per byte, since the host drew it from
// its own CSPRNG) and force a CRNG reseed (RNDRESEEDCRNG), so clones of one
// snapshot stop sharing random state; set CLOCK_REALTIME from the host's
// wall clock; set the hostname. Each step is best effort: a step the kernel
// refuses (EPERM when not root, ENOTTY when unsupported) is logged and
// reported in the reply as an extra error_message field ("warnings: ..."),
// which decoders that do not expect it ignore, and the rest still runs.
//
// IDENTITY's entropy_digest is FNV-1a over 16 bytes drawn from the kernel
// CRNG at the time of the request: two clones that share CRNG state give the
// same digest, which is how tests catch a missing reseed.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "guest/agent/connection.h"

namespace kubicle::guest::agent {

struct SystemOptions {
  // Skip clock_settime (a host-process agent in tests must not move the
  // host's clock); the requested time is still recorded and reported.
  bool set_clock = true;
  // Skip sethostname (same reason, when not in a private UTS namespace).
  bool set_hostname = true;
  // The network interface a POST_RESTORE's new MAC is set on (--nic; init
  // passes eth0 when it configured one). Empty: none, the MAC is reported
  // as not applied — an agent running on a host never touches its NICs.
  std::string nic;
};

class SystemService {
 public:
  static constexpr uint64_t kMaxMemFill = 1ull << 34;

  explicit SystemService(SystemOptions options) : options_(options) {}
  ~SystemService();
  SystemService(const SystemService&) = delete;
  SystemService& operator=(const SystemService&) = delete;

  void HandleIdentity(Connection& c, const protocol::Frame& f);
  void HandlePostRestore(Connection& c, const protocol::Frame& f);
  void HandleMemFill(Connection& c, const protocol::Frame& f);
  void HandleMemChecksum(Connection& c, const protocol::Frame& f);
  void HandleEntropyRead(Connection& c, const protocol::Frame& f);

 private:
  // Each returns "" on success or a one-line warning.
  std::string Reseed(const std::vector<uint8_t>& seed);
  std::string SetClock(uint64_t wall_clock_ns);
  std::string SetHostname(const std::string& name);
  std::string SetNicMac(const std::vector<uint8_t>& mac);

  SystemOptions options_;
  uint64_t generation_ = 0;
  uint64_t wall_clock_ns_ = 0;
  std::string hostname_override_;  // set when set_hostname is off
  void* fill_ = nullptr;
  uint64_t fill_size_ = 0;
  uint64_t fill_seed_ = 0;
};

}  // namespace kubicle::guest::agent
