// SandboxTable (managed_sandbox.h): the sandbox table.
#include "noderuntime/manager/managed_sandbox.h"

namespace kubicle::noderuntime {

Status SandboxTable::Add(const std::shared_ptr<ManagedSandbox>& sb) {
  std::lock_guard l(mu_);
  SandboxInfo& info = sb->rec.info;
  if (sandboxes_.count(info.id)) return Status::AlreadyExists("sandbox '" + info.id + "' exists");
  info.cid = AllocateCidLocked();
  sb->holds_cid = true;
  sb->rec.generation = next_generation_++;
  sandboxes_[info.id] = sb;
  return Status::Ok();
}

void SandboxTable::Readopt(const std::shared_ptr<ManagedSandbox>& sb, bool holds_cid) {
  std::lock_guard l(mu_);
  if (holds_cid) cids_.insert(sb->rec.info.cid);
  sandboxes_[sb->rec.info.id] = sb;
}

void SandboxTable::SkipPast(uint32_t cid, uint64_t generation) {
  std::lock_guard l(mu_);
  next_generation_ = std::max(next_generation_, generation + 1);
  next_cid_ = std::max(next_cid_, cid + 1);
}

std::shared_ptr<ManagedSandbox> SandboxTable::Find(const std::string& id) const {
  std::lock_guard l(mu_);
  auto it = sandboxes_.find(id);
  return it == sandboxes_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<ManagedSandbox>> SandboxTable::All() const {
  std::lock_guard l(mu_);
  std::vector<std::shared_ptr<ManagedSandbox>> out;
  out.reserve(sandboxes_.size());
  for (const auto& [id, sb] : sandboxes_) out.push_back(sb);
  return out;
}

void SandboxTable::Remove(const std::shared_ptr<ManagedSandbox>& sb) {
  std::lock_guard l(mu_);
  auto it = sandboxes_.find(sb->rec.info.id);
  if (it != sandboxes_.end() && it->second == sb) sandboxes_.erase(it);
}

size_t SandboxTable::size() const {
  std::lock_guard l(mu_);
  return sandboxes_.size();
}

uint32_t SandboxTable::AllocateCid() {
  std::lock_guard l(mu_);
  return AllocateCidLocked();
}

uint32_t SandboxTable::AllocateCidLocked() {
  // CIDs 0-2 are reserved by vsock; wrap well below 2^32 - 1 (VMADDR_CID_ANY).
  for (;;) {
    uint32_t cid = next_cid_++;
    if (next_cid_ >= 0x7fffffff) next_cid_ = 3;
    if (cids_.insert(cid).second) return cid;
  }
}

void SandboxTable::ReleaseCid(uint32_t cid) {
  std::lock_guard l(mu_);
  cids_.erase(cid);
}

}  // namespace kubicle::noderuntime
