// What the node persists in its state directory, and the JSON encoding of
// each record (docs/node.md, "State directory"):
//   <state>/sandboxes/<id>/record.json   SandboxRecord
//   <state>/templates/<name>/spec.json   TemplateRecord
//   <state>/workspaces/<name>/record.json WorkspaceRecord (docs/workspaces.md)
//
// Contracts: decoding takes untrusted bytes (a file another version wrote, or
// a torn disk) and returns DataLoss naming the bad field, never crashes.
// Records carry "version": 1; an unknown version is refused. The data-plane
// token itself is never persisted, only its SHA-256.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "noderuntime/sandbox_service.h"

namespace kubicle::noderuntime {

struct SandboxRecord {
  SandboxInfo info;           // info.token is always empty here
  std::string token_sha256;   // hex
  uint64_t pid_start_time = 0;
  uint64_t generation = 0;    // sent in POST_RESTORE
  std::string control_path;
  std::string vsock_path;
};

struct TemplateRecord {
  TemplateInfo info;
};

// ---- workspaces ----
// Attachments are not in it: who holds a workspace is rebuilt at Open from
// the sandbox records ("workspace") of sandboxes re-adopted Running.
struct WorkspaceRecord {
  WorkspaceInfo info;         // info.token and info.attached_to are always empty here
  std::string token_sha256;   // hex
};
std::string EncodeWorkspaceRecord(const WorkspaceRecord& r);
Result<WorkspaceRecord> DecodeWorkspaceRecord(const std::string& text);
Result<WorkspaceState> ParseWorkspaceState(const std::string& s);

std::string EncodeSandboxRecord(const SandboxRecord& r);
Result<SandboxRecord> DecodeSandboxRecord(const std::string& text);
std::string EncodeTemplateRecord(const TemplateRecord& r);
Result<TemplateRecord> DecodeTemplateRecord(const std::string& text);

Result<SandboxState> ParseSandboxState(const std::string& s);
Result<TemplateState> ParseTemplateState(const std::string& s);

}  // namespace kubicle::noderuntime
