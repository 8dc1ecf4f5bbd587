// A temporary directory for tests, removed (with its files) on destruction.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace kubicle::snapshot::testing {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/kubicle-snapshot-test-XXXXXX";
    path_ = ::mkdtemp(tmpl) ? tmpl : "";
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace kubicle::snapshot::testing
