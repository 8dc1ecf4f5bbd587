#include "snapshot/layered_disk.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file_io.h"
#include "snapshot/iov_cursor.h"

namespace kubicle::snapshot {
namespace {

constexpr uint8_t kBaseOwner = 0xff;
static_assert(LayeredDisk::kMaxLayers < kBaseOwner);

using internal::IovBytes;
using internal::IovCursor;

}  // namespace

// Where a cluster's current bytes are: the overlay, a frozen layer, the base.
struct LayeredDisk::Source {
  static constexpr int kOverlay = -1;
  static constexpr int kBase = -2;
  int where = kBase;
  bool operator==(const Source&) const = default;
};

LayeredDisk::~LayeredDisk() = default;

namespace {

Status OpenChainInto(const DiskChain& chain, std::string* base_path, UniqueFd* base, uint64_t* size,
                     uint32_t* shift, std::vector<std::unique_ptr<LayerFile>>* frozen) {
  if (chain.layers.size() > LayeredDisk::kMaxLayers) {
    return Status::InvalidArgument("disk chain has " + std::to_string(chain.layers.size()) +
                                   " layers, more than " + std::to_string(LayeredDisk::kMaxLayers));
  }
  base->reset(::open(chain.base_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!*base) return Status::FromErrno("open base image " + chain.base_path);
  struct stat st{};
  if (::fstat(base->get(), &st) < 0) return Status::FromErrno("stat base image " + chain.base_path);
  auto base_size = static_cast<uint64_t>(st.st_size);
  if (chain.size != 0 && chain.size != base_size) {
    return Status::FailedPrecondition("base image " + chain.base_path + " is " +
                                      std::to_string(base_size) + " bytes, the chain expects " +
                                      std::to_string(chain.size));
  }
  *base_path = chain.base_path;
  *size = base_size;
  LayerId expected_parent{};
  for (size_t i = 0; i < chain.layers.size(); ++i) {
    const LayerRef& ref = chain.layers[i];
    ASSIGN_OR_RETURN(std::unique_ptr<LayerFile> layer, LayerFile::Open(ref.path, false));
    if (layer->id() != ref.id) {
      return Status::FailedPrecondition("disk layer " + ref.path + " has id " +
                                        LayerIdHex(layer->id()) + ", the chain expects " +
                                        LayerIdHex(ref.id));
    }
    if (layer->parent() != expected_parent) {
      return Status::FailedPrecondition("disk layer " + ref.path + " sits on " +
                                        LayerIdHex(layer->parent()) + ", not on layer " +
                                        std::to_string(i) + " of the chain below it");
    }
    if (layer->virtual_size() != base_size || (i > 0 && layer->cluster_shift() != *shift)) {
      return Status::FailedPrecondition("disk layer " + ref.path +
                                        " has a different size or cluster size than its chain");
    }
    *shift = layer->cluster_shift();
    expected_parent = layer->id();
    frozen->push_back(std::move(layer));
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<LayeredDisk>> LayeredDisk::Create(const DiskChain& chain,
                                                         const std::string& overlay_path,
                                                         uint32_t cluster_shift) {
  std::unique_ptr<LayeredDisk> d(new LayeredDisk());
  d->cluster_shift_ = cluster_shift;
  RETURN_IF_ERROR(OpenChainInto(chain, &d->base_path_, &d->base_, &d->size_, &d->cluster_shift_,
                                &d->frozen_));
  ASSIGN_OR_RETURN(d->overlay_, d->NewOverlay(overlay_path));
  d->RebuildOwners();
  return d;
}

Result<std::unique_ptr<LayeredDisk>> LayeredDisk::OpenExisting(const DiskChain& chain,
                                                               const std::string& overlay_path) {
  std::unique_ptr<LayeredDisk> d(new LayeredDisk());
  RETURN_IF_ERROR(OpenChainInto(chain, &d->base_path_, &d->base_, &d->size_, &d->cluster_shift_,
                                &d->frozen_));
  ASSIGN_OR_RETURN(d->overlay_, LayerFile::Open(overlay_path, true));
  LayerId top = d->frozen_.empty() ? LayerId{} : d->frozen_.back()->id();
  if (d->overlay_->parent() != top) {
    return Status::FailedPrecondition("overlay " + overlay_path + " does not sit on this chain");
  }
  if (d->overlay_->virtual_size() != d->size_ ||
      (!d->frozen_.empty() && d->overlay_->cluster_shift() != d->cluster_shift_)) {
    return Status::FailedPrecondition("overlay " + overlay_path + " geometry differs from its chain");
  }
  d->cluster_shift_ = d->overlay_->cluster_shift();
  d->RebuildOwners();
  return d;
}

Result<std::unique_ptr<LayerFile>> LayeredDisk::NewOverlay(const std::string& path) const {
  LayerId parent = frozen_.empty() ? LayerId{} : frozen_.back()->id();
  return LayerFile::Create(path, size_, parent, {.cluster_shift = cluster_shift_, .id = {}, .durable = false});
}

void LayeredDisk::RebuildOwners() {
  uint64_t clusters = (size_ + (uint64_t{1} << cluster_shift_) - 1) >> cluster_shift_;
  owner_.assign(clusters, kBaseOwner);
  for (size_t i = 0; i < frozen_.size(); ++i) {
    const std::vector<uint64_t>& bits = frozen_[i]->bitmap();
    for (size_t w = 0; w < bits.size(); ++w) {
      for (uint64_t word = bits[w]; word != 0; word &= word - 1) {
        owner_[w * 64 + static_cast<uint64_t>(__builtin_ctzll(word))] = static_cast<uint8_t>(i);
      }
    }
  }
  cluster_buf_.resize(uint64_t{1} << cluster_shift_);
}

LayeredDisk::Source LayeredDisk::SourceOf(uint64_t cluster) const {
  if (overlay_->allocated(cluster)) return {Source::kOverlay};
  uint8_t owner = owner_[cluster];
  return {owner == kBaseOwner ? Source::kBase : owner};
}

Status LayeredDisk::ReadFrom(const Source& src, uint64_t offset, std::span<const iovec> iov) const {
  if (src.where == Source::kOverlay) return overlay_->Read(offset, iov);
  if (src.where == Source::kBase) return TransferAll(base_.get(), offset, iov, false, "base image shorter than the disk");
  return frozen_[static_cast<size_t>(src.where)]->Read(offset, iov);
}

Status LayeredDisk::ReadV(uint64_t offset, std::span<const iovec> iov) {
  uint64_t total = IovBytes(iov);
  if (offset > size_ || total > size_ - offset) return Status::OutOfRange("read past the end of the disk");
  std::lock_guard lock(mu_);
  IovCursor cursor(iov);
  std::vector<iovec> pieces;
  uint64_t cs = uint64_t{1} << cluster_shift_;
  for (uint64_t pos = offset, end = offset + total; pos < end;) {
    Source src = SourceOf(pos >> cluster_shift_);
    uint64_t run_end = std::min(end, ((pos >> cluster_shift_) + 1) * cs);
    while (run_end < end && SourceOf(run_end >> cluster_shift_) == src) {
      run_end = std::min(end, run_end + cs);
    }
    pieces.clear();
    cursor.Take(run_end - pos, pieces);
    RETURN_IF_ERROR(ReadFrom(src, pos, pieces));
    pos = run_end;
  }
  return Status::Ok();
}

Status LayeredDisk::CopyUpAndWrite(uint64_t cluster, uint64_t within, std::span<const iovec> iov) {
  uint64_t start = cluster << cluster_shift_;
  uint64_t len = std::min(uint64_t{1} << cluster_shift_, size_ - start);
  iovec whole{cluster_buf_.data(), len};
  RETURN_IF_ERROR(ReadFrom(SourceOf(cluster), start, {&whole, 1}));
  IovCursor(iov).CopyOut(cluster_buf_.data() + within, IovBytes(iov));
  RETURN_IF_ERROR(overlay_->Write(start, {&whole, 1}));
  overlay_->MarkAllocated(cluster);
  return Status::Ok();
}

Status LayeredDisk::WriteV(uint64_t offset, std::span<const iovec> iov) {
  uint64_t total = IovBytes(iov);
  if (offset > size_ || total > size_ - offset) return Status::OutOfRange("write past the end of the disk");
  std::lock_guard lock(mu_);
  IovCursor cursor(iov);
  std::vector<iovec> pieces;
  uint64_t cs = uint64_t{1} << cluster_shift_;
  auto cluster_end = [&](uint64_t c) { return std::min((c + 1) * cs, size_); };
  // A cluster can be written in place when the overlay has it or the write
  // covers all of it; otherwise it needs a copy-up first.
  auto direct = [&](uint64_t pos, uint64_t end) {
    uint64_t c = pos >> cluster_shift_;
    return overlay_->allocated(c) || (pos == c * cs && end >= cluster_end(c));
  };
  for (uint64_t pos = offset, end = offset + total; pos < end;) {
    uint64_t c = pos >> cluster_shift_;
    uint64_t n = std::min(end, cluster_end(c)) - pos;
    pieces.clear();
    if (!direct(pos, end)) {
      cursor.Take(n, pieces);
      RETURN_IF_ERROR(CopyUpAndWrite(c, pos - c * cs, pieces));
      pos += n;
      continue;
    }
    uint64_t run_end = pos + n;
    while (run_end < end && direct(run_end, end)) run_end = std::min(end, cluster_end(run_end >> cluster_shift_));
    cursor.Take(run_end - pos, pieces);
    RETURN_IF_ERROR(overlay_->Write(pos, pieces));
    for (uint64_t k = c; k <= (run_end - 1) >> cluster_shift_; ++k) overlay_->MarkAllocated(k);
    pos = run_end;
  }
  return Status::Ok();
}

Status LayeredDisk::Flush() {
  std::lock_guard lock(mu_);
  return overlay_->Sync();
}

Result<DiskChain> LayeredDisk::Freeze(const std::string& new_overlay_path) {
  std::lock_guard lock(mu_);
  if (frozen_.size() >= kMaxLayers) {
    return Status::ResourceExhausted("disk chain already has " + std::to_string(kMaxLayers) +
                                     " frozen layers: flatten it before freezing again");
  }
  // The new overlay sits on the one being frozen; create it first so a
  // failure leaves the disk as it was.
  ASSIGN_OR_RETURN(std::unique_ptr<LayerFile> next,
                   LayerFile::Create(new_overlay_path, size_, overlay_->id(),
                                     {.cluster_shift = cluster_shift_, .id = {}, .durable = false}));
  Status sealed = overlay_->Seal();
  if (!sealed.ok()) {
    next.reset();
    ::unlink(new_overlay_path.c_str());
    return sealed;
  }
  frozen_.push_back(std::move(overlay_));
  overlay_ = std::move(next);
  auto top = static_cast<uint8_t>(frozen_.size() - 1);
  const std::vector<uint64_t>& bits = frozen_.back()->bitmap();
  for (size_t w = 0; w < bits.size(); ++w) {
    for (uint64_t word = bits[w]; word != 0; word &= word - 1) {
      owner_[w * 64 + static_cast<uint64_t>(__builtin_ctzll(word))] = top;
    }
  }
  DiskChain c{base_path_, size_, {}};
  for (const auto& l : frozen_) c.layers.push_back({l->path(), l->id()});
  return c;
}

Status LayeredDisk::ReplaceOverlay(const std::string& new_overlay_path) {
  std::lock_guard lock(mu_);
  LayerId parent = frozen_.empty() ? LayerId{} : frozen_.back()->id();
  ASSIGN_OR_RETURN(std::unique_ptr<LayerFile> next,
                   LayerFile::Create(new_overlay_path, size_, parent,
                                     {.cluster_shift = cluster_shift_, .id = {}, .durable = false}));
  overlay_ = std::move(next);
  return Status::Ok();
}

DiskChain LayeredDisk::chain() const {
  std::lock_guard lock(mu_);
  DiskChain c{base_path_, size_, {}};
  for (const auto& l : frozen_) c.layers.push_back({l->path(), l->id()});
  return c;
}

std::string LayeredDisk::overlay_path() const {
  std::lock_guard lock(mu_);
  return overlay_->path();
}

bool LayeredDisk::NeedsFlatten() const {
  std::lock_guard lock(mu_);
  return frozen_.size() > kFlattenThreshold;
}

Result<LayerRef> LayeredDisk::Flatten(const std::string& out_path) {
  DiskChain snapshot = chain();
  if (snapshot.layers.size() < 2) return Status::FailedPrecondition("nothing to flatten");
  size_t count = snapshot.layers.size();
  ASSIGN_OR_RETURN(LayerRef merged, FlattenLayers(snapshot, 0, count, out_path));
  RETURN_IF_ERROR(SwapLayers(0, count, merged));
  return merged;
}

Status LayeredDisk::SwapLayers(size_t first, size_t count, const LayerRef& merged) {
  ASSIGN_OR_RETURN(std::unique_ptr<LayerFile> layer, LayerFile::Open(merged.path, false));
  std::lock_guard lock(mu_);
  if (count == 0 || first + count > frozen_.size()) {
    return Status::InvalidArgument("layer range to swap is outside the chain");
  }
  LayerId below = first == 0 ? LayerId{} : frozen_[first - 1]->id();
  if (layer->id() != merged.id || layer->id() != frozen_[first + count - 1]->id() ||
      layer->parent() != below) {
    return Status::FailedPrecondition("layer " + merged.path +
                                      " is not a flatten of the layers it would replace");
  }
  if (layer->virtual_size() != size_ || layer->cluster_shift() != cluster_shift_) {
    return Status::FailedPrecondition("layer " + merged.path + " geometry differs from the chain");
  }
  frozen_.erase(frozen_.begin() + static_cast<ptrdiff_t>(first),
                frozen_.begin() + static_cast<ptrdiff_t>(first + count));
  frozen_.insert(frozen_.begin() + static_cast<ptrdiff_t>(first), std::move(layer));
  RebuildOwners();
  return Status::Ok();
}

}  // namespace kubicle::snapshot
