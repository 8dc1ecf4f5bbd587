#include "noderuntime/oci/rootfs_layer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <vector>

#include "common/sha256.h"
#include "common/unique_fd.h"

namespace kubicle::noderuntime::oci {

namespace {
constexpr size_t kInChunk = 256 << 10;
// zstd's default limit too (ZSTD_WINDOWLOG_LIMIT_DEFAULT), set explicitly:
// a frame's window is memory the decoder allocates.
constexpr int kZstdWindowLogMax = 27;

}  // namespace

Result<LayerCompression> CompressionOf(const std::string& media_type) {
  static const char* kOciPrefixes[] = {"application/vnd.oci.image.layer.v1.tar",
                                       "application/vnd.oci.image.layer.nondistributable.v1.tar"};
  for (const char* p : kOciPrefixes) {
    const std::string prefix = p;
    if (media_type == prefix) return LayerCompression::kNone;
    if (media_type == prefix + "+gzip") return LayerCompression::kGzip;
    if (media_type == prefix + "+zstd") return LayerCompression::kZstd;
  }
  if (media_type == "application/vnd.docker.image.rootfs.diff.tar.gzip" ||
      media_type == "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip")
    return LayerCompression::kGzip;
  if (media_type == "application/vnd.docker.image.rootfs.diff.tar") return LayerCompression::kNone;
  return Status::InvalidArgument("unknown layer media type '" + media_type.substr(0, 128) + "'");
}

struct LayerStream::Impl {
  LayerBlob layer;
  Options options;
  LayerCompression compression = LayerCompression::kNone;
  UniqueFd fd;
  uint64_t file_size = 0;
  uint64_t in_total = 0;
  bool raw_eof = false;
  Sha256 hash;
  std::vector<char> in;
  z_stream zs{};
  bool z_open = false;
  bool member_done = false;  // a gzip member ended; another may follow
  ZSTD_DStream* zd = nullptr;
  ZSTD_inBuffer zin{nullptr, 0, 0};
  size_t zstd_hint = 1;  // ZSTD_decompressStream's last result: 0 = frame complete

  ~Impl() {
    if (z_open) inflateEnd(&zs);
    if (zd) ZSTD_freeDStream(zd);
  }
};

LayerStream::LayerStream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LayerStream::~LayerStream() = default;

Result<std::unique_ptr<LayerStream>> LayerStream::Open(const LayerBlob& layer, Options options) {
  auto impl = std::make_unique<Impl>();
  impl->layer = layer;
  impl->options = options;
  ASSIGN_OR_RETURN(impl->compression, CompressionOf(layer.media_type));
  if (layer.digest.rfind("sha256:", 0) != 0 || !IsSha256Hex(layer.digest.substr(7)))
    return Status::InvalidArgument("layer digest '" + layer.digest.substr(0, 80) +
                                   "' is not sha256:<hex>");
  impl->fd.reset(::open(layer.path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!impl->fd) return Status::FromErrno("opening layer " + layer.digest + " at " + layer.path);
  struct stat st {};
  if (::fstat(impl->fd.get(), &st) != 0) return Status::FromErrno("stat of layer " + layer.digest);
  if (!S_ISREG(st.st_mode))
    return Status::InvalidArgument("layer " + layer.digest + " is not a regular file");
  impl->file_size = static_cast<uint64_t>(st.st_size);
  if (layer.size != 0 && impl->file_size != layer.size)
    return Status::DataLoss("layer " + layer.digest + " has " + std::to_string(impl->file_size) +
                            " bytes on disk, its descriptor says " + std::to_string(layer.size));
  impl->in.resize(kInChunk);
  if (impl->compression == LayerCompression::kGzip) {
    // 16 + MAX_WBITS: a gzip wrapper, not zlib's or raw deflate.
    if (inflateInit2(&impl->zs, 16 + MAX_WBITS) != Z_OK)
      return Status::ResourceExhausted("zlib could not start an inflate stream");
    impl->z_open = true;
  } else if (impl->compression == LayerCompression::kZstd) {
    impl->zd = ZSTD_createDStream();
    if (!impl->zd ||
        ZSTD_isError(ZSTD_DCtx_setParameter(impl->zd, ZSTD_d_windowLogMax, kZstdWindowLogMax)))
      return Status::ResourceExhausted("libzstd could not start a decoder");
  }
  return std::unique_ptr<LayerStream>(new LayerStream(std::move(impl)));
}

Result<size_t> LayerStream::ReadRaw(char* buf, size_t max) {
  for (;;) {
    const ssize_t n = ::read(impl_->fd.get(), buf, max);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno("reading layer " + impl_->layer.digest);
    impl_->hash.Update(std::string_view(buf, static_cast<size_t>(n)));
    impl_->in_total += static_cast<uint64_t>(n);
    if (n == 0) impl_->raw_eof = true;
    return static_cast<size_t>(n);
  }
}

Result<size_t> LayerStream::Inflate(char* buf, size_t max) {
  z_stream& zs = impl_->zs;
  for (;;) {
    if (zs.avail_in == 0 && !impl_->raw_eof) {
      ASSIGN_OR_RETURN(size_t n, ReadRaw(impl_->in.data(), impl_->in.size()));
      zs.next_in = reinterpret_cast<Bytef*>(impl_->in.data());
      zs.avail_in = static_cast<uInt>(n);
    }
    if (impl_->member_done) {
      if (zs.avail_in == 0 && impl_->raw_eof) return size_t{0};
      if (zs.avail_in == 0) continue;
      inflateReset(&zs);  // a concatenated gzip member (pigz writes these)
      impl_->member_done = false;
    }
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = static_cast<uInt>(max);
    const int rc = inflate(&zs, Z_NO_FLUSH);
    const size_t produced = max - zs.avail_out;
    if (rc == Z_STREAM_END) {
      impl_->member_done = true;
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      return Status::DataLoss("corrupt gzip stream in layer " + impl_->layer.digest +
                              " at compressed byte " +
                              std::to_string(impl_->in_total - zs.avail_in) + ": " +
                              (zs.msg ? zs.msg : "inflate error " + std::to_string(rc)));
    }
    if (produced > 0) return produced;
    if (rc != Z_STREAM_END && zs.avail_in == 0 && impl_->raw_eof)
      return Status::DataLoss("truncated gzip stream in layer " + impl_->layer.digest);
  }
}

Result<size_t> LayerStream::Unzstd(char* buf, size_t max) {
  ZSTD_inBuffer& in = impl_->zin;
  for (;;) {
    if (in.pos == in.size && !impl_->raw_eof) {
      ASSIGN_OR_RETURN(size_t n, ReadRaw(impl_->in.data(), impl_->in.size()));
      in = ZSTD_inBuffer{impl_->in.data(), n, 0};
    }
    if (in.pos == in.size && impl_->raw_eof) {
      if (impl_->zstd_hint == 0) return size_t{0};
      return Status::DataLoss("truncated zstd stream in layer " + impl_->layer.digest);
    }
    ZSTD_outBuffer out{buf, max, 0};
    const size_t rc = ZSTD_decompressStream(impl_->zd, &out, &in);
    if (ZSTD_isError(rc))
      return Status::DataLoss(
          "corrupt zstd stream in layer " + impl_->layer.digest + " at compressed byte " +
          std::to_string(impl_->in_total - (in.size - in.pos)) + ": " + ZSTD_getErrorName(rc));
    impl_->zstd_hint = rc;
    if (out.pos > 0) return out.pos;
  }
}

Result<size_t> LayerStream::Read(char* buf, size_t max) {
  if (max == 0) return size_t{0};
  size_t n = 0;
  switch (impl_->compression) {
    case LayerCompression::kNone: {
      ASSIGN_OR_RETURN(n, ReadRaw(buf, max));
      break;
    }
    case LayerCompression::kGzip: {
      ASSIGN_OR_RETURN(n, Inflate(buf, max));
      break;
    }
    case LayerCompression::kZstd: {
      ASSIGN_OR_RETURN(n, Unzstd(buf, max));
      break;
    }
  }
  out_total_ += n;
  if (impl_->compression != LayerCompression::kNone &&
      out_total_ > impl_->options.ratio_allowance &&
      static_cast<double>(out_total_) >
          impl_->options.max_ratio * static_cast<double>(impl_->file_size))
    return Status::ResourceExhausted(
        "layer " + impl_->layer.digest + " inflates to more than " +
        std::to_string(static_cast<uint64_t>(impl_->options.max_ratio)) + " times its " +
        std::to_string(impl_->file_size) + " compressed bytes: refused as a decompression bomb");
  return n;
}

Status LayerStream::Finish() {
  if (impl_->compression != LayerCompression::kNone) {
    // Decompress what follows the tar's end too (its padding, in
    // practice): gzip's CRC and zstd's checksum are checked only at the end
    // of a member or frame, and corruption must not pass because the tar
    // ended first.
    std::vector<char> scratch(64 << 10);
    for (;;) {
      ASSIGN_OR_RETURN(size_t n, Read(scratch.data(), scratch.size()));
      if (n == 0) break;
    }
  }
  while (!impl_->raw_eof) {
    ASSIGN_OR_RETURN(size_t n, ReadRaw(impl_->in.data(), impl_->in.size()));
    (void)n;
  }
  if (impl_->in_total != impl_->file_size)
    return Status::DataLoss("layer " + impl_->layer.digest + " changed size while it was read");
  const std::string got = "sha256:" + impl_->hash.FinalHex();
  if (got != impl_->layer.digest)
    return Status::DataLoss("layer " + impl_->layer.digest +
                            " does not match its digest (its bytes hash to " + got + ")");
  return Status::Ok();
}

}  // namespace kubicle::noderuntime::oci
