// LaunchSpec: the typed command line of kubicle-vmm, the one contract
// between whoever starts a VMM (the node's template baker and warm pool, its
// launchers, tests) and the VMM itself. ToArgv writes it and Parse reads it
// back; kubicle-vmm parses its own arguments with the same Parse
// (vmm_config.h), so the flags a node writes are the flags a VMM reads.
// launch_spec_test holds the two to each other field by field and to a
// golden argv.
//
// Parse checks all that the command line alone can get wrong: unknown
// flags, flags the mode does not take, malformed values and ranges (vCPUs,
// CID, disks, the console's limits). What needs this host (the kernel,
// initrd and disk images exist, the memory size fits the architecture) is
// checked by kubicle-vmm after it (CheckOnHost, vmm_config.h), so this
// library links no KVM, device or boot code and the node runtime links it.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "vmm/control_protocol.h"
#include "vmm/devices/legacy/console_log.h"
#include "vmm/seccomp_mode.h"

namespace kubicle::vmm {

// `kubicle-vmm run` boots a kernel, `restore` resumes a snapshot, `pool`
// waits on its control socket for a restore request (a warm-pool VM).
enum class LaunchMode { kRun, kRestore, kPool };
const char* LaunchModeName(LaunchMode mode);  // "run", "restore", "pool"

struct DiskConfig {
  std::string path;
  bool read_only = false;
  bool operator==(const DiskConfig&) const = default;
};

// --net tap=NAME,mac=MAC[,netns=PATH][,rx-bps=N,tx-bps=N,rx-pps=N,tx-pps=N]:
// virtio-net on an existing TAP, in the network namespace whose file is
// netns (empty: the VMM's own). Rates are per second, 0 (the default) is
// unlimited.
struct NetFlags {
  std::string tap;
  std::string netns;
  std::array<uint8_t, 6> mac{};
  uint64_t rx_bps = 0, tx_bps = 0, rx_pps = 0, tx_pps = 0;
  // Whether the rates were given: a restore without them keeps the saved
  // limits. ToArgv writes the four rates exactly when this is set.
  bool limits_given = false;
  bool operator==(const NetFlags&) const = default;
};

struct LaunchSpec {
  LaunchMode mode = LaunchMode::kRun;
  std::string kernel_path;  // run: required
  std::string initrd_path;  // empty: no initrd
  std::string cmdline = "console=ttyS0 reboot=k panic=1 nomodule";
  uint64_t mem_bytes = 256ull << 20;
  int vcpus = 1;
  std::vector<DiskConfig> disks;
  std::string vsock_uds;    // empty: no vsock device
  uint64_t guest_cid = 3;
  bool rng = true;          // virtio-rng, on unless --no-rng
  // --workspace-slot: one more virtio-blk device (serial "workspace"),
  // empty (capacity 0) until a restore request gives it a workspace image
  // (docs/workspaces.md). Templates are baked with it so that their
  // clones can take a workspace: a snapshot's device set is fixed.
  bool workspace_slot = false;
  std::optional<NetFlags> net;  // virtio-net; unset: no network device
  std::string serial_path;  // empty: stdout; "none": discard
  // --serial-max-bytes, --serial-files, --serial-rate, --serial-burst: the
  // console log's rotation, cap and rate limit (console_log.h); a restore
  // request or a fork child keeps this process's.
  devices::legacy::ConsoleLogLimits serial_limits;
  std::string control_path; // empty: no control socket; pool: required
  std::string vm_id = "vm";
  std::string snapshot_path;  // restore: the snapshot directory (required)
  // Directory for copy-on-write disk layers. When set, every writable --disk
  // is a LayeredDisk: the image is its read-only base and this VM's writes
  // go to a private overlay file here (which snapshot and fork freeze into
  // shared layers). Empty: writable disks are raw images, written in place,
  // and the VM cannot be snapshotted or forked.
  std::string layer_dir;
  // --seccomp: the system call filter (syscall_policy.h); enforce unless
  // debugging a refused call.
  SeccompMode seccomp = SeccompMode::kEnforce;
  bool log_json = false;
  std::string log_level = "info";

  // kubicle-vmm's arguments after the binary: the mode, then "--flag"
  // "value" (each value a whole argument, whatever it starts with) for
  // every field that differs from its default, and always the shape
  // (--mem, --vcpus) of run and pool, so a process listing shows it. A
  // field the mode does not take is written all the same and Parse refuses
  // it: a restore's shape comes from its snapshot, and a caller who set one
  // hears so from the VMM (exit code 1) rather than losing it unseen.
  std::vector<std::string> ToArgv() const;

  // The inverse of ToArgv, and kubicle-vmm's own parser: argv[0] is the
  // mode; flags come in any order, as "--flag value" or "--flag=value".
  // InvalidArgument or OutOfRange naming the flag. Touches no file.
  static Result<LaunchSpec> Parse(const std::vector<std::string>& argv);

  // What Parse requires of the values once read: the mode's required flags,
  // ranges and consistency. Ok for every spec Parse returns.
  Status Check() const;
};

// Limits enforced at parse time.
inline constexpr int kMaxVcpus = 64;
inline constexpr int kMaxDisks = 8;
inline constexpr uint64_t kMaxSerialFiles = 16;

// Parses sizes like "256M", "2G", "512K", "1048576" (bytes). Rejects
// overflow, junk and negative numbers.
Result<uint64_t> ParseSize(const std::string& text);
// The inverse: the largest suffix that divides exactly ("64M", "1536K",
// "4097").
std::string FormatSize(uint64_t bytes);

// Parses the value of --disk, PATH[,ro|,rw] (the option after the last
// comma; none: writable), as a template names its disks.
Result<DiskConfig> ParseDiskFlag(const std::string& text);

// Parses the value of --net (exposed for tests): strict, every key known and
// given once, tap and mac required, the MAC unicast.
Result<NetFlags> ParseNetFlag(const std::string& spec);

// A clone's network from its restore or fork request (or the node's NIC for
// a bake): the attachment's TAP, namespace and MAC, with `current`'s limits
// (a clone keeps the saved ones).
Result<NetFlags> NetFlagsFor(const control::NetAttachment& attachment,
                             const std::optional<NetFlags>& current);

}  // namespace kubicle::vmm
