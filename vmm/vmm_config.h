// VmmConfig: everything `kubicle-vmm run` needs to build one microVM, parsed
// and validated from the command line before any KVM object exists, so a bad
// flag is a clear usage error (exit code 1) and never a half-built VM.
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

struct DiskConfig {
  std::string path;
  bool read_only = false;
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
  // Whether any rate was given: a restore without one keeps the saved limits.
  bool limits_given = false;
};

struct VmmConfig {
  std::string kernel_path;
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
  std::string control_path; // empty: no control socket
  std::string vm_id = "vm";
  std::string snapshot_path;  // `restore`: the snapshot directory
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
};

// Limits enforced at parse time.
inline constexpr int kMaxVcpus = 64;
inline constexpr int kMaxDisks = 8;
inline constexpr uint64_t kMaxSerialFiles = 16;

// Parses sizes like "256M", "2G", "512K", "1048576" (bytes). Rejects
// overflow, junk and negative numbers.
Result<uint64_t> ParseSize(const std::string& text);

// Parses the value of --net (exposed for tests): strict, every key known and
// given once, tap and mac required, the MAC unicast.
Result<NetFlags> ParseNetFlag(const std::string& spec);

// A clone's network from its restore or fork request: the attachment's TAP,
// namespace and MAC, with `current`'s limits (a clone keeps the saved ones).
Result<NetFlags> NetFlagsFor(const control::NetAttachment& attachment,
                             const std::optional<NetFlags>& current);

// Parses the arguments after `kubicle-vmm run`. Result is validated: the
// kernel exists, sizes are in range, guest CID >= 3, paths are set where
// needed. Does not touch KVM.
Result<VmmConfig> ParseRunArgs(const std::vector<std::string>& args);

// Parses the arguments after `kubicle-vmm restore`: --snapshot DIR plus the
// new identity (--vsock-uds, --cid, --net, --control, --serial, --id, logging).
// The machine's shape comes from the snapshot, so --kernel, --mem, --vcpus,
// --disk and --cmdline are refused.
Result<VmmConfig> ParseRestoreArgs(const std::vector<std::string>& args);

// Parses the arguments after `kubicle-vmm pool`: the shape (--mem, --vcpus),
// --control (required) and identity defaults for the restore request.
Result<VmmConfig> ParsePoolArgs(const std::vector<std::string>& args);

// The text printed for `kubicle-vmm --help`.
std::string UsageText();

}  // namespace kubicle::vmm
