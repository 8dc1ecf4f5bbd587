// Agent: the raw disk messages (DISK_INFO, DISK_READ, DISK_WRITE). Requests
// go to the device as they are; what the device refuses comes back as an
// ERROR whose code and message say why (read-only, out of range, I/O error),
// so the host can tell the VMM's checks from the guest's.
#include "guest/testguest/agent.h"
#include "guest/testguest/fields.h"

namespace kubicle::guest::testguest {

using wire::ErrorCode;
using wire::Tag;

namespace {

bool BeyondCapacity(const DiskProperties& d, uint64_t sector, uint32_t count) {
  return sector > d.capacity_sectors || count > d.capacity_sectors - sector;
}

// Answers the ERROR for a failed device request.
void SendDiskError(Session* s, uint32_t id, DiskResult r, const DiskProperties& d, bool write,
                   uint64_t sector, uint32_t count) {
  switch (r) {
    case DiskResult::kOk: break;
    case DiskResult::kIoError:
      if (write && d.read_only) {
        return s->SendError(id, ErrorCode::kPermissionDenied,
                            "disk is read-only: virtio-blk refused the write (IOERR)");
      }
      if (BeyondCapacity(d, sector, count)) {
        return s->SendError(
            id, ErrorCode::kOutOfRange,
            "sector range beyond the disk's capacity: virtio-blk refused it (IOERR)");
      }
      return s->SendError(id, ErrorCode::kInternal, "virtio-blk I/O error (IOERR)");
    case DiskResult::kUnsupported:
      return s->SendError(id, ErrorCode::kUnimplemented,
                          "virtio-blk does not support the request (UNSUPP)");
    case DiskResult::kBroken:
      return s->SendError(id, ErrorCode::kUnavailable,
                          "virtio-blk device broken (no or bad completion)");
  }
}

}  // namespace

const DiskProperties* Agent::FindDisk(Session* s, uint32_t id, uint32_t index) {
  const DiskProperties* d = index < platform_->DiskCount() ? platform_->Disk(index) : nullptr;
  if (d == nullptr) s->SendError(id, ErrorCode::kNotFound, "no such disk (see DISK_INFO)");
  return d;
}

void Agent::DiskInfo(Session* s, uint32_t id, Fields&) {
  wire::TlvWriter* w = s->BeginReply(Type::kDiskInfo, 0, id);
  const uint32_t n = platform_->DiskCount();
  for (uint32_t i = 0; i < n && i < wire::kMaxDisks; ++i) {
    const DiskProperties* d = platform_->Disk(i);
    if (d == nullptr) break;
    const size_t mark = w->BeginNested(Tag::kDisk);
    w->PutU64(Tag::kCapacitySectors, d->capacity_sectors);
    if (d->read_only) w->PutU8(Tag::kReadOnly, 1);
    if (d->id[0] != '\0') w->PutCStr(Tag::kDiskId, d->id);
    w->EndNested(mark);
  }
  s->EndReply();
}

void Agent::DiskRead(Session* s, uint32_t id, Fields& f) {
  uint32_t index = 0, count = 0;
  uint64_t sector = 0;
  f.Require(f.U32(Tag::kDiskIndex, &index), "missing required field disk_index");
  f.Require(f.U64(Tag::kSector, &sector), "missing required field sector");
  f.Require(f.U32(Tag::kSectorCount, &count), "missing required field sector_count");
  if (f.ok() && (count == 0 || count > wire::kMaxDiskSectors)) {
    f.Fail("sector_count must be 1..128");
  }
  if (!f.ok()) return s->SendError(id, ErrorCode::kInvalidArgument, f.error());
  const DiskProperties* d = FindDisk(s, id, index);
  if (d == nullptr) return;
  // The device writes straight into the reply; a failure overwrites the
  // half-built reply with an ERROR.
  wire::TlvWriter* w = s->BeginReply(Type::kDiskRead, 0, id);
  uint8_t* out = w->Reserve(Tag::kData, size_t(count) * wire::kDiskSectorSize);
  if (out != nullptr) {
    const DiskResult r = platform_->DiskRead(index, sector, count, out);
    if (r != DiskResult::kOk) return SendDiskError(s, id, r, *d, false, sector, count);
  }
  s->EndReply();  // an ERROR when the data did not fit the peer's limit
}

void Agent::DiskWrite(Session* s, uint32_t id, Fields& f) {
  uint32_t index = 0;
  uint64_t sector = 0;
  const uint8_t* data = nullptr;
  uint32_t len = 0;
  bool flush = false;
  f.Require(f.U32(Tag::kDiskIndex, &index), "missing required field disk_index");
  f.Require(f.U64(Tag::kSector, &sector), "missing required field sector");
  f.Require(f.Bytes(Tag::kData, &data, &len), "missing required field data");
  f.Bool(Tag::kFlush, &flush);
  if (f.ok() && (len % wire::kDiskSectorSize != 0 || len > wire::kMaxChunk)) {
    f.Fail("data must be whole 512-byte sectors, at most 128 of them");
  }
  if (f.ok() && len == 0 && !flush) f.Fail("data must hold at least one sector (or set flush)");
  if (!f.ok()) return s->SendError(id, ErrorCode::kInvalidArgument, f.error());
  const DiskProperties* d = FindDisk(s, id, index);
  if (d == nullptr) return;
  const uint32_t count = len / wire::kDiskSectorSize;
  if (count != 0) {
    const DiskResult r = platform_->DiskWrite(index, sector, count, data);
    if (r != DiskResult::kOk) return SendDiskError(s, id, r, *d, true, sector, count);
  }
  if (flush) {
    const DiskResult r = platform_->DiskFlush(index);
    if (r == DiskResult::kIoError) {
      return s->SendError(id, ErrorCode::kInternal, "virtio-blk flush failed (IOERR)");
    }
    if (r != DiskResult::kOk) return SendDiskError(s, id, r, *d, true, sector, 0);
  }
  wire::TlvWriter* w = s->BeginReply(Type::kDiskWrite, 0, id);
  w->PutU32(Tag::kSectorCount, count);
  s->EndReply();
}

}  // namespace kubicle::guest::testguest
