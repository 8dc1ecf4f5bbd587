// AgentClient raw disk operations (DISK_INFO, DISK_READ, DISK_WRITE; see
// agent_client.h). Each frame is one request/reply; large ranges are split
// here so no frame exceeds kMaxDiskSectors or either side's receive limit.
#include <algorithm>
#include <limits>

#include "guest/client/agent_client.h"

namespace kubicle::guest::client {

using protocol::kDiskSectorSize;
using protocol::kMaxDiskSectors;

namespace {
// Sectors per frame when `limit` payload bytes are allowed and the frame's
// other fields take `overhead` bytes.
uint32_t SectorsPerFrame(uint32_t limit, size_t overhead) {
  const size_t room = limit > overhead ? limit - overhead : 0;
  return uint32_t(std::min<size_t>(kMaxDiskSectors, room / kDiskSectorSize));
}

Status CheckRange(uint64_t sector, uint64_t count) {
  if (count != 0 && sector > std::numeric_limits<uint64_t>::max() - (count - 1)) {
    return Status::InvalidArgument("sector range wraps around 2^64");
  }
  return Status::Ok();
}
}  // namespace

Result<std::vector<protocol::DiskDescription>> AgentClient::DiskInfo(Deadline deadline) {
  ASSIGN_OR_RETURN(auto reply,
                   (Call<protocol::DiskInfoReply>(protocol::DiskInfoRequest{}, Resolve(deadline))));
  return std::move(reply.disks);
}

Result<Bytes> AgentClient::DiskRead(uint32_t disk, uint64_t sector, uint32_t count,
                                    Deadline deadline) {
  deadline = Resolve(deadline);
  if (count == 0) return Status::InvalidArgument("DiskRead of 0 sectors");
  RETURN_IF_ERROR(CheckRange(sector, count));
  // The reply carries the data plus one TLV header; our own limit bounds it.
  const uint32_t per_frame =
      SectorsPerFrame(options_.max_payload, protocol::kTlvHeaderSize);
  if (per_frame == 0) return Status::InvalidArgument("receive limit below one sector");
  Bytes out;
  out.reserve(size_t(count) * kDiskSectorSize);
  for (uint32_t done = 0; done < count;) {
    const uint32_t n = std::min(per_frame, count - done);
    ASSIGN_OR_RETURN(auto reply, (Call<protocol::DiskReadReply>(
                                     protocol::DiskReadRequest{disk, sector + done, n}, deadline)));
    if (reply.data.size() != size_t(n) * kDiskSectorSize) {
      return Status::DataLoss("DISK_READ returned " + std::to_string(reply.data.size()) +
                              " bytes for " + std::to_string(n) + " sectors");
    }
    out.insert(out.end(), reply.data.begin(), reply.data.end());
    done += n;
  }
  return out;
}

Status AgentClient::DiskWrite(uint32_t disk, uint64_t sector, ByteSpan data, bool flush,
                              Deadline deadline) {
  deadline = Resolve(deadline);
  if (data.size() % kDiskSectorSize != 0) {
    return Status::InvalidArgument("DiskWrite data is not whole 512-byte sectors");
  }
  const uint64_t count = data.size() / kDiskSectorSize;
  RETURN_IF_ERROR(CheckRange(sector, count));
  if (count == 0 && !flush) return Status::Ok();
  const size_t overhead = protocol::DiskWriteRequest{disk, sector, {}, true}.Encode().size();
  const uint32_t per_frame = SectorsPerFrame(agent_.max_payload, overhead);
  if (per_frame == 0) return Status::InvalidArgument("agent receive limit below one sector");
  uint64_t done = 0;
  do {
    const uint64_t n = std::min<uint64_t>(per_frame, count - done);
    protocol::DiskWriteRequest req;
    req.disk = disk;
    req.sector = sector + done;
    const auto first = data.begin() + std::ptrdiff_t(done * kDiskSectorSize);
    req.data.assign(first, first + std::ptrdiff_t(n * kDiskSectorSize));
    req.flush = flush && done + n == count;
    ASSIGN_OR_RETURN(auto reply, (Call<protocol::DiskWriteReply>(req, deadline)));
    if (reply.count != n) {
      return Status::DataLoss("DISK_WRITE wrote " + std::to_string(reply.count) + " of " +
                              std::to_string(n) + " sectors");
    }
    done += n;
  } while (done < count);
  return Status::Ok();
}

}  // namespace kubicle::guest::client
