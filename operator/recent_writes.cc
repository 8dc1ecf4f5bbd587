#include "operator/recent_writes.h"

#include "kube/json_fields.h"

namespace kubicle::op {

RecentWrites::Entry* RecentWrites::Find(const std::string& key, const std::string& uid) {
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    if (entries_.size() >= kMaxEntries) entries_.clear();
    it = entries_.emplace(key, Entry{uid}).first;
  } else if (it->second.uid != uid) {
    it->second = Entry{uid};  // a new object of the same name
  }
  return &it->second;
}

void RecentWrites::Token(const std::string& key, const std::string& uid, const std::string& sha256) {
  std::lock_guard l(mu_);
  Find(key, uid)->token_sha256 = sha256;
}

std::string RecentWrites::TokenOf(const std::string& key, const std::string& uid) const {
  std::lock_guard l(mu_);
  auto it = entries_.find(key);
  return it != entries_.end() && it->second.uid == uid ? it->second.token_sha256 : "";
}

void RecentWrites::Status(const std::string& key, const std::string& uid, const kube::Json& written) {
  std::lock_guard l(mu_);
  Find(key, uid)->status = written;
}

bool RecentWrites::Repeats(const std::string& key, const std::string& uid, const kube::Json& current,
                           const kube::Json& desired) const {
  std::lock_guard l(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.uid != uid || !desired.is_object()) return false;
  const kube::Json& last = it->second.status;
  bool differs = false;
  for (const auto& [k, v] : desired.items()) {
    if (kube::At(current, {k}) == v) continue;
    differs = true;
    if (!last.contains(k) || last[k] != v) return false;
  }
  return differs;
}

void RecentWrites::CaughtUp(const std::string& key, const std::string& uid, const kube::Json& current) {
  std::lock_guard l(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  if (it->second.uid != uid) {
    entries_.erase(it);
    return;
  }
  const kube::Json& last = it->second.status;
  for (const auto& [k, v] : last.items())
    if (kube::At(current, {k}) != v) return;
  const std::string& sha = it->second.token_sha256;
  if (!sha.empty() && kube::StrAt(current, {"tokenSha256"}) != sha) return;
  entries_.erase(it);
}

void RecentWrites::Forget(const std::string& key) {
  std::lock_guard l(mu_);
  entries_.erase(key);
}

}  // namespace kubicle::op
