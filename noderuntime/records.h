// What the node persists in its state directory, and the JSON encoding of
// each record (docs/node.md, "State directory"):
//   <state>/sandboxes/<id>/record.json   SandboxRecord
//   <state>/templates/<name>/spec.json   TemplateRecord
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

std::string EncodeSandboxRecord(const SandboxRecord& r);
Result<SandboxRecord> DecodeSandboxRecord(const std::string& text);
std::string EncodeTemplateRecord(const TemplateRecord& r);
Result<TemplateRecord> DecodeTemplateRecord(const std::string& text);

Result<SandboxState> ParseSandboxState(const std::string& s);
Result<TemplateState> ParseTemplateState(const std::string& s);

}  // namespace kubicle::noderuntime
