// The two JSON files of a snapshot directory: `meta.json` (what the snapshot
// is, sizes and digests of its files) and `disk` (the copy-on-write layer
// chains its block devices reference, an index tools can read without
// decoding `state`). Internal to SnapshotDir; exposed for tests and tools.
//
// Contract: Parse* never throws; malformed JSON, missing or mistyped fields
// and an unknown major version are DataLoss / FailedPrecondition naming the
// field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "snapshot/disk_chain.h"
#include "snapshot/state.h"

namespace kubicle::snapshot {

inline constexpr int kMetaFormatMajor = 1;
inline constexpr int kMetaFormatMinor = 0;

struct FileDigest {
  uint64_t size = 0;
  std::string sha256;  // hex; for `memory` the chunked digest (digest.h)
  bool operator==(const FileDigest&) const = default;
};

struct SnapshotMeta {
  // Set by the caller of SnapshotDir::Write.
  std::string template_name;
  std::string kernel;
  // Filled in by SnapshotDir::Write.
  std::string created_at;  // RFC 3339, UTC
  uint64_t mem_bytes = 0;
  uint32_t vcpus = 0;
  FileDigest state;
  FileDigest memory;       // sha256 empty when the memory digest was skipped
  uint64_t memory_data_bytes = 0;
  FileDigest disk;
  bool operator==(const SnapshotMeta&) const = default;
};

std::string MetaToJson(const SnapshotMeta& meta);
Result<SnapshotMeta> ParseMeta(const std::string& json);

// The `disk` index: one entry per disk of the snapshot, the files it needs.
// Written by the VMM beside the state (whose block device records hold the
// same chains), read by tools and by layer garbage collection, which need
// not decode device records.
struct DiskIndexEntry {
  uint32_t slot = 0;   // the virtio-mmio slot of its block device
  std::string serial;  // GET_ID string
  bool read_only = false;
  DiskChain chain;     // frozen layers the disk was on at snapshot time
  bool operator==(const DiskIndexEntry&) const = default;
};
std::string DiskIndexToJson(const std::vector<DiskIndexEntry>& disks);
// Never throws: malformed JSON, missing or mistyped fields, a bad layer id
// or two disks in one slot are DataLoss; another version FailedPrecondition.
Result<std::vector<DiskIndexEntry>> ParseDiskIndex(const std::string& json);

}  // namespace kubicle::snapshot
