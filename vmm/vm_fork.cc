// Fork of a running Vm (docs/vmm.md, "Fork"): the VM is paused and captured
// once (copy-on-write disks frozen), then the VMM process fork(2)s from its
// event-loop thread, once per child. Guest memory is private anonymous (or a
// MAP_PRIVATE snapshot file), so every child shares it copy-on-write with
// the parent. A child keeps nothing of the parent's machine but that memory:
// it closes every other inherited fd first. The parent's KVM VM belongs to
// the parent's mm, and its event loop, transports and sockets are the
// parent's, so the child builds a new KVM VM over the inherited memory (the
// memory slot registered on a second thread while the irqchip is set up),
// new devices from the captured state, a new loop, control socket and
// signal watcher, and takes the new identity it was given (CID, vsock
// socket, control socket, serial, disk overlays). The inherited objects are
// never destroyed (the child ends in ExitLeavingTeardown or _exit):
// destroying them would join threads that do not exist in the child.
#include <dirent.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "common/log.h"
#include "vmm/arch/x86_64/layout.h"
#include "vmm/fast_exit.h"
#include "vmm/vm.h"

namespace kubicle::vmm {

namespace {

// Closes every fd >= 3. Nothing inherited is used again except guest memory,
// and mappings outlive their fds. Without this a child would hold the
// parent's listening control and vsock sockets, the connection the fork
// request came on, its KVM VM and vCPU fds (keeping the parent's VM alive
// after the parent exits), eventfds, epoll instances and disk files.
void CloseInheritedFds() {
  if (::syscall(SYS_close_range, 3u, ~0u, 0u) == 0) return;
  // Kernels before 5.9: walk /proc/self/fd (collect first: closing while
  // iterating would close the directory's own fd).
  std::vector<int> fds;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (dirent* e = ::readdir(d)) {
      int fd = std::atoi(e->d_name);
      if (fd >= 3 && fd != ::dirfd(d)) fds.push_back(fd);
    }
    ::closedir(d);
  }
  for (int fd : fds) ::close(fd);
}

// Every child of a VM with a network device needs a TAP of its own (one TAP
// takes one VMM); a VM without one cannot give its children one. Checked
// before anything is paused.
Status CheckChildrenNetworks(bool vm_has_net, const std::vector<control::ForkChild>& children) {
  for (size_t i = 0; i < children.size(); ++i) {
    if (vm_has_net && !children[i].net)
      return Status::InvalidArgument("fork: child " + std::to_string(i) +
                                     " needs \"net\": this VM has a network device");
    if (!vm_has_net && children[i].net)
      return Status::InvalidArgument("fork: child " + std::to_string(i) +
                                     " has \"net\" but this VM has no network device");
  }
  return Status::Ok();
}

int64_t MicrosSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t)
      .count();
}

}  // namespace

Result<control::ForkReply> Vm::Fork(const control::ForkRequest& req) {
  // Decoded and validated already; checked again for callers in this process.
  RETURN_IF_ERROR(control::ValidateRequest(control::Request{req}));
  const std::vector<control::ForkChild>& children = req.children;
  if (!vcpus_) return Status::FailedPrecondition("vm is not started");
  RETURN_IF_ERROR(CheckDisksCapturable().WithContext("fork"));
  if (workspace_plugged_)
    return Status::FailedPrecondition(
        "fork: a workspace is attached (children would share one disk written in place)");
  RETURN_IF_ERROR(CheckChildrenNetworks(config_.net.has_value(), children));
  auto start = std::chrono::steady_clock::now();
  bool was_paused = vcpus_->paused();
  if (!was_paused) RETURN_IF_ERROR(vcpus_->Pause());
  Result<snapshot::MachineState> state = CaptureState();
  std::vector<int64_t> pids;
  Status st = state.status();
  for (size_t i = 0; st.ok() && i < children.size(); ++i) {
    pid_t pid = ::fork();
    if (pid < 0) {
      st = Status::FromErrno("fork");
      break;
    }
    if (pid == 0) ChildMain(*state, children[i]);  // never returns
    pids.push_back(pid);
  }
  if (!was_paused) vcpus_->Resume();
  if (!st.ok()) return st.WithContext("fork (" + std::to_string(pids.size()) + " children started)");
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                std::chrono::steady_clock::now() - start).count();
  log::Info("vm forked", {{"vm", config_.vm_id}, {"children", pids.size()}, {"us", us}});
  return control::ForkReply{Describe(), std::move(pids), us};
}

void Vm::ChildMain(const snapshot::MachineState& state, const control::ForkChild& child) {
  const auto forked_at = std::chrono::steady_clock::now();
  // Only this thread exists here.
  CloseInheritedFds();

  LaunchSpec config = config_;
  config.vsock_uds = child.vsock_uds;
  config.control_path = child.control;
  config.serial_path = child.serial.empty() ? "none" : child.serial;
  config.guest_cid = child.cid;
  if (!child.layer_dir.empty()) config.layer_dir = child.layer_dir;
  if (child.net) {
    // Checked by CheckNet when the request was decoded: cannot fail here.
    Result<NetFlags> net = NetFlagsFor(*child.net, config_.net);
    if (!net.ok()) {
      log::Error("fork child failed", {{"error", net.status().ToString()}});
      ::_exit(static_cast<int>(ExitCode::kSetupFailed));
    }
    config.net = *net;
  }
  config.vm_id = config_.vm_id + "-" + std::to_string(::getpid());
  std::unique_ptr<Vm> vm(new Vm(config));
  // The inherited machine (this object and everything it owns) is never
  // destroyed: the child never returns from here. Only its guest memory
  // moves on.
  vm->memory_ = std::move(memory_);
  // The parent's signal watcher thread does not exist here: start one, so
  // SIGTERM stops the child cleanly (overlays removed, fast exit).
  vm->StopOnSignals();
  ForkTimings t;
  Status st = vm->BuildForked(state, &t);
  auto mark = std::chrono::steady_clock::now();
  if (st.ok()) st = vm->Start();
  t.vcpus_us = MicrosSince(mark);
  if (!st.ok()) {
    log::Error("fork child failed", {{"vm", config.vm_id}, {"error", st.ToString()}});
    ::_exit(static_cast<int>(ExitCode::kSetupFailed));
  }
  // Where a child's start-up time goes (kubicle-bench-vmm reads this line).
  log::Info("fork child running", {{"vm", config.vm_id}, {"kvm_vm_us", t.kvm_vm_us},
                                   {"slots_us", t.slots_us}, {"devices_us", t.devices_us},
                                   {"vcpus_us", t.vcpus_us}, {"total_us", MicrosSince(forked_at)}});
  ExitCode code = vm->WaitForStop();
  ExitLeavingTeardown(static_cast<int>(code));
}

}  // namespace kubicle::vmm
