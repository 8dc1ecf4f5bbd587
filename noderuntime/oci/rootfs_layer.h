// LayerStream: one image layer's file as a stream of tar bytes: read in
// 256 KiB pieces, decompressed by its media type (gzip through zlib's
// streaming inflate, zstd through libzstd's streaming decoder), hashed on
// the way, never whole in memory.
//
// Contracts:
//  - Media types: OCI `application/vnd.oci.image.layer.v1.tar`,
//    `...tar+gzip` and `...tar+zstd` (also their `nondistributable` forms),
//    Docker `application/vnd.docker.image.rootfs.diff.tar.gzip` (and
//    `foreign`); any other type is InvalidArgument. A zstd frame asking for
//    a window over 128 MiB (memory the decoder would allocate) is refused.
//  - A decompression bomb is refused while it inflates: more than
//    `max_ratio` uncompressed bytes per compressed byte of the file (past
//    `ratio_allowance` bytes, so a tiny layer's tar padding is not a bomb).
//  - A corrupt or truncated gzip or zstd stream is DataLoss; gzip members
//    and zstd frames may be concatenated; anything after the last is
//    DataLoss.
//  - Finish() decompresses to the end (gzip CRCs, zstd checksums) and
//    checks the file's SHA-256 against the layer's digest (the store
//    verified it once; this catches a blob changed on disk since) and its
//    size against LayerBlob::size.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "noderuntime/oci/image.h"
#include "noderuntime/oci/tar_reader.h"

namespace kubicle::noderuntime::oci {

enum class LayerCompression { kNone, kGzip, kZstd };

// The compression a layer media type names, or why it cannot be read.
Result<LayerCompression> CompressionOf(const std::string& media_type);

class LayerStream : public ByteSource {
 public:
  struct Options {
    double max_ratio = 200;
    uint64_t ratio_allowance = 1 << 20;
  };
  static Result<std::unique_ptr<LayerStream>> Open(const LayerBlob& layer, Options options);
  ~LayerStream() override;

  Result<size_t> Read(char* buf, size_t max) override;
  // Reads the rest of the stream (decompressing it: checksums are checked
  // at each member's or frame's end) and checks the file's digest and size.
  Status Finish();
  uint64_t uncompressed_bytes() const { return out_total_; }

 private:
  struct Impl;
  explicit LayerStream(std::unique_ptr<Impl> impl);
  Result<size_t> ReadRaw(char* buf, size_t max);
  Result<size_t> Inflate(char* buf, size_t max);
  Result<size_t> Unzstd(char* buf, size_t max);

  std::unique_ptr<Impl> impl_;
  uint64_t out_total_ = 0;
};

}  // namespace kubicle::noderuntime::oci
