#include "noderuntime/daemon/serve_flags.h"

#include <cctype>
#include <charconv>

namespace kubicle::noderuntime::daemon {

const char kServeUsage[] = R"(usage: kubicle-node serve --state-dir DIR --vmm PATH [flags]

Runs the node daemon: bakes templates, runs sandboxes in kubicle-vmm
processes, serves the HTTP API (docs/node.md).

  --state-dir DIR        where templates, sandboxes and sockets live (required)
  --vmm PATH             the kubicle-vmm binary (required)
  --listen HOST:PORT     API address (default 127.0.0.1:7070; port 0 picks one,
                         printed on stdout as "listening on http://HOST:PORT")
  --token-file FILE      the admin bearer token (default DIR/admin-token);
                         created with mode 0600 and a random token if absent
  --capacity-mem SIZE    guest memory the node may hand out: 20G, 512M
                         (default: 3/4 of the host's RAM)
  --capacity-vcpus N     vCPUs the node may hand out (default: 16 per host
                         CPU, at least 64: idle VMs cost no CPU)
  --pool-size N          idle warm-pool VMs kept per template shape (default 2)
  --no-cgroups           do not put VMs in per-VM cgroups
  --stop-vms-on-exit     on SIGTERM/SIGINT delete every sandbox too (for demos
                         and CI: nothing is left running)
  --log-json             JSON log lines on stderr
  --log-level LEVEL      debug, info, warn, error (default info)
  --help                 this text

On SIGTERM or SIGINT the daemon stops serving and exits 0, leaving sandbox
VMs running (unless --stop-vms-on-exit): the next start on the same
--state-dir re-adopts them.
Exit codes: 0 clean stop, 1 usage, 2 setup failed (state dir, listen, token).
)";

namespace {

Result<uint64_t> ParseUint(const std::string& flag, const std::string& text, uint64_t max) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size() || v > max) {
    return Status::InvalidArgument(flag + ": \"" + text + "\" is not a number in [0, " +
                                   std::to_string(max) + "]");
  }
  return v;
}

}  // namespace

Result<uint64_t> ParseMemMib(const std::string& text) {
  if (text.empty()) return Status::InvalidArgument("--capacity-mem: empty size");
  std::string digits = text;
  if (digits.size() > 1 && (digits.back() == 'i' || digits.back() == 'I')) digits.pop_back();  // "20Gi"
  uint64_t mul_kib = 1024;  // plain numbers are MiB
  char suffix = static_cast<char>(std::toupper(static_cast<unsigned char>(digits.back())));
  if (std::isalpha(static_cast<unsigned char>(suffix))) {
    digits.pop_back();
    switch (suffix) {
      case 'K': mul_kib = 1; break;
      case 'M': mul_kib = 1024; break;
      case 'G': mul_kib = 1024 * 1024; break;
      case 'T': mul_kib = 1024ull * 1024 * 1024; break;
      default: return Status::InvalidArgument("--capacity-mem: unknown unit in \"" + text + "\"");
    }
  }
  ASSIGN_OR_RETURN(uint64_t n, ParseUint("--capacity-mem", digits, 1ull << 40));
  uint64_t mib = n * mul_kib / 1024;
  if (mib == 0) return Status::InvalidArgument("--capacity-mem: \"" + text + "\" is under 1 MiB");
  return mib;
}

Status ParseListen(const std::string& text, std::string* host, int* port) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos) {
    return Status::InvalidArgument("--listen: \"" + text + "\" is not HOST:PORT");
  }
  std::string h = text.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h.empty()) h = "127.0.0.1";
  auto p = ParseUint("--listen", text.substr(colon + 1), 65535);
  if (!p.ok()) return p.status();
  *host = h;
  *port = static_cast<int>(*p);
  return Status::Ok();
}

Result<ServeFlags> ParseServeFlags(const std::vector<std::string>& args) {
  ServeFlags f;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> Result<std::string> {
      if (i + 1 >= args.size()) return Status::InvalidArgument(a + " needs a value");
      return args[++i];
    };
    if (a == "--help" || a == "-h") {
      f.help = true;
      return f;
    } else if (a == "--no-cgroups") {
      f.use_cgroups = false;
    } else if (a == "--stop-vms-on-exit") {
      f.stop_vms_on_exit = true;
    } else if (a == "--log-json") {
      f.log_json = true;
    } else if (a == "--state-dir") {
      ASSIGN_OR_RETURN(f.state_dir, value());
    } else if (a == "--token-file") {
      ASSIGN_OR_RETURN(f.token_file, value());
    } else if (a == "--vmm") {
      ASSIGN_OR_RETURN(f.vmm, value());
    } else if (a == "--log-level") {
      ASSIGN_OR_RETURN(f.log_level, value());
    } else if (a == "--listen") {
      ASSIGN_OR_RETURN(std::string v, value());
      RETURN_IF_ERROR(ParseListen(v, &f.listen_host, &f.listen_port));
    } else if (a == "--capacity-mem") {
      ASSIGN_OR_RETURN(std::string v, value());
      ASSIGN_OR_RETURN(f.capacity_mem_mib, ParseMemMib(v));
    } else if (a == "--capacity-vcpus") {
      ASSIGN_OR_RETURN(std::string v, value());
      ASSIGN_OR_RETURN(uint64_t n, ParseUint(a, v, 1 << 20));
      f.capacity_vcpus = static_cast<uint32_t>(n);
    } else if (a == "--pool-size") {
      ASSIGN_OR_RETURN(std::string v, value());
      ASSIGN_OR_RETURN(uint64_t n, ParseUint(a, v, 1024));
      f.pool_size = static_cast<uint32_t>(n);
    } else {
      return Status::InvalidArgument("unknown flag \"" + a + "\"");
    }
  }
  if (f.state_dir.empty()) return Status::InvalidArgument("--state-dir is required");
  if (f.vmm.empty()) return Status::InvalidArgument("--vmm is required");
  if (f.token_file.empty()) f.token_file = f.state_dir + "/admin-token";
  if (f.log_level != "debug" && f.log_level != "info" && f.log_level != "warn" &&
      f.log_level != "error") {
    return Status::InvalidArgument("--log-level: \"" + f.log_level + "\" is not debug, info, warn or error");
  }
  return f;
}

}  // namespace kubicle::noderuntime::daemon
