#include "common/run_tool.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "common/file_io.h"

namespace kubicle {

Status RunTool(const std::vector<std::string>& args, const std::string& log) {
  if (args.empty()) return Status::InvalidArgument("RunTool: no program");
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    ::unlink(log.c_str());  // the child may have opened it before its exec failed
    return Status::FromErrno("starting " + args[0], rc);
  }
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  const std::string tail = TailOfFile(log, 512);
  ::unlink(log.c_str());
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return Status::Ok();
  return Status::Internal(args[0] + " failed: " + tail);
}

}  // namespace kubicle
