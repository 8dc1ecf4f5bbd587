// The sandbox calls beyond create/exec/read/write: its console log and what
// its VM uses (sandbox_service.h, ConsoleRead and SandboxStats), read on the
// host, the guest's file stat, list and remove through its agent, and TCP
// connections to the guest's ports inside its network namespace.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file_io.h"
#include "common/unique_fd.h"
#include "noderuntime/manager/sandbox_manager.h"
#include "noderuntime/manager/managed_sandbox.h"
#include "noderuntime/network/guest_network.h"
#include "noderuntime/network/netns_connect.h"
#include "noderuntime/vmmhost/vm_stats.h"

namespace kubicle::noderuntime {

Result<ConsoleRead> SandboxManager::ReadConsole(const std::string& id, uint64_t offset,
                                                size_t max_bytes) {
  ASSIGN_OR_RETURN(auto sb, Find(id));
  std::string path;
  ConsoleRead r;
  {
    std::lock_guard l(sb->mu);
    path = sb->dir + "/serial.log";
    r.running = sb->rec.info.state == SandboxState::kRunning && !sb->exited;
  }
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) return r;  // nothing written yet
    return Status::FromErrno("open " + path);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno("fstat " + path);
  r.size = static_cast<uint64_t>(st.st_size);
  // kubicle-vmm rotated the log (path -> path.1) below the reader: start over.
  r.offset = offset > r.size ? 0 : offset;
  const size_t n = static_cast<size_t>(std::min<uint64_t>(max_bytes, r.size - r.offset));
  r.data.resize(n);
  // The file behind fd only grows (a rotation renames it), so all n bytes
  // are there.
  const iovec into{r.data.data(), n};
  RETURN_IF_ERROR(
      TransferAll(fd.get(), r.offset, {&into, 1}, /*write=*/false, "it shrank while being read")
          .WithContext("read " + path));
  return r;
}

Result<SandboxStats> SandboxManager::GetSandboxStats(const std::string& id) {
  ASSIGN_OR_RETURN(auto sb, Find(id));
  pid_t pid = 0;
  SandboxStats base;
  {
    std::lock_guard l(sb->mu);
    const SandboxInfo& info = sb->rec.info;
    if (info.state != SandboxState::kRunning || sb->exited) {
      return Status::FailedPrecondition("sandbox " + id + " is " + SandboxStateName(info.state) +
                                        (info.message.empty() ? "" : ": " + info.message));
    }
    pid = info.vmm_pid;
    base.mem_mib = info.mem_mib;
    base.vcpus = info.vcpus;
  }
  ASSIGN_OR_RETURN(SandboxStats s, ReadVmStats(cgroups_, id, pid));
  s.mem_mib = base.mem_mib;
  s.vcpus = base.vcpus;
  return s;
}

namespace {
// One file call through the agent; the guest answers these at once.
constexpr std::chrono::seconds kFileOpTimeout{30};
}  // namespace

Result<guest::protocol::StatReply> SandboxManager::StatFile(const std::string& id,
                                                            const std::string& path) {
  ASSIGN_OR_RETURN(auto sb, Find(id));
  Status why;
  auto agent = AgentOf(*sb, &why);
  if (!agent) return why;
  return agent->Stat(path, guest::client::DeadlineIn(kFileOpTimeout));
}

Result<std::vector<guest::protocol::DirEntry>> SandboxManager::ListFiles(const std::string& id,
                                                                         const std::string& path) {
  ASSIGN_OR_RETURN(auto sb, Find(id));
  Status why;
  auto agent = AgentOf(*sb, &why);
  if (!agent) return why;
  return agent->List(path, guest::client::DeadlineIn(kFileOpTimeout));
}

Status SandboxManager::RemoveFile(const std::string& id, const std::string& path, bool recursive) {
  ASSIGN_OR_RETURN(auto sb, Find(id));
  Status why;
  auto agent = AgentOf(*sb, &why);
  if (!agent) return why;
  return agent->Remove(path, recursive, guest::client::DeadlineIn(kFileOpTimeout));
}

Result<UniqueFd> SandboxManager::ConnectGuestPort(const std::string& id, uint16_t port) {
  ASSIGN_OR_RETURN(auto sb, Find(id));
  std::string netns;
  {
    std::lock_guard l(sb->mu);
    const SandboxInfo& info = sb->rec.info;
    if (info.state != SandboxState::kRunning || sb->exited) {
      return Status::FailedPrecondition("sandbox " + id + " is " + SandboxStateName(info.state));
    }
    netns = SandboxNetworks::NetnsPathOf(*sb);
  }
  if (netns.empty()) {
    return Status::FailedPrecondition("sandbox " + id +
                                      " has no network: its guest ports cannot be reached");
  }
  // Off the sandbox's lock: a guest that does not answer holds this
  // request for up to the timeout, nobody else.
  return network::ConnectInNetns(netns, network::kGuestAddress, port,
                                 network::kGuestConnectTimeout);
}

}  // namespace kubicle::noderuntime
