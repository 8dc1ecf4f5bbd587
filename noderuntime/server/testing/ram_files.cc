#include "noderuntime/server/testing/ram_files.h"

namespace kubicle::noderuntime::server::testing {

namespace {
// "/a/b" -> "/a/b/", "/" -> "/": the prefix of what lies under a directory.
std::string Under(const std::string& dir) { return dir.back() == '/' ? dir : dir + "/"; }
}  // namespace

Result<guest::protocol::StatReply> StatRamFile(const RamFiles& files, const std::string& path) {
  guest::protocol::StatReply r;
  if (auto f = files.find(path); f != files.end()) {
    r.type = guest::protocol::FileType::kFile;
    r.size = f->second.first.size();
    r.mode = f->second.second;
    return r;
  }
  const std::string prefix = Under(path);
  bool dir = path == "/";
  for (const auto& [p, f] : files) dir = dir || p.rfind(prefix, 0) == 0;
  if (!dir) return Status::NotFound("no file " + path);
  r.type = guest::protocol::FileType::kDirectory;
  r.mode = 0755;
  return r;
}

Result<std::vector<guest::protocol::DirEntry>> ListRamDir(const RamFiles& files,
                                                          const std::string& path) {
  if (files.count(path)) return Status::FailedPrecondition(path + " is not a directory");
  const std::string prefix = Under(path);
  std::map<std::string, guest::protocol::DirEntry> entries;
  for (const auto& [p, f] : files) {
    if (p.rfind(prefix, 0) != 0) continue;
    std::string rest = p.substr(prefix.size());
    const size_t slash = rest.find('/');
    guest::protocol::DirEntry e;
    e.name = rest.substr(0, slash);
    if (slash == std::string::npos) {
      e.type = guest::protocol::FileType::kFile;
      e.size = f.first.size();
      e.mode = f.second;
    } else {
      e.type = guest::protocol::FileType::kDirectory;
      e.mode = 0755;
    }
    entries.emplace(e.name, e);
  }
  if (entries.empty() && path != "/") return Status::NotFound("no directory " + path);
  std::vector<guest::protocol::DirEntry> out;
  for (auto& [n, e] : entries) out.push_back(std::move(e));
  return out;
}

Status RemoveRamFile(RamFiles* files, const std::string& path, bool recursive) {
  if (files->erase(path)) return Status::Ok();
  const std::string prefix = Under(path);
  std::vector<std::string> under;
  for (const auto& [p, f] : *files) {
    if (p.rfind(prefix, 0) == 0) under.push_back(p);
  }
  if (under.empty()) return Status::NotFound("no file " + path);
  if (!recursive) return Status::FailedPrecondition("directory " + path + " is not empty");
  for (const std::string& p : under) files->erase(p);
  return Status::Ok();
}

}  // namespace kubicle::noderuntime::server::testing
