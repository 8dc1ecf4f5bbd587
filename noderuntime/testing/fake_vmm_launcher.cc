#include "noderuntime/testing/fake_vmm_launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>

#include "common/unique_fd.h"
#include "guest/protocol/messages.h"
#include "guest/testguest/agent.h"
#include "guest/testguest/ramfs.h"
#include "guest/testguest/session.h"
#include "vmm/control_protocol.h"
#include "vmm/devices/virtio/mac_address.h"

namespace kubicle::noderuntime::testing {

namespace control = vmm::control;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

Result<UniqueFd> Listen(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return Status::InvalidArgument("socket path too long: " + path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return Status::FromErrno("socket");
  ::unlink(path.c_str());
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    return Status::FromErrno("bind " + path);
  if (::listen(fd.get(), 64) != 0) return Status::FromErrno("listen " + path);
  return fd;
}

// One '\n'-terminated line, byte by byte (nothing after it is consumed).
std::optional<std::string> ReadLine(int fd, std::chrono::milliseconds timeout) {
  std::string line;
  const auto end = Clock::now() + timeout;
  while (line.size() < control::kMaxRequestBytes) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) return std::nullopt;
    char c;
    const ssize_t n = ::recv(fd, &c, 1, 0);
    if (n <= 0) return std::nullopt;
    if (c == '\n') return line;
    line.push_back(c);
  }
  return std::nullopt;
}

void WriteAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

void AppendFile(const std::string& path, const std::string& text) {
  if (path.empty()) return;
  std::ofstream(path, std::ios::app) << text;
}

void WriteFd(int fd, const std::string& text) {
  if (fd >= 0) (void)!::write(fd, text.data(), text.size());
}

// The machine the test guest's agent runs on: a counting RNG and a console
// that appends to the VM's serial log.
class FakePlatform final : public guest::testguest::Platform {
 public:
  FakePlatform(uint32_t vcpus, std::string serial, uint8_t seed)
      : vcpus_(vcpus), serial_(std::move(serial)), next_(seed) {}
  bool ReadEntropy(uint8_t* out, uint32_t n) override {
    for (uint32_t i = 0; i < n; ++i) out[i] = next_++;
    return true;
  }
  uint32_t CpusRunning() override { return vcpus_; }
  uint64_t UptimeNs() override { return 0; }
  void ConsoleWrite(const char* s, uint32_t n) override { AppendFile(serial_, std::string(s, n)); }

 private:
  uint32_t vcpus_;
  std::string serial_;
  uint8_t next_;
};

// The guest's memory as far as the agent needs it.
struct FakeGuest {
  FakeGuest(uint64_t cid, uint64_t mem_mib, uint32_t vcpus, const std::string& serial)
      : platform(vcpus, serial, static_cast<uint8_t>(cid * 7)),
        files(guest::testguest::RamFs::kDataBytes),
        fill(64 << 10) {
    guest::testguest::AgentConfig cfg;
    cfg.cid = cid;
    cfg.memory_bytes = mem_mib << 20;
    cfg.fill_area = fill.data();
    cfg.fill_area_size = fill.size();
    cfg.file_data = files.data();
    agent->Init(&platform, cfg);
  }
  FakePlatform platform;
  std::vector<uint8_t> files, fill;
  std::unique_ptr<guest::testguest::Agent> agent = std::make_unique<guest::testguest::Agent>();
};

}  // namespace

// One simulated kubicle-vmm: a thread that serves its control socket (and
// its vsock socket once it runs), one more thread per agent connection.
// Exiting is asynchronous, as for a process: Exit() asks; the VM's thread
// closes its sockets and connections, then makes exit_fd readable.
class FakeVm {
 public:
  FakeVm(FakeVmmLauncher* owner, pid_t pid, uint64_t start_time, vmm::LaunchSpec spec,
         std::string mode, std::string log_path)
      : pid_(pid), start_time_(start_time), spec_(std::move(spec)), owner_(owner) {
    mode_ = std::move(mode);
    // Opened once, as a process's stderr is: it follows the file's renames.
    if (!log_path.empty())
      log_fd_.reset(::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
    id_ = spec_.vm_id;
    control_path_ = spec_.control_path;
    vsock_path_ = spec_.vsock_uds;
    serial_path_ = spec_.serial_path;
    cid_ = spec_.guest_cid;
    mem_mib_ = spec_.mem_bytes >> 20;
    vcpus_ = static_cast<uint32_t>(spec_.vcpus);
    if (spec_.net)
      net_ = control::NetAttachment{spec_.net->tap, vmm::devices::virtio::FormatMac(spec_.net->mac),
                                    spec_.net->netns};
    exit_event_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    stop_event_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  }
  ~FakeVm() {
    Exit(128 + SIGKILL);
    if (thread_.joinable()) thread_.join();
  }

  // Binds the sockets; `running` boots the guest at once (run, fork).
  Status Start(bool running) {
    if (!exit_event_ || !stop_event_) return Status::FromErrno("eventfd");
    ASSIGN_OR_RETURN(control_listen_, Listen(control_path_));
    if (running) RETURN_IF_ERROR(Boot());
    else state_ = "pooled";
    WriteFd(log_fd_.get(), "fake kubicle-vmm " + mode_ + " pid=" + std::to_string(pid_) + "\n");
    thread_ = std::thread([this] { Run(); });
    return Status::Ok();
  }

  // Asks the VM to exit with `code` (the first code asked wins).
  void Exit(int code) {
    std::lock_guard l(mu_);
    if (exit_requested_) return;
    exit_requested_ = true;
    pending_code_ = code;
    uint64_t one = 1;
    (void)!::write(stop_event_.get(), &one, sizeof(one));
  }
  bool Crash(int code) {
    {
      std::lock_guard l(mu_);
      if (exit_requested_) return false;
    }
    WriteFd(log_fd_.get(), "fake kubicle-vmm: crashed (code " + std::to_string(code) + ")\n");
    Exit(code);
    return true;
  }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  std::optional<int> Reap() {
    std::lock_guard l(mu_);
    if (!exit_code_ || reaped_ || mode_ == "fork") return std::nullopt;  // not the node's child
    reaped_ = true;
    return exit_code_;
  }
  FakeVmmLauncher::VmInfo Info() const {
    std::lock_guard l(mu_);
    return {pid_, id_, mode_, state_, cid_, control_path_, vsock_path_, exit_code_, net_,
            spec_.mode == vmm::LaunchMode::kRun ? spec_.cmdline : "",
            vmm::SeccompModeName(spec_.seccomp)};
  }
  bool exited() const {
    std::lock_guard l(mu_);
    return exit_code_.has_value();
  }
  pid_t pid() const { return pid_; }
  uint64_t start_time() const { return start_time_; }
  int exit_fd() const { return exit_event_.get(); }
  const vmm::LaunchSpec& spec() const { return spec_; }
  Clock::time_point started() const { return started_; }

 private:
  // requires !mu_ held by others of this thread; binds vsock and starts the agent.
  Status Boot() {
    ASSIGN_OR_RETURN(UniqueFd vs, Listen(vsock_path_));
    auto guest = std::make_unique<FakeGuest>(cid_, mem_mib_, vcpus_, serial_path_);
    AppendFile(serial_path_, "kubicle-testguest (fake) " + id_ + " cid=" + std::to_string(cid_) + "\n");
    std::lock_guard l(mu_);
    vsock_listen_ = std::move(vs);
    {
      std::lock_guard al(agent_mu_);
      guest_ = std::move(guest);
    }
    state_ = "running";
    return Status::Ok();
  }

  void Run() {
    for (;;) {
      pollfd fds[3] = {{stop_event_.get(), POLLIN, 0}, {-1, POLLIN, 0}, {-1, POLLIN, 0}};
      {
        std::lock_guard l(mu_);
        fds[1].fd = control_listen_.get();
        fds[2].fd = vsock_listen_ ? vsock_listen_.get() : -1;
      }
      if (::poll(fds, 3, 200) < 0 && errno != EINTR) break;
      if (fds[0].revents & POLLIN) break;
      if (fds[1].revents & POLLIN) {
        UniqueFd c(::accept4(fds[1].fd, nullptr, nullptr, SOCK_CLOEXEC));
        if (c) HandleControl(c.get());
      }
      if (fds[2].revents & POLLIN) {
        UniqueFd c(::accept4(fds[2].fd, nullptr, nullptr, SOCK_CLOEXEC));
        if (c) conns_.emplace_back([this, fd = std::make_shared<UniqueFd>(std::move(c))] {
          ServeAgent(fd->get());
        });
      }
    }
    // As a process exit: sockets and connections close, then the pidfd fires.
    {
      std::lock_guard l(mu_);
      control_listen_.reset();
      vsock_listen_.reset();
    }
    for (std::thread& t : conns_) t.join();
    conns_.clear();
    std::lock_guard l(mu_);
    state_ = "exited";
    exit_code_ = pending_code_;
    uint64_t one = 1;
    (void)!::write(exit_event_.get(), &one, sizeof(one));
  }

  control::VmStatus StatusLocked() const {
    control::VmStatus s;
    s.id = id_;
    s.state = state_ == "pooled"   ? control::VmState::kPooled
              : state_ == "paused" ? control::VmState::kPaused
                                   : control::VmState::kRunning;
    s.vcpus = static_cast<int>(vcpus_);
    s.mem_bytes = mem_mib_ << 20;
    s.guest_cid = cid_;
    s.pid = pid_;
    s.uptime_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started_).count();
    return s;
  }

  void HandleControl(int fd) {
    auto line = ReadLine(fd, 2s);
    if (!line) return;
    auto req = control::DecodeRequest(*line);
    if (!req.ok()) return WriteAll(fd, control::EncodeError(req.status().message()) + "\n");
    const std::string cmd(control::CommandName(*req));
    if (auto fault = owner_->TakeFault(cmd)) {
      if (*fault == FakeVmmLauncher::Fault::kCrash) {
        Crash(128 + SIGABRT);
        return;  // no reply: the connection drops
      }
      return WriteAll(fd, control::EncodeError("injected fault") + "\n");
    }
    Result<control::Reply> reply = std::visit([this](const auto& r) { return Handle(r); }, *req);
    WriteAll(fd, (reply.ok() ? control::EncodeReply(*reply) : control::EncodeError(reply.status().ToString())) +
                     "\n");
    if (std::holds_alternative<control::ShutdownRequest>(*req)) Exit(0);
  }

  Result<control::Reply> Handle(const control::StatusRequest&) {
    std::lock_guard l(mu_);
    return control::Reply{StatusLocked()};
  }
  Result<control::Reply> Handle(const control::PauseRequest&) { return SetRunState("running", "paused"); }
  Result<control::Reply> Handle(const control::ResumeRequest&) { return SetRunState("paused", "running"); }
  Result<control::Reply> SetRunState(const char* from, const char* to) {
    std::lock_guard l(mu_);
    if (state_ != from && state_ != to) return Status::FailedPrecondition("vm is " + state_);
    state_ = to;
    return control::Reply{StatusLocked()};
  }
  Result<control::Reply> Handle(const control::SnapshotRequest& r) {
    {
      std::lock_guard l(mu_);
      if (state_ != "running" && state_ != "paused") return Status::FailedPrecondition("vm is " + state_);
    }
    if (::mkdir(r.dir.c_str(), 0755) != 0) return Status::FromErrno("mkdir " + r.dir);
    AppendFile(r.dir + "/state", "fake snapshot state of " + id_ + "\n" + (net_ ? "nic\n" : ""));
    AppendFile(r.dir + "/memory", std::string(4096, '\0'));
    std::lock_guard l(mu_);
    state_ = r.resume ? "running" : "paused";
    return control::Reply{control::SnapshotReply{StatusLocked(), r.dir}};
  }
  Result<control::Reply> Handle(const control::RestoreRequest& r) {
    {
      std::lock_guard l(mu_);
      if (state_ != "pooled") return Status::FailedPrecondition("not a pool vm (vm is " + state_ + ")");
      if (::access((r.snapshot + "/state").c_str(), R_OK) != 0)
        return Status::NotFound("no snapshot state in " + r.snapshot);
      // As kubicle-vmm: a snapshot's NIC and a network attachment come together.
      std::ifstream state(r.snapshot + "/state");
      const std::string text((std::istreambuf_iterator<char>(state)), std::istreambuf_iterator<char>());
      const bool has_nic = text.find("\nnic\n") != std::string::npos;
      if (has_nic && !r.net)
        return Status::InvalidArgument("the snapshot has a network device: a network attachment is required");
      if (!has_nic && r.net)
        return Status::InvalidArgument("a network attachment was given but the snapshot has no network device");
      if (r.vsock_uds) vsock_path_ = *r.vsock_uds;
      if (r.serial) serial_path_ = *r.serial;
      if (r.id) id_ = *r.id;
      if (r.cid) cid_ = *r.cid;
      net_ = r.net;
    }
    RETURN_IF_ERROR(Boot());
    std::lock_guard l(mu_);
    return control::Reply{control::RestoreReply{StatusLocked(), 1}};
  }
  Result<control::Reply> Handle(const control::ForkRequest& r) {
    {
      std::lock_guard l(mu_);
      if (state_ != "running") return Status::FailedPrecondition("vm is " + state_);
    }
    control::ForkReply reply;
    std::vector<std::shared_ptr<FakeVm>> kids;
    for (const control::ForkChild& c : r.children) {
      auto kid = owner_->NewVm(spec_, "fork", "");
      if (!kid) return Status::Unavailable("the fake launcher is stopping");
      kid->log_fd_.reset(::fcntl(log_fd_.get(), F_DUPFD_CLOEXEC, 3));  // the parent's stderr
      kid->control_path_ = c.control;
      kid->vsock_path_ = c.vsock_uds;
      kid->serial_path_ = c.serial;
      kid->cid_ = c.cid;
      kid->net_ = c.net;
      kid->mem_mib_ = mem_mib_;
      kid->vcpus_ = vcpus_;
      kid->id_ = id_;
      Status st = kid->Start(true);
      if (!st.ok()) {
        for (auto& k : kids) k->Exit(128 + SIGKILL);
        kid->Exit(128 + SIGKILL);
        return st.WithContext("fork child");
      }
      reply.pids.push_back(kid->pid());
      kids.push_back(std::move(kid));
    }
    std::lock_guard l(mu_);
    reply.status = StatusLocked();
    reply.fork_us = 1;
    return control::Reply{std::move(reply)};
  }
  Result<control::Reply> Handle(const control::ShutdownRequest&) {
    return control::Reply{control::ShutdownReply{}};
  }

  // One agent connection: the vsock handshake, then the test guest's session
  // loop (as guest/testguest/agent_test_harness.h drives it).
  void ServeAgent(int fd) {
    auto hello = ReadLine(fd, 2s);
    if (!hello || *hello != "CONNECT " + std::to_string(guest::protocol::kAgentVsockPort)) return;
    WriteAll(fd, "OK 1073741824\n");
    auto rx = std::make_unique<uint8_t[]>(guest::testguest::Session::kRxCap);
    auto tx = std::make_unique<uint8_t[]>(guest::testguest::Session::kTxCap);
    auto session = std::make_unique<guest::testguest::Session>();
    session->Attach(rx.get(), tx.get());
    std::unique_lock al(agent_mu_);
    guest::testguest::Agent* agent = guest_->agent.get();
    session->Reset(agent);
    al.unlock();
    uint8_t buf[16384];
    for (;;) {
      pollfd p[2] = {{fd, short((session->RxFree() > 0 ? POLLIN : 0) | (session->TxSize() > 0 ? POLLOUT : 0)), 0},
                     {stop_event_.get(), POLLIN, 0}};
      if (::poll(p, 2, 1000) < 0 && errno != EINTR) break;
      if (p[1].revents & POLLIN) break;
      if (p[0].revents & (POLLHUP | POLLERR)) break;
      if (p[0].revents & POLLIN) {
        const ssize_t n = ::recv(fd, buf, std::min<size_t>(sizeof(buf), session->RxFree()), 0);
        if (n <= 0) break;
        session->Receive(buf, uint32_t(n));
      }
      al.lock();
      session->Process(agent);
      while (session->TxSize() > 0) {
        const ssize_t n = ::send(fd, session->TxData(), session->TxSize(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n <= 0) break;
        session->TxConsume(uint32_t(n));
        session->Process(agent);
      }
      al.unlock();
      if (session->close_requested() && session->TxSize() == 0) break;
    }
    al.lock();
    session->Reset(agent);
  }

  const pid_t pid_;
  const uint64_t start_time_;
  const vmm::LaunchSpec spec_;
  FakeVmmLauncher* const owner_;
  const Clock::time_point started_ = Clock::now();
  UniqueFd exit_event_, stop_event_;
  std::thread thread_;
  std::vector<std::thread> conns_;  // only the VM's thread touches it

  mutable std::mutex mu_;  // guards the fields below
  UniqueFd log_fd_;  // stdout and stderr
  std::optional<control::NetAttachment> net_;
  std::string id_, mode_, state_, control_path_, vsock_path_, serial_path_;
  uint64_t cid_ = 0, mem_mib_ = 0;
  uint32_t vcpus_ = 1;
  UniqueFd control_listen_, vsock_listen_;
  bool exit_requested_ = false, reaped_ = false;
  int pending_code_ = 0;
  std::optional<int> exit_code_;

  std::mutex agent_mu_;  // the agent is one guest, served to every connection
  std::unique_ptr<FakeGuest> guest_;
};

namespace {

class FakeProcess final : public VmmProcess {
 public:
  explicit FakeProcess(std::shared_ptr<FakeVm> vm)
      : vm_(std::move(vm)), exit_fd_(::fcntl(vm_->exit_fd(), F_DUPFD_CLOEXEC, 3)) {}
  pid_t pid() const override { return vm_->pid(); }
  uint64_t start_time() const override { return vm_->start_time(); }
  int exit_fd() const override { return exit_fd_.get(); }
  Status Signal(int sig) override {
    if (sig != 0) vm_->Exit(128 + sig);
    return Status::Ok();
  }
  std::optional<int> Reap() override { return vm_->Reap(); }

 private:
  std::shared_ptr<FakeVm> vm_;
  UniqueFd exit_fd_;
};

}  // namespace

FakeVmmLauncher::FakeVmmLauncher() = default;

FakeVmmLauncher::~FakeVmmLauncher() {
  std::map<pid_t, std::shared_ptr<FakeVm>> vms;
  {
    std::lock_guard l(mu_);
    spawn_error_ = Status::Unavailable("the fake launcher is stopping");
    next_pid_ = -1;  // NewVm refuses from now on (forks in flight)
    vms.swap(vms_);
  }
  for (auto& [pid, vm] : vms) vm->Exit(128 + SIGKILL);
  for (auto& [pid, vm] : vms) vm->Join();
}

std::shared_ptr<FakeVm> FakeVmmLauncher::NewVm(vmm::LaunchSpec spec, std::string mode,
                                               std::string log_path) {
  std::lock_guard l(mu_);
  if (next_pid_ < 0) return nullptr;
  auto vm = std::make_shared<FakeVm>(this, next_pid_++, next_start_++, std::move(spec), std::move(mode),
                                     std::move(log_path));
  vms_[vm->pid()] = vm;
  return vm;
}

Result<std::unique_ptr<VmmProcess>> FakeVmmLauncher::Spawn(const vmm::LaunchSpec& spec,
                                                           const std::string& log_path) {
  {
    std::lock_guard l(mu_);
    if (spawn_error_) return *spawn_error_;
  }
  if (spec.mode == vmm::LaunchMode::kRestore)
    return Status::InvalidArgument("fake kubicle-vmm: restore is not simulated (the node restores into pool VMs)");
  // What the real one refuses with exit code 1 (a usage error) fails here.
  RETURN_IF_ERROR(spec.Check().WithContext("fake kubicle-vmm"));
  const bool run = spec.mode == vmm::LaunchMode::kRun;
  auto vm = NewVm(spec, run ? "run" : "pool", log_path);
  if (!vm) return Status::Unavailable("the fake launcher is stopping");
  ++spawned_;
  Status st = vm->Start(run);
  if (!st.ok()) {
    // A real VMM that cannot bind exits at once; the caller sees the exit.
    AppendFile(log_path, "fake kubicle-vmm: " + st.ToString() + "\n");
    vm->Exit(1);
  }
  return std::unique_ptr<VmmProcess>(std::make_unique<FakeProcess>(std::move(vm)));
}

std::shared_ptr<FakeVm> FakeVmmLauncher::Find(pid_t pid) const {
  std::lock_guard l(mu_);
  auto it = vms_.find(pid);
  return it == vms_.end() ? nullptr : it->second;
}

Result<std::unique_ptr<VmmProcess>> FakeVmmLauncher::Attach(pid_t pid,
                                                            std::optional<uint64_t> expected_start_time) {
  auto vm = Find(pid);
  if (!vm || vm->exited()) return Status::NotFound("no process " + std::to_string(pid));
  if (expected_start_time && *expected_start_time != vm->start_time())
    return Status::NotFound("pid " + std::to_string(pid) + " now belongs to another process");
  return std::unique_ptr<VmmProcess>(std::make_unique<FakeProcess>(std::move(vm)));
}

std::vector<pid_t> FakeVmmLauncher::FindVmms(const std::string& state_dir) {
  std::vector<std::shared_ptr<FakeVm>> all;
  {
    std::lock_guard l(mu_);
    for (auto& [pid, vm] : vms_) all.push_back(vm);
  }
  const std::string prefix = state_dir + "/";
  std::vector<pid_t> out;
  for (auto& vm : all) {
    if (vm->exited()) continue;
    for (const std::string& a : vm->spec().ToArgv()) {
      if (a.rfind(prefix, 0) == 0) {
        out.push_back(vm->pid());
        break;
      }
    }
  }
  return out;
}

double FakeVmmLauncher::AgeSeconds(pid_t pid) {
  auto vm = Find(pid);
  if (!vm) return 0;
  return std::chrono::duration<double>(Clock::now() - vm->started()).count() + age_offset_;
}

bool FakeVmmLauncher::Crash(pid_t pid, int code) {
  auto vm = Find(pid);
  return vm && vm->Crash(code);
}

void FakeVmmLauncher::InjectFault(const std::string& cmd, Fault fault) {
  std::lock_guard l(mu_);
  faults_[cmd] = fault;
}

std::optional<FakeVmmLauncher::Fault> FakeVmmLauncher::TakeFault(const std::string& cmd) {
  std::lock_guard l(mu_);
  auto it = faults_.find(cmd);
  if (it == faults_.end()) return std::nullopt;
  Fault f = it->second;
  faults_.erase(it);
  return f;
}

void FakeVmmLauncher::FailSpawns(std::optional<Status> status) {
  std::lock_guard l(mu_);
  spawn_error_ = std::move(status);
}

std::vector<FakeVmmLauncher::VmInfo> FakeVmmLauncher::Vms() const {
  std::vector<std::shared_ptr<FakeVm>> all;
  {
    std::lock_guard l(mu_);
    for (auto& [pid, vm] : vms_) all.push_back(vm);
  }
  std::vector<VmInfo> out;
  for (auto& vm : all) out.push_back(vm->Info());
  return out;
}

std::optional<FakeVmmLauncher::VmInfo> FakeVmmLauncher::Vm(pid_t pid) const {
  auto vm = Find(pid);
  if (!vm) return std::nullopt;
  return vm->Info();
}

size_t FakeVmmLauncher::running() const {
  size_t n = 0;
  for (const VmInfo& v : Vms()) n += !v.exit_code.has_value();
  return n;
}

}  // namespace kubicle::noderuntime::testing
