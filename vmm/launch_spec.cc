#include "vmm/launch_spec.h"

#include <charconv>
#include <utility>

#include "common/flag_args.h"
#include "vmm/devices/virtio/mac_address.h"

namespace kubicle::vmm {
namespace {

Result<uint64_t> ParseUint(const std::string& flag, const std::string& text) {
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || text.empty())
    return Status::InvalidArgument(flag + ": '" + text + "' is not a non-negative integer");
  return v;
}

}  // namespace

// The option is the text after the last comma, so a path may hold commas
// when an option follows it (ToArgv always writes one).
Result<DiskConfig> ParseDiskFlag(const std::string& spec) {
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
  return d;
}

namespace {

// Splits "a,b,c" at commas; an empty piece is kept (and then refused).
std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t comma; (comma = s.find(',', start)) != std::string::npos; start = comma + 1)
    out.push_back(s.substr(start, comma - start));
  out.push_back(s.substr(start));
  return out;
}

// The rules of a NIC that hold however it was made (parsed, or built by a
// caller for ToArgv, which joins the keys with commas).
Status CheckNet(const NetFlags& n) {
  if (n.tap.empty()) return Status::InvalidArgument("--net: tap=NAME is required");
  if (!control::ValidInterfaceName(n.tap) || n.tap.find(',') != std::string::npos)
    return Status::InvalidArgument("--net: tap must be an interface name (1..15 bytes, "
                                   "no '/', ':', ',' or whitespace)");
  if (!n.netns.empty() && n.netns[0] != '/')
    return Status::InvalidArgument("--net: netns must be an absolute path");
  if (n.netns.find(',') != std::string::npos)
    return Status::InvalidArgument("--net: netns may not contain ','");
  if (!devices::virtio::ValidNicMac(n.mac))
    return Status::InvalidArgument("--net: mac=AA:BB:CC:DD:EE:FF is required (unicast, not zero)");
  return Status::Ok();
}

bool IsBooleanFlag(const std::string& f) {
  return f == "--json-log" || f == "--no-rng" || f == "--workspace-slot";
}

// Why `mode` does not take `flag` (Ok if it does).
Status ModeTakes(LaunchMode mode, const std::string& flag) {
  switch (mode) {
    case LaunchMode::kRun:
      if (flag == "--snapshot") return Status::InvalidArgument("--snapshot is for `kubicle-vmm restore`");
      break;
    case LaunchMode::kRestore:
      if (flag == "--kernel" || flag == "--initrd" || flag == "--mem" || flag == "--vcpus" ||
          flag == "--disk" || flag == "--cmdline" || flag == "--no-rng")
        return Status::InvalidArgument(flag + ": the machine's shape comes from the snapshot");
      break;
    case LaunchMode::kPool:
      if (flag == "--kernel" || flag == "--initrd" || flag == "--disk" || flag == "--cmdline" ||
          flag == "--no-rng" || flag == "--snapshot")
        return Status::InvalidArgument(flag + ": a pool VM gets its guest from the restore request");
      break;
  }
  return Status::Ok();
}

std::string NetFlagValue(const NetFlags& n) {
  std::string v = "tap=" + n.tap + ",mac=" + devices::virtio::FormatMac(n.mac);
  if (!n.netns.empty()) v += ",netns=" + n.netns;
  if (n.limits_given)
    v += ",rx-bps=" + std::to_string(n.rx_bps) + ",tx-bps=" + std::to_string(n.tx_bps) +
         ",rx-pps=" + std::to_string(n.rx_pps) + ",tx-pps=" + std::to_string(n.tx_pps);
  return v;
}

}  // namespace

const char* LaunchModeName(LaunchMode mode) {
  switch (mode) {
    case LaunchMode::kRun: return "run";
    case LaunchMode::kRestore: return "restore";
    case LaunchMode::kPool: return "pool";
  }
  return "run";
}

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

std::string FormatSize(uint64_t bytes) {
  static constexpr std::pair<int, char> kUnits[] = {{40, 'T'}, {30, 'G'}, {20, 'M'}, {10, 'K'}};
  if (bytes == 0) return "0";
  for (auto [shift, suffix] : kUnits)
    if (bytes % (1ull << shift) == 0) return std::to_string(bytes >> shift) + suffix;
  return std::to_string(bytes);
}

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
      n.tap = value;
    } else if (key == "netns") {
      if (value.empty()) return Status::InvalidArgument("--net: netns must be an absolute path");
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
  RETURN_IF_ERROR(CheckNet(n));
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

Status LaunchSpec::Check() const {
  switch (mode) {
    case LaunchMode::kRun:
      if (kernel_path.empty()) return Status::InvalidArgument("--kernel is required");
      if (!snapshot_path.empty()) return ModeTakes(mode, "--snapshot");
      break;
    case LaunchMode::kRestore:
      if (snapshot_path.empty()) return Status::InvalidArgument("--snapshot is required");
      break;
    case LaunchMode::kPool:
      if (control_path.empty())
        return Status::InvalidArgument("--control is required: restore requests come there");
      break;
  }
  if (vcpus < 1 || vcpus > kMaxVcpus)
    return Status::OutOfRange("--vcpus: must be 1.." + std::to_string(kMaxVcpus));
  if (disks.size() > kMaxDisks) return Status::OutOfRange("at most 8 --disk flags");
  if (!control::ValidCid(guest_cid))
    return Status::OutOfRange(control::CheckCid(guest_cid, "--cid").message());
  if (cmdline.size() >= 4096) return Status::OutOfRange("--cmdline: longer than 4095 bytes");
  if (serial_limits.rotated_files > kMaxSerialFiles)
    return Status::OutOfRange("--serial-files: at most " + std::to_string(kMaxSerialFiles));
  if (serial_limits.rate_bytes_per_sec != 0 && serial_limits.burst_bytes == 0)
    return Status::OutOfRange("--serial-burst: must be > 0 when --serial-rate is set");
  if (net) RETURN_IF_ERROR(CheckNet(*net));
  return Status::Ok();
}

std::vector<std::string> LaunchSpec::ToArgv() const {
  const LaunchSpec d;
  std::vector<std::string> a = {LaunchModeName(mode)};
  auto flag = [&a](const char* name, std::string value) {
    a.push_back(name);
    a.push_back(std::move(value));
  };
  const bool shaped = mode != LaunchMode::kRestore;
  if (kernel_path != d.kernel_path) flag("--kernel", kernel_path);
  if (initrd_path != d.initrd_path) flag("--initrd", initrd_path);
  if (cmdline != d.cmdline) flag("--cmdline", cmdline);
  if (shaped || mem_bytes != d.mem_bytes) flag("--mem", FormatSize(mem_bytes));
  if (shaped || vcpus != d.vcpus) flag("--vcpus", std::to_string(vcpus));
  for (const DiskConfig& disk : disks) flag("--disk", disk.path + (disk.read_only ? ",ro" : ",rw"));
  if (!rng) a.push_back("--no-rng");
  if (workspace_slot) a.push_back("--workspace-slot");
  if (layer_dir != d.layer_dir) flag("--layer-dir", layer_dir);
  if (snapshot_path != d.snapshot_path) flag("--snapshot", snapshot_path);
  if (vsock_uds != d.vsock_uds) flag("--vsock-uds", vsock_uds);
  if (guest_cid != d.guest_cid) flag("--cid", std::to_string(guest_cid));
  if (net) flag("--net", NetFlagValue(*net));
  if (control_path != d.control_path) flag("--control", control_path);
  if (vm_id != d.vm_id) flag("--id", vm_id);
  if (serial_path != d.serial_path) flag("--serial", serial_path);
  const devices::legacy::ConsoleLogLimits& l = serial_limits;
  if (l.max_file_bytes != d.serial_limits.max_file_bytes)
    flag("--serial-max-bytes", FormatSize(l.max_file_bytes));
  if (l.rotated_files != d.serial_limits.rotated_files)
    flag("--serial-files", std::to_string(l.rotated_files));
  if (l.rate_bytes_per_sec != d.serial_limits.rate_bytes_per_sec)
    flag("--serial-rate", FormatSize(l.rate_bytes_per_sec));
  if (l.burst_bytes != d.serial_limits.burst_bytes) flag("--serial-burst", FormatSize(l.burst_bytes));
  if (seccomp != d.seccomp) flag("--seccomp", SeccompModeName(seccomp));
  if (log_level != d.log_level) flag("--log-level", log_level);
  if (log_json) a.push_back("--json-log");
  return a;
}

Result<LaunchSpec> LaunchSpec::Parse(const std::vector<std::string>& argv) {
  if (argv.empty()) return Status::InvalidArgument("no command: run, restore or pool (see --help)");
  LaunchSpec s;
  if (argv[0] == "run") s.mode = LaunchMode::kRun;
  else if (argv[0] == "restore") s.mode = LaunchMode::kRestore;
  else if (argv[0] == "pool") s.mode = LaunchMode::kPool;
  else return Status::InvalidArgument("unknown command '" + argv[0] + "' (see --help)");
  // --flag=value and --flag value alike; a value (a --cmdline) may itself
  // start with "--".
  const std::vector<std::string> args =
      SplitFlagValues(std::vector<std::string>(argv.begin() + 1, argv.end()), IsBooleanFlag);
  // A flag the mode does not take is refused before any value is read, so
  // the error names the real mistake (a restore given a shape).
  for (size_t i = 0; i < args.size(); i += IsBooleanFlag(args[i]) ? 1 : 2)
    RETURN_IF_ERROR(ModeTakes(s.mode, args[i]));
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    if (flag == "--json-log") { s.log_json = true; continue; }
    if (flag == "--no-rng") { s.rng = false; continue; }
    if (flag == "--workspace-slot") { s.workspace_slot = true; continue; }
    if (i + 1 >= args.size()) return Status::InvalidArgument(flag + " needs a value (see --help)");
    const std::string& v = args[++i];
    if (flag == "--kernel") s.kernel_path = v;
    else if (flag == "--initrd") s.initrd_path = v;
    else if (flag == "--cmdline") s.cmdline = v;
    else if (flag == "--mem") {
      auto r = ParseSize(v);
      if (!r.ok()) return r.status().WithContext("--mem");
      s.mem_bytes = *r;
    } else if (flag == "--vcpus") {
      ASSIGN_OR_RETURN(uint64_t n, ParseUint(flag, v));
      s.vcpus = n > kMaxVcpus ? kMaxVcpus + 1 : static_cast<int>(n);
    } else if (flag == "--disk") {
      ASSIGN_OR_RETURN(DiskConfig disk, ParseDiskFlag(v));
      s.disks.push_back(std::move(disk));
    }
    else if (flag == "--vsock-uds") s.vsock_uds = v;
    else if (flag == "--net") {
      if (s.net) return Status::InvalidArgument("--net: at most one network device");
      ASSIGN_OR_RETURN(s.net, ParseNetFlag(v));
    }
    else if (flag == "--cid") { ASSIGN_OR_RETURN(s.guest_cid, ParseUint(flag, v)); }
    else if (flag == "--serial") s.serial_path = v;
    else if (flag == "--serial-max-bytes" || flag == "--serial-rate" || flag == "--serial-burst") {
      auto r = ParseSize(v);
      if (!r.ok()) return r.status().WithContext(flag);
      devices::legacy::ConsoleLogLimits& l = s.serial_limits;
      (flag == "--serial-max-bytes" ? l.max_file_bytes
       : flag == "--serial-rate"    ? l.rate_bytes_per_sec
                                    : l.burst_bytes) = *r;
    } else if (flag == "--serial-files") {
      ASSIGN_OR_RETURN(uint64_t n, ParseUint(flag, v));
      if (n > kMaxSerialFiles)
        return Status::OutOfRange("--serial-files: at most " + std::to_string(kMaxSerialFiles));
      s.serial_limits.rotated_files = static_cast<uint32_t>(n);
    }
    else if (flag == "--control") s.control_path = v;
    else if (flag == "--id") s.vm_id = v;
    else if (flag == "--log-level") s.log_level = v;
    else if (flag == "--seccomp") { ASSIGN_OR_RETURN(s.seccomp, ParseSeccompMode(v)); }
    else if (flag == "--snapshot") s.snapshot_path = v;
    else if (flag == "--layer-dir") s.layer_dir = v;
    else return Status::InvalidArgument("unknown flag '" + flag + "' (see --help)");
  }
  RETURN_IF_ERROR(s.Check());
  return s;
}

}  // namespace kubicle::vmm
