#include "vmm/vmm_config.h"

#include <sys/stat.h>

#include "vmm/arch/x86_64/layout.h"

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

Result<LaunchSpec> ParseMode(const char* mode, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {mode};
  argv.insert(argv.end(), args.begin(), args.end());
  return ParseCommandLine(argv);
}

}  // namespace

Status CheckOnHost(const LaunchSpec& spec) {
  if (!spec.kernel_path.empty() && !IsReadableFile(spec.kernel_path))
    return Status::NotFound("--kernel: no such file '" + spec.kernel_path + "'");
  if (!spec.initrd_path.empty() && !IsReadableFile(spec.initrd_path))
    return Status::NotFound("--initrd: no such file '" + spec.initrd_path + "'");
  for (const DiskConfig& d : spec.disks)
    if (!IsReadableFile(d.path)) return Status::NotFound("--disk: no such image file '" + d.path + "'");
  if (spec.mode != LaunchMode::kRestore)
    RETURN_IF_ERROR(arch::ValidateMemorySize(spec.mem_bytes).WithContext("--mem"));
  if (!spec.layer_dir.empty() && !IsDirectory(spec.layer_dir))
    return Status::NotFound("--layer-dir: no such directory '" + spec.layer_dir + "'");
  return Status::Ok();
}

Result<LaunchSpec> ParseCommandLine(const std::vector<std::string>& argv) {
  ASSIGN_OR_RETURN(LaunchSpec spec, LaunchSpec::Parse(argv));
  RETURN_IF_ERROR(CheckOnHost(spec));
  return spec;
}

Result<LaunchSpec> ParseRunArgs(const std::vector<std::string>& args) { return ParseMode("run", args); }

Result<LaunchSpec> ParseRestoreArgs(const std::vector<std::string>& args) {
  return ParseMode("restore", args);
}

Result<LaunchSpec> ParsePoolArgs(const std::vector<std::string>& args) { return ParseMode("pool", args); }

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
