#include "noderuntime/vmmhost/vmm_launcher.h"

#include <unistd.h>

#include "noderuntime/vmmhost/vmm_process.h"

namespace kubicle::noderuntime {
namespace {

class RealVmm final : public VmmProcess {
 public:
  explicit RealVmm(VmmHandle h) : h_(std::move(h)) {}
  pid_t pid() const override { return h_.pid; }
  uint64_t start_time() const override { return h_.start_time; }
  int exit_fd() const override { return h_.pidfd.get(); }
  Status Signal(int sig) override { return PidfdKill(h_.pidfd.get(), sig); }
  std::optional<int> Reap() override { return ReapIfChild(h_.pidfd.get()); }

 private:
  VmmHandle h_;
};

}  // namespace

Result<std::unique_ptr<ProcessVmmLauncher>> ProcessVmmLauncher::Create(std::string vmm_binary) {
  if (::access(vmm_binary.c_str(), X_OK) != 0)
    return Status::InvalidArgument("vmm_binary '" + vmm_binary + "' is not executable");
  return std::unique_ptr<ProcessVmmLauncher>(new ProcessVmmLauncher(std::move(vmm_binary)));
}

Result<std::unique_ptr<VmmProcess>> ProcessVmmLauncher::Spawn(const vmm::LaunchSpec& spec,
                                                              const std::string& log_path) {
  std::vector<std::string> argv = {vmm_binary_};
  const std::vector<std::string> args = spec.ToArgv();
  argv.insert(argv.end(), args.begin(), args.end());
  ASSIGN_OR_RETURN(VmmHandle h, SpawnDetached(argv, log_path));
  return std::unique_ptr<VmmProcess>(std::make_unique<RealVmm>(std::move(h)));
}

Result<std::unique_ptr<VmmProcess>> ProcessVmmLauncher::Attach(
    pid_t pid, std::optional<uint64_t> expected_start_time) {
  ASSIGN_OR_RETURN(VmmHandle h, AttachProcess(pid, expected_start_time));
  return std::unique_ptr<VmmProcess>(std::make_unique<RealVmm>(std::move(h)));
}

std::vector<pid_t> ProcessVmmLauncher::FindVmms(const std::string& state_dir) {
  return FindVmmProcesses(vmm_binary_, state_dir);
}

double ProcessVmmLauncher::AgeSeconds(pid_t pid) { return ProcessAgeSeconds(pid); }

}  // namespace kubicle::noderuntime
