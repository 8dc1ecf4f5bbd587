#include "vmm/testing/vm_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "vmm/launch_spec.h"

extern char** environ;

namespace kubicle::vmm::testing {

using namespace std::chrono_literals;

Result<std::unique_ptr<VmProcess>> VmProcess::Start(const VmProcessOptions& o) {
  std::unique_ptr<VmProcess> vm(new VmProcess());
  char tmpl[] = "/tmp/kubicle-vm-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return Status::FromErrno("mkdtemp");
  vm->dir_ = tmpl;

  // The argv is the node's: a LaunchSpec written by ToArgv, then the
  // caller's extra flags verbatim (some tests give flags the VMM refuses).
  LaunchSpec spec;
  spec.mode = o.pool ? LaunchMode::kPool
                     : (o.restore_from.empty() ? LaunchMode::kRun : LaunchMode::kRestore);
  if (spec.mode == LaunchMode::kRestore) {
    spec.snapshot_path = o.restore_from;
  } else {
    ASSIGN_OR_RETURN(spec.mem_bytes, ParseSize(o.mem));
    spec.vcpus = o.vcpus;
  }
  if (spec.mode == LaunchMode::kRun) {
    spec.kernel_path = o.kernel;
    spec.cmdline = o.cmdline;
  }
  spec.guest_cid = o.cid;
  spec.serial_path = vm->serial_path();
  spec.vsock_uds = vm->vsock_path();
  spec.control_path = vm->control_path();
  spec.vm_id = std::filesystem::path(vm->dir_).filename().string();
  for (const std::string& d : o.disks) {
    ASSIGN_OR_RETURN(DiskConfig disk, ParseDiskFlag(d));
    spec.disks.push_back(std::move(disk));
  }
  std::vector<std::string> args = spec.ToArgv();
  args.insert(args.begin(), o.vmm_binary);
  args.insert(args.end(), o.extra_args.begin(), o.extra_args.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  std::string log = vm->dir_ + "/vmm.log";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  int rc = ::posix_spawn(&vm->pid_, o.vmm_binary.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return Status::FromErrno("spawn " + o.vmm_binary, rc);
  return vm;
}

VmProcess::~VmProcess() {
  Kill();
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
}

std::unique_ptr<VmProcess> VmProcess::Attach(pid_t pid, const std::string& dir) {
  std::unique_ptr<VmProcess> vm(new VmProcess());
  vm->pid_ = pid;
  vm->dir_ = dir;
  vm->attached_ = true;
  return vm;
}

bool VmProcess::Reap(bool block) {
  if (pid_ < 0 || exit_code_) return true;
  if (attached_) {
    // Not our child: its own parent reaps it; "gone" is all we can know.
    if (::kill(pid_, 0) == 0) return false;
    exit_code_ = -1;
    return true;
  }
  int status = 0;
  pid_t r = ::waitpid(pid_, &status, block ? 0 : WNOHANG);
  if (r != pid_) return false;
  exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return true;
}

void VmProcess::Kill() {
  if (pid_ < 0 || Reap(false)) return;
  ::kill(pid_, SIGKILL);
  // Bounded: a process stuck in the kernel (uninterruptible sleep) must not
  // hang the test forever; say so and leave it to the caller's harness.
  for (int i = 0; i < 30000 && !Reap(false); ++i) std::this_thread::sleep_for(1ms);
  if (!exit_code_) {
    std::fprintf(stderr, "VmProcess: pid %d survived SIGKILL for 30 s (stuck in the kernel?)\n",
                 pid_);
  }
}

namespace {
std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

std::string VmProcess::SerialOutput() const { return ReadWholeFile(serial_path()); }
std::string VmProcess::VmmLog() const { return ReadWholeFile(dir_ + "/vmm.log"); }

Status VmProcess::WaitForSerial(const std::string& needle, std::chrono::milliseconds timeout) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (SerialOutput().find(needle) != std::string::npos) return Status::Ok();
    if (Reap(false))
      return Status::Unavailable("kubicle-vmm exited with " + std::to_string(*exit_code_) +
                                 " before printing '" + needle + "'");
    std::this_thread::sleep_for(1ms);
  }
  return Status::DeadlineExceeded("serial never showed '" + needle + "'; got: " + SerialOutput());
}

Result<std::unique_ptr<guest::client::AgentClient>> VmProcess::ConnectAgent(
    std::chrono::milliseconds timeout) {
  auto end = std::chrono::steady_clock::now() + timeout;
  Status last = Status::Unavailable("no attempt");
  while (std::chrono::steady_clock::now() < end) {
    if (Reap(false)) return Status::Unavailable("kubicle-vmm exited with " + std::to_string(*exit_code_));
    auto client = guest::client::AgentClient::ConnectVsock(vsock_path(), guest::protocol::kAgentVsockPort,
                                                           {}, end);
    if (client.ok()) return client;
    last = client.status();
    std::this_thread::sleep_for(200us);
  }
  return last.WithContext("agent did not answer in time");
}

Status VmProcess::WaitForControl(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    Result<control::VmStatus> r = control().GetStatus(10s);
    if (r.ok()) return Status::Ok();
    if (Reap(false)) return Status::Unavailable("kubicle-vmm exited: " + VmmLog());
    if (std::chrono::steady_clock::now() > deadline) return r.status();
    std::this_thread::sleep_for(200us);
  }
}

Result<nlohmann::json> VmProcess::Control(const nlohmann::json& request) {
  ASSIGN_OR_RETURN(std::string reply, control().RoundTrip(request.dump(), 10s));
  auto j = nlohmann::json::parse(reply, nullptr, false);
  if (j.is_discarded()) return Status::DataLoss("control response is not JSON: " + reply);
  return j;
}

Result<int> VmProcess::Wait(std::chrono::milliseconds timeout) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (!Reap(false)) {
    if (std::chrono::steady_clock::now() >= end)
      return Status::DeadlineExceeded("kubicle-vmm did not exit in time");
    std::this_thread::sleep_for(1ms);
  }
  return *exit_code_;
}

}  // namespace kubicle::vmm::testing
