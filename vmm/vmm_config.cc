#include "vmm/vmm_config.h"

#include <sys/stat.h>

#include <charconv>

#include "common/flag_args.h"
#include "vmm/arch/x86_64/layout.h"
#include "vmm/control_protocol.h"
#include "vmm/devices/virtio/mac_address.h"

namespace kubicle::vmm {
namespace {

bool IsReadableFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

Result<uint64_t> ParseUint(const std::string& flag, const std::string& text) {
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || text.empty())
    return Status::InvalidArgument(flag + ": '" + text + "' is not a non-negative integer");
  return v;
}

Status ParseDisk(const std::string& spec, VmmConfig* cfg) {
  DiskConfig d;
  d.path = spec;
  auto comma = spec.rfind(',');
  if (comma != std::string::npos) {
    std::string opt = spec.substr(comma + 1);
    if (opt == "ro") {
      d.read_only = true;
    } else if (opt != "rw") {
      return Status::InvalidArgument("--disk: unknown option '" + opt + "' (use ,ro or ,rw)");
    }
    d.path = spec.substr(0, comma);
  }
  if (!IsReadableFile(d.path)) return Status::NotFound("--disk: no such image file '" + d.path + "'");
  cfg->disks.push_back(d);
  return Status::Ok();
}

// Splits "a,b,c" at commas; an empty piece is kept (and then refused).
std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t comma; (comma = s.find(',', start)) != std::string::npos; start = comma + 1)
    out.push_back(s.substr(start, comma - start));
  out.push_back(s.substr(start));
  return out;
}

}  // namespace

Result<NetFlags> ParseNetFlag(const std::string& spec) {
  NetFlags n;
  std::vector<std::string> seen;
  bool have_mac = false;
  for (const std::string& item : SplitCommas(spec)) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      return Status::InvalidArgument("--net: '" + item + "' is not key=value (see --help)");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    for (const std::string& k : seen)
      if (k == key) return Status::InvalidArgument("--net: " + key + " given twice");
    seen.push_back(key);
    if (key == "tap") {
      if (!control::ValidInterfaceName(value))
        return Status::InvalidArgument("--net: tap must be an interface name (1..15 bytes, "
                                       "no '/', ':' or whitespace)");
      n.tap = value;
    } else if (key == "netns") {
      if (value.empty() || value[0] != '/')
        return Status::InvalidArgument("--net: netns must be an absolute path");
      n.netns = value;
    } else if (key == "mac") {
      auto mac = devices::virtio::ParseMac(value);
      if (!mac.ok()) return mac.status().WithContext("--net");
      n.mac = *mac;
      have_mac = true;
    } else if (key == "rx-bps" || key == "tx-bps" || key == "rx-pps" || key == "tx-pps") {
      auto v = ParseSize(value);
      if (!v.ok()) return v.status().WithContext("--net " + key);
      (key == "rx-bps" ? n.rx_bps : key == "tx-bps" ? n.tx_bps : key == "rx-pps" ? n.rx_pps
                                                                                 : n.tx_pps) = *v;
      n.limits_given = true;
    } else {
      return Status::InvalidArgument("--net: unknown key '" + key +
                                     "' (tap, mac, netns, rx-bps, tx-bps, rx-pps, tx-pps)");
    }
  }
  if (n.tap.empty()) return Status::InvalidArgument("--net: tap=NAME is required");
  if (!have_mac) return Status::InvalidArgument("--net: mac=AA:BB:CC:DD:EE:FF is required");
  return n;
}

Result<NetFlags> NetFlagsFor(const control::NetAttachment& attachment,
                             const std::optional<NetFlags>& current) {
  NetFlags n = current.value_or(NetFlags{});
  n.tap = attachment.tap;
  n.netns = attachment.netns;
  ASSIGN_OR_RETURN(n.mac, devices::virtio::ParseMac(attachment.mac));
  n.limits_given = false;
  return n;
}

namespace {

Status Validate(const VmmConfig& cfg) {
  if (cfg.kernel_path.empty()) return Status::InvalidArgument("--kernel is required");
  if (!IsReadableFile(cfg.kernel_path))
    return Status::NotFound("--kernel: no such file '" + cfg.kernel_path + "'");
  if (!cfg.initrd_path.empty() && !IsReadableFile(cfg.initrd_path))
    return Status::NotFound("--initrd: no such file '" + cfg.initrd_path + "'");
  RETURN_IF_ERROR(arch::ValidateMemorySize(cfg.mem_bytes).WithContext("--mem"));
  if (cfg.vcpus < 1 || cfg.vcpus > kMaxVcpus)
    return Status::OutOfRange("--vcpus: must be 1.." + std::to_string(kMaxVcpus));
  if (cfg.disks.size() > kMaxDisks) return Status::OutOfRange("at most 8 --disk flags");
  if (!control::ValidCid(cfg.guest_cid))
    return Status::OutOfRange(control::CheckCid(cfg.guest_cid, "--cid").message());
  if (cfg.cmdline.size() >= 4096) return Status::OutOfRange("--cmdline: longer than 4095 bytes");
  if (cfg.serial_limits.rate_bytes_per_sec != 0 && cfg.serial_limits.burst_bytes == 0)
    return Status::OutOfRange("--serial-burst: must be > 0 when --serial-rate is set");
  if (!cfg.layer_dir.empty() && !IsDirectory(cfg.layer_dir))
    return Status::NotFound("--layer-dir: no such directory '" + cfg.layer_dir + "'");
  return Status::Ok();
}

// --flag=value and --flag value alike; a value (a --cmdline) may itself
// start with "--".
std::vector<std::string> SplitFlags(const std::vector<std::string>& args) {
  return SplitFlagValues(args, [](const std::string& f) {
    return f == "--json-log" || f == "--no-rng" || f == "--workspace-slot";
  });
}

}  // namespace

Result<uint64_t> ParseSize(const std::string& text) {
  if (text.empty()) return Status::InvalidArgument("empty size");
  uint64_t shift = 0;
  std::string digits = text;
  switch (text.back()) {
    case 'K': case 'k': shift = 10; break;
    case 'M': case 'm': shift = 20; break;
    case 'G': case 'g': shift = 30; break;
    case 'T': case 't': shift = 40; break;
    default: break;
  }
  if (shift) digits.pop_back();
  ASSIGN_OR_RETURN(uint64_t v, ParseUint("size", digits));
  if (shift && v > (~0ull >> shift)) return Status::OutOfRange("size '" + text + "' overflows");
  return v << shift;
}

Result<VmmConfig> ParseRunArgs(const std::vector<std::string>& raw_args) {
  const std::vector<std::string> args = SplitFlags(raw_args);
  VmmConfig cfg;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    if (flag == "--json-log") { cfg.log_json = true; continue; }
    if (flag == "--no-rng") { cfg.rng = false; continue; }
    if (flag == "--workspace-slot") { cfg.workspace_slot = true; continue; }
    if (i + 1 >= args.size()) return Status::InvalidArgument(flag + " needs a value (see --help)");
    const std::string& v = args[++i];
    if (flag == "--kernel") cfg.kernel_path = v;
    else if (flag == "--initrd") cfg.initrd_path = v;
    else if (flag == "--cmdline") cfg.cmdline = v;
    else if (flag == "--mem") {
      auto r = ParseSize(v);
      if (!r.ok()) return r.status().WithContext("--mem");
      cfg.mem_bytes = *r;
    } else if (flag == "--vcpus") {
      ASSIGN_OR_RETURN(uint64_t n, ParseUint(flag, v));
      cfg.vcpus = n > kMaxVcpus ? kMaxVcpus + 1 : static_cast<int>(n);
    } else if (flag == "--disk") RETURN_IF_ERROR(ParseDisk(v, &cfg));
    else if (flag == "--vsock-uds") cfg.vsock_uds = v;
    else if (flag == "--net") {
      if (cfg.net) return Status::InvalidArgument("--net: at most one network device");
      ASSIGN_OR_RETURN(cfg.net, ParseNetFlag(v));
    }
    else if (flag == "--cid") { ASSIGN_OR_RETURN(cfg.guest_cid, ParseUint(flag, v)); }
    else if (flag == "--serial") cfg.serial_path = v;
    else if (flag == "--serial-max-bytes" || flag == "--serial-rate" || flag == "--serial-burst") {
      auto r = ParseSize(v);
      if (!r.ok()) return r.status().WithContext(flag);
      devices::legacy::ConsoleLogLimits& l = cfg.serial_limits;
      (flag == "--serial-max-bytes" ? l.max_file_bytes
       : flag == "--serial-rate"    ? l.rate_bytes_per_sec
                                    : l.burst_bytes) = *r;
    } else if (flag == "--serial-files") {
      ASSIGN_OR_RETURN(uint64_t n, ParseUint(flag, v));
      if (n > kMaxSerialFiles)
        return Status::OutOfRange("--serial-files: at most " + std::to_string(kMaxSerialFiles));
      cfg.serial_limits.rotated_files = static_cast<uint32_t>(n);
    }
    else if (flag == "--control") cfg.control_path = v;
    else if (flag == "--id") cfg.vm_id = v;
    else if (flag == "--log-level") cfg.log_level = v;
    else if (flag == "--seccomp") { ASSIGN_OR_RETURN(cfg.seccomp, ParseSeccompMode(v)); }
    else if (flag == "--snapshot") cfg.snapshot_path = v;
    else if (flag == "--layer-dir") cfg.layer_dir = v;
    else return Status::InvalidArgument("unknown flag '" + flag + "' (see --help)");
  }
  if (!cfg.snapshot_path.empty())
    return Status::InvalidArgument("--snapshot is for `kubicle-vmm restore`");
  RETURN_IF_ERROR(Validate(cfg));
  return cfg;
}

Result<VmmConfig> ParseRestoreArgs(const std::vector<std::string>& raw_args) {
  const std::vector<std::string> args = SplitFlags(raw_args);
  for (const std::string& a : args) {
    if (a == "--kernel" || a == "--initrd" || a == "--mem" || a == "--vcpus" || a == "--disk" ||
        a == "--cmdline" || a == "--no-rng")
      return Status::InvalidArgument(a + ": the machine's shape comes from the snapshot");
  }
  std::vector<std::string> run_args;
  std::string snapshot;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--snapshot") {
      if (i + 1 >= args.size()) return Status::InvalidArgument("--snapshot needs a value");
      snapshot = args[++i];
      continue;
    }
    run_args.push_back(args[i]);
  }
  if (snapshot.empty()) return Status::InvalidArgument("--snapshot is required");
  // Reuse the run parser for the shared flags; the kernel check does not apply.
  run_args.push_back("--kernel");
  run_args.push_back("/proc/self/exe");
  ASSIGN_OR_RETURN(VmmConfig cfg, ParseRunArgs(run_args));
  cfg.kernel_path.clear();
  cfg.snapshot_path = snapshot;
  return cfg;
}

Result<VmmConfig> ParsePoolArgs(const std::vector<std::string>& raw_args) {
  const std::vector<std::string> args = SplitFlags(raw_args);
  for (const std::string& a : args) {
    if (a == "--kernel" || a == "--initrd" || a == "--disk" || a == "--cmdline" ||
        a == "--no-rng" || a == "--snapshot")
      return Status::InvalidArgument(a + ": a pool VM gets its guest from the restore request");
  }
  std::vector<std::string> run_args = args;
  run_args.push_back("--kernel");
  run_args.push_back("/proc/self/exe");
  ASSIGN_OR_RETURN(VmmConfig cfg, ParseRunArgs(run_args));
  cfg.kernel_path.clear();
  if (cfg.control_path.empty())
    return Status::InvalidArgument("--control is required: restore requests come there");
  return cfg;
}

std::string UsageText() {
  return R"(kubicle-vmm: one KVM microVM per process.

Usage:
  kubicle-vmm run --kernel PATH [options]
  kubicle-vmm restore --snapshot DIR [--vsock-uds P] [--cid N] [--net ...] [--control C]
                      [--serial S] [--serial-* ...] [--layer-dir D]
  kubicle-vmm pool --mem SIZE [--vcpus N] --control C [--vsock-uds P] [--cid N] [--serial S]
                   [--serial-* ...] [--layer-dir D]
                       (warm pool: waits for {"cmd":"restore","snapshot":DIR,...})
  kubicle-vmm --help
Every flag takes its value as --flag VALUE or --flag=VALUE.

Options for run:
  --kernel PATH        guest kernel: ELF vmlinux (64-bit entry or PVH note) or bzImage
  --initrd PATH        initial ramdisk
  --cmdline TEXT       kernel command line (virtio-mmio devices are appended)
  --mem SIZE           guest memory, e.g. 256M, 2G (16M..1T; default 256M)
  --vcpus N            virtual CPUs (1..64; default 1)
  --disk PATH[,ro|,rw] raw disk image as virtio-blk (repeatable, up to 8)
  --layer-dir DIR      copy-on-write disks: each writable --disk image becomes a
                       read-only base and the VM writes to an overlay file in
                       DIR (needed to snapshot or fork a VM with writable disks;
                       restore: where the restored VM's overlays go)
  --vsock-uds PATH     virtio-vsock; host side is a Unix socket at PATH
                       (connect, send "CONNECT <port>\n", read "OK <port>\n";
                       guest connections to port P go to PATH_P)
  --cid N              guest vsock CID (3..4294967294; default 3)
  --net tap=NAME,mac=AA:BB:CC:DD:EE:FF[,netns=PATH][,rx-bps=N,tx-bps=N,rx-pps=N,tx-pps=N]
                       virtio-net on the existing TAP NAME (no offloads), in
                       the network namespace file PATH if given; rates
                       per second (K/M/G allowed; 0 or absent: unlimited);
                       restore: the clone's TAP and MAC (rates kept if absent)
  --no-rng             no virtio-rng device
  --workspace-slot     an empty virtio-blk device (serial "workspace") whose
                       backend a restore request's "workspace" sets
  --serial PATH        serial console output file ("none" to discard; default stdout)
  --serial-max-bytes SIZE  rotate the serial file at SIZE (default 1M; 0: never)
  --serial-files N     rotated serial files kept, PATH.1..PATH.N (0..16; default 1;
                       0: output past the cap is dropped after a marker line)
  --serial-rate SIZE   console bytes per second kept (default 64K; 0: no limit);
                       beyond it output is dropped between marker lines
  --serial-burst SIZE  bytes the rate limit lets through at once (default 256K)
  --control PATH       control socket (line-delimited JSON: status, pause,
                       resume, snapshot {"dir","resume"}, fork {"children"},
                       restore (pool), shutdown; docs/vmm.md)
  --snapshot DIR       (restore only) the snapshot directory to resume from
  --id NAME            VM id used in logs
  --log-level LEVEL    debug, info, warn, error
  --json-log           logs as JSON lines on stderr
  --seccomp MODE       enforce (default): a system call outside the VMM's
                       filter ends it with exit code 5; log: such calls run
                       and the kernel logs them; off: no filter

Exit codes:
  0  the guest shut down (reset, power-off or shutdown command)
  1  usage error (bad flag, missing file, value out of range)
  2  the VM could not be built (KVM, kernel image, devices)
  3  the guest crashed (triple fault, KVM internal error)
  4  kubicle-vmm internal error
  5  a system call outside the seccomp filter (a bug, or a compromised VMM)
)";
}

}  // namespace kubicle::vmm
