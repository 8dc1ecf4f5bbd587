// Codec for the test guest's raw disk messages (DISK_INFO, DISK_READ,
// DISK_WRITE; docs/agent-protocol.md section 5).
#include "guest/protocol/messages.h"
#include "guest/protocol/tlv.h"

namespace kubicle::guest::protocol {

namespace {
template <typename T>
Result<T> Finish(FieldReader& r, T value) {
  if (!r.status().ok()) return r.status();
  return value;
}

// Whole sectors, at most one chunk; empty only when allow_empty.
void CheckSectorData(FieldReader& r, const Bytes& data, bool allow_empty) {
  if (!r.status().ok()) return;
  if (data.empty() && !allow_empty) {
    r.Fail(Status::InvalidArgument("data must hold at least one sector"));
  } else if (data.size() % kDiskSectorSize != 0) {
    r.Fail(Status::InvalidArgument("data must be whole 512-byte sectors"));
  }
}
}  // namespace

Result<DiskInfoRequest> DiskInfoRequest::Decode(ByteSpan payload) {
  FieldReader r(payload);
  return Finish(r, DiskInfoRequest{});
}

Bytes DiskInfoReply::Encode() const {
  TlvBuilder b;
  for (const DiskDescription& d : disks) {
    const size_t mark = b.BeginNested(Tag::kDisk);
    b.U64(Tag::kCapacitySectors, d.capacity_sectors);
    if (d.read_only) b.Bool(Tag::kReadOnly, true);
    if (!d.id.empty()) b.Str(Tag::kDiskId, d.id);
    b.EndNested(mark);
  }
  return b.Take();
}

Result<DiskInfoReply> DiskInfoReply::Decode(ByteSpan payload) {
  FieldReader r(payload);
  DiskInfoReply m;
  for (ByteSpan inner : r.NestedList(Tag::kDisk, kMaxDisks)) {
    FieldReader dr(inner);
    DiskDescription d;
    d.capacity_sectors = dr.Required(dr.U64(Tag::kCapacitySectors), Tag::kCapacitySectors);
    d.read_only = dr.Bool(Tag::kReadOnly);
    d.id = dr.Str(Tag::kDiskId, kMaxDiskIdLen).value_or("");
    if (!dr.status().ok()) {
      return dr.status().WithContext("disk " + std::to_string(m.disks.size()));
    }
    m.disks.push_back(std::move(d));
  }
  return Finish(r, std::move(m));
}

Bytes DiskReadRequest::Encode() const {
  return TlvBuilder()
      .U32(Tag::kDiskIndex, disk)
      .U64(Tag::kSector, sector)
      .U32(Tag::kSectorCount, count)
      .Take();
}

Result<DiskReadRequest> DiskReadRequest::Decode(ByteSpan payload) {
  FieldReader r(payload);
  DiskReadRequest m;
  m.disk = r.Required(r.U32(Tag::kDiskIndex), Tag::kDiskIndex);
  m.sector = r.Required(r.U64(Tag::kSector), Tag::kSector);
  m.count = r.Required(r.U32(Tag::kSectorCount), Tag::kSectorCount);
  if (r.status().ok() && (m.count == 0 || m.count > kMaxDiskSectors)) {
    r.Fail(Status::InvalidArgument("sector_count must be 1.." + std::to_string(kMaxDiskSectors)));
  }
  return Finish(r, m);
}

Bytes DiskReadReply::Encode() const { return TlvBuilder().Bytes(Tag::kData, data).Take(); }

Result<DiskReadReply> DiskReadReply::Decode(ByteSpan payload) {
  FieldReader r(payload);
  DiskReadReply m;
  m.data = r.Required(r.Bytes(Tag::kData, kMaxChunk), Tag::kData);
  CheckSectorData(r, m.data, /*allow_empty=*/false);
  return Finish(r, std::move(m));
}

Bytes DiskWriteRequest::Encode() const {
  TlvBuilder b;
  b.U32(Tag::kDiskIndex, disk).U64(Tag::kSector, sector).Bytes(Tag::kData, data);
  if (flush) b.Bool(Tag::kFlush, true);
  return b.Take();
}

Result<DiskWriteRequest> DiskWriteRequest::Decode(ByteSpan payload) {
  FieldReader r(payload);
  DiskWriteRequest m;
  m.disk = r.Required(r.U32(Tag::kDiskIndex), Tag::kDiskIndex);
  m.sector = r.Required(r.U64(Tag::kSector), Tag::kSector);
  m.data = r.Required(r.Bytes(Tag::kData, kMaxChunk), Tag::kData);
  m.flush = r.Bool(Tag::kFlush);
  CheckSectorData(r, m.data, /*allow_empty=*/m.flush);
  return Finish(r, std::move(m));
}

Bytes DiskWriteReply::Encode() const { return TlvBuilder().U32(Tag::kSectorCount, count).Take(); }

Result<DiskWriteReply> DiskWriteReply::Decode(ByteSpan payload) {
  FieldReader r(payload);
  DiskWriteReply m;
  m.count = r.Required(r.U32(Tag::kSectorCount), Tag::kSectorCount);
  if (r.status().ok() && m.count > kMaxDiskSectors) {
    r.Fail(Status::InvalidArgument("sector_count above " + std::to_string(kMaxDiskSectors)));
  }
  return Finish(r, m);
}

}  // namespace kubicle::guest::protocol
