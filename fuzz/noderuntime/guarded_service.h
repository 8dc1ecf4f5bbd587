// GuardedService: the API's FakeSandboxService with every call checked
// against whose request is being handled (the http_server fuzzer sets
// `in_gate` around the Gate and `handling` around each handler): the admin
// token may do anything, sandbox sb-1's token only sb-1's reads, exec and
// files (api_server.h's auth contract), workspace ws-1's token only ws-1's
// get and files, no valid token nothing; CheckToken and
// CheckWorkspaceToken only from the Gate. A call outside these is a fuzz
// invariant failure.
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/common/fuzz_input.h"
#include "noderuntime/server/testing/fake_sandbox_service.h"

namespace kubicle::fuzz {

inline constexpr char kAdminToken[] = "admin-token";
inline constexpr char kSandboxId[] = "sb-1";
inline constexpr char kSandboxToken[] = "sandbox-token";
inline constexpr char kWorkspaceName[] = "ws-1";
inline constexpr char kWorkspaceToken[] = "workspace-token";

enum class Who { kNobody, kSandbox, kWorkspace, kAdmin };

// Whose token an Authorization header carries, read as RFC 6750 says
// ("Bearer" in any case, then the token), not through routes.cc.
inline Who WhoIs(std::string_view h) {
  constexpr std::string_view kScheme = "bearer ";
  if (h.size() <= kScheme.size()) return Who::kNobody;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    const char c = kScheme[i] == ' ' ? h[i] : char(h[i] | 0x20);  // ASCII lower case
    if (c != kScheme[i]) return Who::kNobody;
  }
  h.remove_prefix(kScheme.size());
  while (!h.empty() && h.front() == ' ') h.remove_prefix(1);
  while (!h.empty() && h.back() == ' ') h.remove_suffix(1);
  if (h == kAdminToken) return Who::kAdmin;
  if (h == kSandboxToken) return Who::kSandbox;
  if (h == kWorkspaceToken) return Who::kWorkspace;
  return Who::kNobody;
}

// The fake, with every call checked against whose request is being handled.
class GuardedService final : public noderuntime::server::testing::FakeSandboxService {
 public:
  using Fake = noderuntime::server::testing::FakeSandboxService;
  bool in_gate = false;
  std::optional<Who> handling;  // set while a handler (or the set-up) runs

  Result<noderuntime::TemplateInfo> PutTemplate(const noderuntime::TemplateSpec& s) override {
    Admin();
    return Fake::PutTemplate(s);
  }
  Result<noderuntime::TemplateInfo> GetTemplate(const std::string& name) override {
    Admin();
    return Fake::GetTemplate(name);
  }
  std::vector<noderuntime::TemplateInfo> ListTemplates() override {
    Admin();
    return Fake::ListTemplates();
  }
  Status DeleteTemplate(const std::string& name) override {
    Admin();
    return Fake::DeleteTemplate(name);
  }
  Result<noderuntime::SandboxInfo> CreateSandbox(const noderuntime::SandboxSpec& s) override {
    Admin();
    return Fake::CreateSandbox(s);
  }
  Result<std::vector<noderuntime::SandboxInfo>> ForkSandbox(
      const noderuntime::ForkRequest& r) override {
    Admin();
    return Fake::ForkSandbox(r);
  }
  Result<noderuntime::SandboxInfo> GetSandbox(const std::string& id) override {
    Tenant(id);
    return Fake::GetSandbox(id);
  }
  Result<std::vector<noderuntime::SandboxInfo>> ListSandboxes(const std::string& sel) override {
    Admin();
    return Fake::ListSandboxes(sel);
  }
  Status DeleteSandbox(const std::string& id) override {
    Admin();
    return Fake::DeleteSandbox(id);
  }
  Result<std::vector<std::string>> DeleteSandboxes(const std::string& sel) override {
    Admin();
    return Fake::DeleteSandboxes(sel);
  }
  bool CheckToken(const std::string& id, const std::string& token) override {
    FUZZ_CHECK(in_gate);
    return Fake::CheckToken(id, token);
  }
  Result<guest::client::ExecResult> Exec(const std::string& id,
                                         const noderuntime::ExecOptions& o) override {
    Tenant(id);
    return Fake::Exec(id, o);
  }
  Status WriteFile(const std::string& id, const std::string& path, guest::protocol::ByteSpan data,
                   uint32_t mode) override {
    Tenant(id);
    return Fake::WriteFile(id, path, data, mode);
  }
  Result<guest::protocol::Bytes> ReadFile(const std::string& id, const std::string& path) override {
    Tenant(id);
    return Fake::ReadFile(id, path);
  }
  Status ReadFileStream(const std::string& id, const std::string& path,
                        const guest::client::FileChunkFn& on_chunk) override {
    Tenant(id);
    return Fake::ReadFileStream(id, path, on_chunk);
  }
  Result<noderuntime::ConsoleRead> ReadConsole(const std::string& id, uint64_t offset,
                                               size_t max_bytes) override {
    Tenant(id);
    return Fake::ReadConsole(id, offset, max_bytes);
  }
  Result<noderuntime::SandboxStats> GetSandboxStats(const std::string& id) override {
    Tenant(id);
    return Fake::GetSandboxStats(id);
  }
  Result<guest::protocol::StatReply> StatFile(const std::string& id,
                                              const std::string& path) override {
    Tenant(id);
    return Fake::StatFile(id, path);
  }
  Result<std::vector<guest::protocol::DirEntry>> ListFiles(const std::string& id,
                                                           const std::string& path) override {
    Tenant(id);
    return Fake::ListFiles(id, path);
  }
  Status RemoveFile(const std::string& id, const std::string& path, bool recursive) override {
    Tenant(id);
    return Fake::RemoveFile(id, path, recursive);
  }
  // Workspaces: the admin's to make and delete, ws-1's token may get it and
  // move its files.
  Result<noderuntime::WorkspaceInfo> PutWorkspace(const noderuntime::WorkspaceSpec& s) override {
    Admin();
    return Fake::PutWorkspace(s);
  }
  Result<noderuntime::WorkspaceInfo> GetWorkspace(const std::string& name) override {
    // The handler's own existence check before a put runs for the admin too.
    WorkspaceTenant(name);
    return Fake::GetWorkspace(name);
  }
  std::vector<noderuntime::WorkspaceInfo> ListWorkspaces() override {
    Admin();
    return Fake::ListWorkspaces();
  }
  Status DeleteWorkspace(const std::string& name) override {
    Admin();
    return Fake::DeleteWorkspace(name);
  }
  bool CheckWorkspaceToken(const std::string& name, const std::string& token) override {
    FUZZ_CHECK(in_gate);
    return Fake::CheckWorkspaceToken(name, token);
  }
  Status ReadWorkspaceFile(const std::string& name, const std::string& path,
                           const guest::client::FileChunkFn& on_chunk) override {
    WorkspaceTenant(name);
    return Fake::ReadWorkspaceFile(name, path, on_chunk);
  }
  Status WriteWorkspaceFile(const std::string& name, const std::string& path,
                            guest::protocol::ByteSpan data, uint32_t mode) override {
    WorkspaceTenant(name);
    return Fake::WriteWorkspaceFile(name, path, data, mode);
  }
  Result<guest::protocol::StatReply> StatWorkspaceFile(const std::string& name,
                                                       const std::string& path) override {
    WorkspaceTenant(name);
    return Fake::StatWorkspaceFile(name, path);
  }
  Result<std::vector<guest::protocol::DirEntry>> ListWorkspaceFiles(
      const std::string& name, const std::string& path) override {
    WorkspaceTenant(name);
    return Fake::ListWorkspaceFiles(name, path);
  }
  Status RemoveWorkspaceFile(const std::string& name, const std::string& path,
                             bool recursive) override {
    WorkspaceTenant(name);
    return Fake::RemoveWorkspaceFile(name, path, recursive);
  }
  // sb-1's guest (the fake gives it no network, so its rules end in a 409
  // for every port): port 1 is one end of a socket pair whose other end is
  // closed, so the relay after the 101 ends as soon as the client's side
  // does; port 2 keeps the fake's 409; every other port is refused (502).
  Result<UniqueFd> ConnectGuestPort(const std::string& id, uint16_t port) override {
    Tenant(id);
    auto fake = Fake::ConnectGuestPort(id, port);  // 404, or 409: no network
    if (fake.ok() || fake.status().code() != StatusCode::kFailedPrecondition || port == 2) {
      return fake;
    }
    if (port != 1) return Status::Unavailable("connecting to 172.16.0.2: Connection refused");
    int sv[2];
    FUZZ_CHECK(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    ::close(sv[1]);
    return UniqueFd(sv[0]);
  }

 private:
  void Admin() const { FUZZ_CHECK(!in_gate && handling == Who::kAdmin); }
  void Tenant(const std::string& id) const {
    FUZZ_CHECK(!in_gate && handling.has_value());
    FUZZ_CHECK(*handling == Who::kAdmin || (*handling == Who::kSandbox && id == kSandboxId));
  }
  void WorkspaceTenant(const std::string& name) const {
    FUZZ_CHECK(!in_gate && handling.has_value());
    FUZZ_CHECK(*handling == Who::kAdmin || (*handling == Who::kWorkspace && name == kWorkspaceName));
  }
};

}  // namespace kubicle::fuzz
