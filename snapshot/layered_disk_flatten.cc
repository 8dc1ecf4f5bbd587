// FlattenLayers: merging a run of frozen layers into one (layered_disk.h).
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "snapshot/layered_disk.h"

namespace kubicle::snapshot {
namespace {

Status FsyncDirOf(const std::string& path) {
  size_t slash = path.find_last_of('/');
  std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd || ::fsync(fd.get()) < 0) return Status::FromErrno("fsync directory " + dir);
  return Status::Ok();
}

Result<std::vector<std::unique_ptr<LayerFile>>> OpenRun(const DiskChain& chain, size_t first,
                                                        size_t count) {
  std::vector<std::unique_ptr<LayerFile>> run;
  for (size_t i = first; i < first + count; ++i) {
    ASSIGN_OR_RETURN(std::unique_ptr<LayerFile> l, LayerFile::Open(chain.layers[i].path, false));
    if (l->id() != chain.layers[i].id) {
      return Status::FailedPrecondition("disk layer " + chain.layers[i].path +
                                        " does not have the id the chain names");
    }
    if (!run.empty() && (l->parent() != run.back()->id() ||
                         l->cluster_shift() != run.back()->cluster_shift() ||
                         l->virtual_size() != run.back()->virtual_size())) {
      return Status::FailedPrecondition("disk layers to flatten do not form a chain");
    }
    run.push_back(std::move(l));
  }
  return run;
}

// Copies every cluster any layer of the run holds, topmost version wins.
Status CopyClusters(const std::vector<std::unique_ptr<LayerFile>>& run, LayerFile& out) {
  uint64_t cs = out.cluster_size();
  std::vector<uint8_t> buf(cs);
  for (uint64_t c = 0; c < out.cluster_count(); ++c) {
    for (size_t k = run.size(); k-- > 0;) {
      if (!run[k]->allocated(c)) continue;
      uint64_t start = c * cs;
      iovec v{buf.data(), std::min(cs, out.virtual_size() - start)};
      RETURN_IF_ERROR(run[k]->Read(start, {&v, 1}));
      RETURN_IF_ERROR(out.Write(start, {&v, 1}));
      out.MarkAllocated(c);
      break;
    }
  }
  return Status::Ok();
}

}  // namespace

Result<LayerRef> FlattenLayers(const DiskChain& chain, size_t first, size_t count,
                               const std::string& out_path) {
  if (count == 0 || first + count > chain.layers.size()) {
    return Status::InvalidArgument("layer range to flatten is outside the chain");
  }
  ASSIGN_OR_RETURN(std::vector<std::unique_ptr<LayerFile>> run, OpenRun(chain, first, count));
  const LayerFile& top = *run.back();
  std::string tmp = out_path + ".tmp";
  ::unlink(tmp.c_str());  // a previous flatten that died half way
  ASSIGN_OR_RETURN(std::unique_ptr<LayerFile> out,
                   LayerFile::Create(tmp, top.virtual_size(), run.front()->parent(),
                                     {.cluster_shift = top.cluster_shift(), .id = top.id()}));
  Status st = CopyClusters(run, *out);
  if (st.ok()) st = out->Seal();
  if (st.ok() && ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, out_path.c_str(), RENAME_NOREPLACE) < 0) {
    st = Status::FromErrno("rename flattened layer to " + out_path);
  }
  if (st.ok()) st = FsyncDirOf(out_path);
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  return LayerRef{out_path, top.id()};
}

}  // namespace kubicle::snapshot
