// kubicle-node's command line: `kubicle-node serve --state-dir D ...`.
// Parsing is a pure function so every flag and error is unit-tested.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace kubicle::noderuntime::daemon {

struct ServeFlags {
  std::string state_dir;
  std::string listen_host = "127.0.0.1";
  int listen_port = 7070;          // 0: pick a free port (printed on stdout)
  std::string token_file;          // created (0600, random) when absent
  std::string vmm;                 // path to kubicle-vmm
  uint64_t capacity_mem_mib = 0;   // 0: 3/4 of the host's RAM
  uint32_t capacity_vcpus = 0;     // 0: 16 per host CPU, at least 64
  uint32_t pool_size = 2;
  bool use_cgroups = true;
  bool stop_vms_on_exit = false;   // SIGTERM deletes every sandbox (demos, CI)
  bool log_json = false;
  std::string log_level = "info";
  bool help = false;
};

// Parses the arguments after "serve". InvalidArgument names the bad flag.
Result<ServeFlags> ParseServeFlags(const std::vector<std::string>& args);
// "20G", "512M", "1T", "1048576K" or plain MiB ("512") to MiB.
Result<uint64_t> ParseMemMib(const std::string& text);
// "127.0.0.1:7070", ":7070" (127.0.0.1) or "[::1]:7070".
Status ParseListen(const std::string& text, std::string* host, int* port);

extern const char kServeUsage[];

}  // namespace kubicle::noderuntime::daemon
