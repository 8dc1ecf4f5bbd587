// What this operator last wrote for each Sandbox (by key, for one UID) that
// its informer cache may not show yet. A pass reading a copy from before
// its own last write would otherwise write again what is already there: a
// token Secret create answered 409 (and a read back), a status patch
// refused 409 by its resourceVersion precondition. Each is a request the
// apiserver pays for; in a burst, when the cache lags most, they were
// 0.2-2.3 extra writes per Sandbox (kubicle-bench-kube, issue 29).
//
// Contract: only what this process wrote successfully is remembered; an
// entry is dropped once the cache shows it (CaughtUp), when the object
// goes (Forget), or when the UID differs (a new object of the same name).
// Bounded: beyond kMaxEntries everything is forgotten (which only costs
// the redundant writes again). Thread-safe.
#pragma once

#include <map>
#include <mutex>
#include <string>

#include "kube/kube_client.h"

namespace kubicle::op {

class RecentWrites {
 public:
  static constexpr size_t kMaxEntries = 20000;

  // The hash of the token Secret this operator created (or read back).
  void Token(const std::string& key, const std::string& uid, const std::string& sha256);
  std::string TokenOf(const std::string& key, const std::string& uid) const;
  // The status fields this operator's last successful status write set.
  void Status(const std::string& key, const std::string& uid, const kube::Json& written);
  // Whether writing `desired` over `current` (the cached status) would only
  // repeat the last status write: every field that differs from `current`
  // has, in that write, the value `desired` gives it.
  bool Repeats(const std::string& key, const std::string& uid, const kube::Json& current,
               const kube::Json& desired) const;
  // Drops the entry when `current` (the cached status) shows all of it.
  void CaughtUp(const std::string& key, const std::string& uid, const kube::Json& current);
  void Forget(const std::string& key);

 private:
  struct Entry {
    std::string uid, token_sha256;
    kube::Json status = kube::Json::object();
  };
  Entry* Find(const std::string& key, const std::string& uid);
  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;
};

}  // namespace kubicle::op
