#include "noderuntime/oci/rootfs_builder.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "noderuntime/oci/rootfs_ext4.h"
#include "noderuntime/oci/rootfs_layer.h"
#include "noderuntime/oci/rootfs_tree.h"
#include "noderuntime/oci/tar_reader.h"

namespace kubicle::noderuntime::oci {

namespace {

constexpr uint64_t kMiB = 1 << 20;

// The guest's mount points (docs/guest.md), made when an image lacks them.
struct GuestDir {
  const char* name;
  uint32_t mode;
};
constexpr GuestDir kGuestDirs[] = {
    {"proc", 0555}, {"sys", 0555}, {"dev", 0755}, {"tmp", 01777}, {"run", 0755}};

// Calls progress at most about once a second.
class Ticker {
 public:
  explicit Ticker(const RootfsProgressFn& fn) : fn_(fn) {}
  void Tick(const std::function<std::string()>& message, bool force = false) {
    if (!fn_) return;
    const auto now = std::chrono::steady_clock::now();
    if (!force && now - last_ < std::chrono::seconds(1)) return;
    last_ = now;
    fn_(message());
  }

 private:
  const RootfsProgressFn& fn_;
  std::chrono::steady_clock::time_point last_{};
};

std::string LayerName(size_t i, size_t n, const LayerBlob& l) {
  return "layer " + std::to_string(i + 1) + " of " + std::to_string(n) + " (" +
         l.digest.substr(0, 19) + ")";
}

Status InLayer(const Status& s, const std::string& layer, const std::string& entry = "") {
  std::string m = layer + ": ";
  if (!entry.empty()) m += "entry '" + entry.substr(0, 256) + "': ";
  return Status(s.code(), m + s.message(), s.error_number());
}

// Deletes the image unless the build finished.
class RemoveUnlessKept {
 public:
  explicit RemoveUnlessKept(std::string path) : path_(std::move(path)) {}
  ~RemoveUnlessKept() {
    if (!kept_) ::unlink(path_.c_str());
  }
  void Keep() { kept_ = true; }

 private:
  std::string path_;
  bool kept_ = false;
};

TarLimits TarLimitsOf(const RootfsLimits& l) {
  TarLimits t;
  t.max_path_bytes = l.max_path_bytes;
  return t;
}

Result<std::unique_ptr<LayerStream>> OpenLayer(const LayerBlob& layer, const RootfsLimits& limits) {
  LayerStream::Options o;
  o.max_ratio = limits.max_expansion_ratio;
  o.ratio_allowance = limits.expansion_allowance_bytes;
  return LayerStream::Open(layer, o);
}

// Pass 1: every layer's entries into the tree.
Status ReadLayers(const std::vector<LayerBlob>& layers, const RootfsLimits& limits,
                  RootfsTree* tree, Ticker* ticker) {
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string name = LayerName(i, layers.size(), layers[i]);
    auto stream = OpenLayer(layers[i], limits);
    if (!stream.ok()) return InLayer(stream.status(), name);
    TarReader reader(stream->get(), TarLimitsOf(limits));
    TarEntry e;
    for (uint64_t ordinal = 0;; ++ordinal) {
      auto more = reader.Next(&e);
      if (!more.ok()) return InLayer(more.status(), name);
      if (!*more) break;
      Status st = tree->Apply(static_cast<uint32_t>(i), ordinal, e);
      if (!st.ok()) return InLayer(st, name, e.path);
      ticker->Tick([&] {
        return "unpacking layer " + std::to_string(i + 1) + " of " + std::to_string(layers.size()) +
               ": " + std::to_string((*stream)->uncompressed_bytes() / kMiB) + " MiB";
      });
    }
    Status st = (*stream)->Finish();
    if (!st.ok()) return InLayer(st, name);
  }
  return Status::Ok();
}

// Pass 2, for one layer: the bytes of the result's files it holds.
Status WriteLayerFiles(size_t i, const std::vector<LayerBlob>& layers, const RootfsLimits& limits,
                       const RootfsTree& tree, RootfsImage* image, Ticker* ticker) {
  auto files = tree.FilesOfLayer(static_cast<uint32_t>(i));
  if (files.empty()) return Status::Ok();
  const std::string name = LayerName(i, layers.size(), layers[i]);
  auto stream = OpenLayer(layers[i], limits);
  if (!stream.ok()) return InLayer(stream.status(), name);
  TarReader reader(stream->get(), TarLimitsOf(limits));
  TarEntry e;
  for (uint64_t ordinal = 0; !files.empty(); ++ordinal) {
    auto more = reader.Next(&e);
    if (!more.ok()) return InLayer(more.status(), name);
    if (!*more) break;
    auto it = files.find(ordinal);
    if (it == files.end()) continue;
    if (e.type != TarType::kFile || e.size != it->second->size)
      return InLayer(Status::DataLoss("the layer changed while the image was built"), name, e.path);
    Status st = image->WriteFileData(
        *it->second, [&](char* buf, size_t max) { return reader.ReadData(buf, max); });
    if (!st.ok()) return InLayer(st, name, e.path);
    files.erase(it);
    ticker->Tick([&] {
      return "writing layer " + std::to_string(i + 1) + " of " + std::to_string(layers.size()) +
             ": " + std::to_string((*stream)->uncompressed_bytes() / kMiB) + " MiB";
    });
  }
  if (!files.empty())
    return InLayer(Status::DataLoss("the layer changed while the image was built"), name);
  Status st = (*stream)->Finish();
  if (!st.ok()) return InLayer(st, name);
  return Status::Ok();
}

Status WriteImage(const std::vector<LayerBlob>& layers, const RootfsLimits& limits,
                  const RootfsTree& tree, const std::string& path, uint64_t bytes, uint64_t inodes,
                  Ticker* ticker) {
  ASSIGN_OR_RETURN(auto image, RootfsImage::Create(path, bytes, inodes, limits.mke2fs));
  RETURN_IF_ERROR(image->WriteTree(tree));
  for (size_t i = 0; i < layers.size(); ++i)
    RETURN_IF_ERROR(WriteLayerFiles(i, layers, limits, tree, image.get(), ticker));
  return image->Close();
}

}  // namespace

std::string ImageConfigJson(const ImageConfig& config) {
  nlohmann::json j;
  j["Env"] = config.env;
  j["Entrypoint"] = config.entrypoint;
  j["Cmd"] = config.cmd;
  j["WorkingDir"] = config.working_dir;
  j["User"] = config.user;
  // Names and values came from the registry: invalid UTF-8 is replaced,
  // never a throw.
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

Result<RootfsInfo> BuildRootfs(const std::vector<LayerBlob>& layers, const ImageConfig& config,
                               const std::string& out_path, const RootfsLimits& limits,
                               const RootfsProgressFn& progress) {
  struct stat st {};
  if (::lstat(out_path.c_str(), &st) == 0) return Status::AlreadyExists(out_path + " exists");
  if (layers.empty()) return Status::InvalidArgument("an image without layers");
  Ticker ticker(progress);
  RootfsTree tree(TreeLimits{limits.max_file_bytes, limits.max_total_bytes, limits.max_entries});
  RETURN_IF_ERROR(ReadLayers(layers, limits, &tree, &ticker));
  for (const GuestDir& d : kGuestDirs) RETURN_IF_ERROR(tree.EnsureDir(d.name, d.mode));
  RETURN_IF_ERROR(tree.PutFile("/.kubicle/image.json", 0644, ImageConfigJson(config)));

  // Size: the tree's blocks plus an eighth for extent blocks and slack,
  // the inode tables, and a floor mke2fs is comfortable with. Too small
  // shows as ResourceExhausted while writing: tried once more at twice the
  // size.
  const TreeStats stats = tree.Stats();
  const uint64_t inodes = stats.inodes + stats.inodes / 8 + 64;
  uint64_t bytes = stats.data_blocks * 4096 + stats.data_blocks * 512 + inodes * 256 + 16 * kMiB;
  bytes = (bytes + kMiB - 1) / kMiB * kMiB;
  Status written;
  for (int attempt = 0; attempt < 2; ++attempt, bytes *= 2) {
    RemoveUnlessKept cleanup(out_path);
    written = WriteImage(layers, limits, tree, out_path, bytes, inodes, &ticker);
    if (written.ok()) {
      cleanup.Keep();
      break;
    }
    if (written.code() == StatusCode::kAlreadyExists) cleanup.Keep();  // not ours to remove
    if (written.code() != StatusCode::kResourceExhausted) break;
  }
  if (!written.ok()) return written;
  ticker.Tick([&] { return "rootfs written: " + std::to_string(bytes / kMiB) + " MiB"; }, true);
  RootfsInfo info;
  info.path = out_path;
  info.image_bytes = bytes;
  info.file_bytes = stats.file_bytes;
  info.entries = stats.inodes;
  return info;
}

}  // namespace kubicle::noderuntime::oci
