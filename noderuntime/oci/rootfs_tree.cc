#include "noderuntime/oci/rootfs_tree.h"

#include <functional>
#include <set>

namespace kubicle::noderuntime::oci {

namespace {

constexpr size_t kMaxName = 255;  // ext4's limit for one name
constexpr uint64_t kBlock = 4096;
constexpr size_t kMaxSymlink = 4096;  // one block, as the kernel's PATH_MAX
const std::string kWhiteout = ".wh.";
const std::string kOpaque = ".wh..wh..opq";

std::string Join(const std::vector<std::string>& parts, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += (i ? "/" : "") + parts[i];
  return out;
}

// Drops what lower layers (< layer) put below `dir`; this layer's own
// directories keep only this layer's children, recursively.
void HideLower(TreeInode* dir, uint32_t layer) {
  for (auto it = dir->children.begin(); it != dir->children.end();) {
    if (it->second.layer < layer) {
      it = dir->children.erase(it);
      continue;
    }
    if (it->second.inode->type == TarType::kDirectory) HideLower(it->second.inode.get(), layer);
    ++it;
  }
}

uint64_t Blocks(uint64_t bytes) { return (bytes + kBlock - 1) / kBlock; }

}  // namespace

Result<std::vector<std::string>> SplitImagePath(const std::string& path) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t slash = path.find('/', pos);
    if (slash == std::string::npos) slash = path.size();
    std::string c = path.substr(pos, slash - pos);
    pos = slash + 1;
    if (c.empty() || c == ".") continue;
    if (c == "..") return Status::InvalidArgument("path '" + path + "' has a '..' component");
    if (c.size() > kMaxName)
      return Status::InvalidArgument("path '" + path.substr(0, 64) +
                                     "...' has a name over 255 bytes");
    if (c.find('\0') != std::string::npos) return Status::InvalidArgument("path holds NUL");
    parts.push_back(std::move(c));
  }
  return parts;
}

RootfsTree::RootfsTree(TreeLimits limits) : limits_(limits), root_(std::make_shared<TreeInode>()) {}

Result<TreeInode*> RootfsTree::Parent(const std::vector<std::string>& parts, uint32_t layer) {
  TreeInode* dir = root_.get();
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    auto it = dir->children.find(parts[i]);
    if (it == dir->children.end()) {
      auto made = std::make_shared<TreeInode>();  // 0755 root, mtime 0
      it = dir->children.emplace(parts[i], TreeChild{std::move(made), layer}).first;
    }
    const TreeInode& n = *it->second.inode;
    if (n.type == TarType::kSymlink)
      return Status::InvalidArgument(
          "its parent '" + Join(parts, i + 1) +
          "' is a symlink in the image; entries under symlinks are refused");
    if (n.type != TarType::kDirectory)
      return Status::InvalidArgument("its parent '" + Join(parts, i + 1) + "' is not a directory");
    dir = it->second.inode.get();
  }
  return dir;
}

Status RootfsTree::Whiteout(TreeInode* dir, const std::string& name, uint32_t layer) {
  if (name == kOpaque) {
    HideLower(dir, layer);
    return Status::Ok();
  }
  if (name.rfind(kWhiteout + kWhiteout.substr(1), 0) == 0) return Status::Ok();  // .wh..wh.*: aufs
  const std::string target = name.substr(kWhiteout.size());
  if (target.empty() || target == "." || target == "..")
    return Status::InvalidArgument("a whiteout without a name");
  auto it = dir->children.find(target);
  if (it != dir->children.end() && it->second.layer < layer) dir->children.erase(it);
  return Status::Ok();
}

namespace {

// What an entry says of its inode's metadata.
void SetMeta(TreeInode* n, const TarEntry& e) {
  n->mode = e.mode;
  n->uid = e.uid;
  n->gid = e.gid;
  n->mtime_sec = e.mtime_sec;
  n->mtime_nsec = e.mtime_nsec;
  n->xattrs = e.xattrs;
}

}  // namespace

Status RootfsTree::Admit(const TarEntry& e) {
  if (++entries_ > limits_.max_entries)
    return Status::ResourceExhausted("the image has more than " +
                                     std::to_string(limits_.max_entries) + " entries");
  if (e.type == TarType::kCharDevice || e.type == TarType::kBlockDevice)
    return Status::InvalidArgument("device nodes are refused");
  if (e.type == TarType::kSymlink && (e.link_target.empty() || e.link_target.size() >= kMaxSymlink))
    return Status::InvalidArgument("a symlink target must be 1 to " +
                                   std::to_string(kMaxSymlink - 1) + " bytes");
  if (e.type != TarType::kFile) return Status::Ok();
  if (e.size > limits_.max_file_bytes)
    return Status::ResourceExhausted("a file of " + std::to_string(e.size) +
                                     " bytes is over the limit of " +
                                     std::to_string(limits_.max_file_bytes));
  total_bytes_ += e.size;
  if (total_bytes_ > limits_.max_total_bytes)
    return Status::ResourceExhausted("the image's files add up to more than " +
                                     std::to_string(limits_.max_total_bytes) + " bytes");
  return Status::Ok();
}

Status RootfsTree::HardLink(TreeInode* dir, const std::string& name, const TarEntry& e,
                            uint32_t layer) {
  ASSIGN_OR_RETURN(std::vector<std::string> tparts, SplitImagePath(e.link_target));
  const TreeInode* target = tparts.empty() ? root_.get() : Find(e.link_target);
  if (target == nullptr)
    return Status::InvalidArgument("hard link to '" + e.link_target +
                                   "', which is not in the image");
  if (target->type == TarType::kDirectory)
    return Status::InvalidArgument("hard link to the directory '" + e.link_target + "'");
  // Find() found it through directories only: share it by its owning pointer.
  TreeInode* tdir = root_.get();
  for (size_t i = 0; i + 1 < tparts.size(); ++i) tdir = tdir->children.at(tparts[i]).inode.get();
  std::shared_ptr<TreeInode> shared = tdir->children.at(tparts.back()).inode;
  dir->children[name] = TreeChild{std::move(shared), layer};
  return Status::Ok();
}

Status RootfsTree::Apply(uint32_t layer, uint64_t ordinal, const TarEntry& e) {
  RETURN_IF_ERROR(Admit(e));
  ASSIGN_OR_RETURN(std::vector<std::string> parts, SplitImagePath(e.path));
  if (parts.empty()) {
    // The root itself: only its metadata can change.
    if (e.type != TarType::kDirectory)
      return Status::InvalidArgument("the image root must be a directory");
    SetMeta(root_.get(), e);
    return Status::Ok();
  }
  ASSIGN_OR_RETURN(TreeInode * dir, Parent(parts, layer));
  const std::string& name = parts.back();
  if (name.rfind(kWhiteout, 0) == 0) return Whiteout(dir, name, layer);
  if (e.type == TarType::kHardLink) return HardLink(dir, name, e, layer);

  auto it = dir->children.find(name);
  if (e.type == TarType::kDirectory && it != dir->children.end() &&
      it->second.inode->type == TarType::kDirectory) {
    SetMeta(it->second.inode.get(), e);  // directory over directory: merged
    it->second.layer = layer;
    return Status::Ok();
  }
  auto n = std::make_shared<TreeInode>();
  n->type = e.type;
  SetMeta(n.get(), e);
  if (e.type == TarType::kFile) {
    n->size = e.size;
    n->layer = layer;
    n->ordinal = ordinal;
  } else if (e.type == TarType::kSymlink) {
    n->symlink_target = e.link_target;
  }
  dir->children[name] = TreeChild{std::move(n), layer};
  return Status::Ok();
}

Status RootfsTree::PutFile(const std::string& path, uint32_t mode, std::string content) {
  ASSIGN_OR_RETURN(std::vector<std::string> parts, SplitImagePath(path));
  if (parts.empty()) return Status::InvalidArgument("PutFile needs a file path");
  // The builder's own files win over the image's: a parent that is not a
  // directory is replaced by one.
  TreeInode* dir = root_.get();
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    TreeChild& c = dir->children[parts[i]];
    if (!c.inode || c.inode->type != TarType::kDirectory) c.inode = std::make_shared<TreeInode>();
    dir = c.inode.get();
  }
  auto n = std::make_shared<TreeInode>();
  n->type = TarType::kFile;
  n->mode = mode;
  n->size = content.size();
  n->inline_content = true;
  n->content = std::move(content);
  dir->children[parts.back()] = TreeChild{std::move(n), UINT32_MAX};
  return Status::Ok();
}

Status RootfsTree::EnsureDir(const std::string& path, uint32_t mode) {
  ASSIGN_OR_RETURN(std::vector<std::string> parts, SplitImagePath(path));
  if (parts.size() != 1) return Status::InvalidArgument("EnsureDir takes a top-level name");
  auto& children = root_->children;
  if (children.count(parts[0])) return Status::Ok();
  auto n = std::make_shared<TreeInode>();
  n->mode = mode;
  children.emplace(parts[0], TreeChild{std::move(n), UINT32_MAX});
  return Status::Ok();
}

const TreeInode* RootfsTree::Find(const std::string& path) const {
  auto parts = SplitImagePath(path);
  if (!parts.ok()) return nullptr;
  const TreeInode* n = root_.get();
  for (const auto& c : *parts) {
    if (n->type != TarType::kDirectory) return nullptr;
    auto it = n->children.find(c);
    if (it == n->children.end()) return nullptr;
    n = it->second.inode.get();
  }
  return n;
}

TreeStats RootfsTree::Stats() const {
  TreeStats s;
  std::set<const TreeInode*> seen;
  std::function<void(const TreeInode&)> walk = [&](const TreeInode& n) {
    if (!seen.insert(&n).second) return;
    ++s.inodes;
    if (!n.xattrs.empty()) s.data_blocks += 1;  // at worst one xattr block each
    switch (n.type) {
      case TarType::kFile:
        s.file_bytes += n.size;
        s.data_blocks += Blocks(n.size);
        break;
      case TarType::kSymlink:
        if (n.symlink_target.size() >= 60) s.data_blocks += 1;  // not a fast symlink
        break;
      case TarType::kDirectory: {
        uint64_t bytes = 24;  // "." and ".."
        for (const auto& [name, c] : n.children) {
          bytes += 8 + ((name.size() + 3) & ~size_t{3});
          walk(*c.inode);
        }
        s.data_blocks += Blocks(bytes) + 1;  // and a spare for slack at block ends
        break;
      }
      default:
        break;
    }
  };
  walk(*root_);
  return s;
}

std::map<uint64_t, TreeInode*> RootfsTree::FilesOfLayer(uint32_t layer) const {
  std::map<uint64_t, TreeInode*> out;
  std::function<void(TreeInode&)> walk = [&](TreeInode& n) {
    for (auto& [name, c] : n.children) {
      TreeInode& k = *c.inode;
      if (k.type == TarType::kDirectory)
        walk(k);
      else if (k.type == TarType::kFile && !k.inline_content && k.layer == layer)
        out[k.ordinal] = &k;
    }
  };
  walk(*root_);
  return out;
}

}  // namespace kubicle::noderuntime::oci
