// LoopbackRegistry: e2e/registry/registry.py's real registry (Debian's
// docker-registry) for C++ tests, started on 127.0.0.1 in a temporary
// directory; and PushImage: e2e/registry/push_image.py. Test-only,
// header-only; the tests define KUBICLE_REGISTRY_DIR (this folder).
//
//   LoopbackRegistry reg({.tls = true, .user = "alice", .password = "s3cret"});
//   if (!reg.ok()) GTEST_SKIP() << reg.error();
//   nlohmann::json pushed = PushImage(reg, {"--repo", "team/x", "--tag", "1",
//                                           "--layer-dir", dir});
//   // pushed["manifest_digest"], pushed["layers"][0]["digest"], ...
//
// Contracts: the registry process is a child of the test; the destructor
// closes its stdin, which stops it and removes its directory (registry.py
// serve), then reaps it. error() says why there is none (a missing package:
// the test should skip saying so; anything else should fail).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

extern char** environ;

namespace kubicle::e2e {

struct LoopbackRegistryOptions {
  bool tls = false;
  std::string user, password;  // both set: htpasswd basic auth
};

namespace registry_detail {

// Runs argv with stdin from a pipe (returned in *stdin_fd unless null) and
// stdout to a pipe (returned); stderr is inherited.
inline pid_t Spawn(const std::vector<std::string>& args, int* stdin_fd, int* stdout_fd) {
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0) return -1;
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(in[0]);
    ::close(in[1]);
    return -1;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  ::close(in[0]);
  ::close(out[1]);
  if (stdin_fd) {
    *stdin_fd = in[1];
  } else {
    ::close(in[1]);
  }
  *stdout_fd = out[0];
  return pid;
}

inline std::string ReadLine(int fd) {
  std::string line;
  char c;
  while (::read(fd, &c, 1) == 1 && c != '\n') line += c;
  return line;
}

inline std::string ReadAll(int fd) {
  std::string s;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) s.append(buf, static_cast<size_t>(n));
  return s;
}

}  // namespace registry_detail

class LoopbackRegistry {
 public:
  explicit LoopbackRegistry(const LoopbackRegistryOptions& o) : options_(o) {
    const std::string script = std::string(KUBICLE_REGISTRY_DIR) + "/registry.py";
    if (::access("/usr/bin/docker-registry", X_OK) != 0) {
      error_ = "no /usr/bin/docker-registry (Debian's docker-registry; scripts/install-deps.sh)";
      missing_ = true;
      return;
    }
    std::vector<std::string> args = {"python3", script, "serve"};
    if (o.tls) args.push_back("--tls");
    if (!o.user.empty()) args.insert(args.end(), {"--user", o.user, "--password", o.password});
    int out = -1;
    pid_ = registry_detail::Spawn(args, &stdin_, &out);
    if (pid_ < 0) {
      error_ = "cannot start " + script;
      return;
    }
    std::string line = registry_detail::ReadLine(out);
    ::close(out);
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("address")) {
      error_ = "registry.py serve did not report an address (see its stderr above)";
      return;
    }
    address_ = j["address"].get<std::string>();
    if (j["ca_file"].is_string()) ca_file_ = j["ca_file"].get<std::string>();
    docker_config_ = j["docker_config"].get<std::string>();
  }
  ~LoopbackRegistry() {
    if (stdin_ >= 0) ::close(stdin_);  // registry.py serve stops and cleans up
    if (pid_ > 0) {
      int st;
      ::waitpid(pid_, &st, 0);
    }
  }
  LoopbackRegistry(const LoopbackRegistry&) = delete;
  LoopbackRegistry& operator=(const LoopbackRegistry&) = delete;

  bool ok() const { return !address_.empty(); }
  bool missing_package() const { return missing_; }
  const std::string& error() const { return error_; }
  const std::string& address() const { return address_; }  // "127.0.0.1:<port>"
  const std::string& ca_file() const { return ca_file_; }  // TLS only
  const std::string& docker_config() const { return docker_config_; }
  const LoopbackRegistryOptions& options() const { return options_; }

 private:
  LoopbackRegistryOptions options_;
  pid_t pid_ = -1;
  int stdin_ = -1;
  bool missing_ = false;
  std::string error_, address_, ca_file_, docker_config_;
};

// Runs push_image.py against `reg` (its address, CA, credentials, http when
// not TLS) with `args`; the JSON it prints, or a discarded value on failure.
inline nlohmann::json PushImage(const LoopbackRegistry& reg, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"python3", std::string(KUBICLE_REGISTRY_DIR) + "/push_image.py",
                                   "--registry", reg.address()};
  if (reg.options().tls) {
    argv.insert(argv.end(), {"--ca", reg.ca_file()});
  } else {
    argv.push_back("--insecure");
  }
  if (!reg.options().user.empty())
    argv.insert(argv.end(), {"--user", reg.options().user, "--password", reg.options().password});
  argv.insert(argv.end(), args.begin(), args.end());
  int out = -1;
  pid_t pid = registry_detail::Spawn(argv, nullptr, &out);
  if (pid < 0) return nlohmann::json::value_t::discarded;
  std::string text = registry_detail::ReadAll(out);
  ::close(out);
  int st = 0;
  ::waitpid(pid, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return nlohmann::json::value_t::discarded;
  return nlohmann::json::parse(text, nullptr, false);
}

}  // namespace kubicle::e2e
