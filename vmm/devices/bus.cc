#include "vmm/devices/bus.h"

#include <cstring>

namespace kubicle::vmm::devices {

Status Bus::Insert(std::shared_ptr<BusDevice> device, uint64_t base, uint64_t len) {
  if (len == 0 || base + len < base) return Status::InvalidArgument("bad bus range");
  auto next = ranges_.lower_bound(base);
  if (next != ranges_.end() && next->first < base + len)
    return Status::AlreadyExists("bus range overlaps an existing device");
  if (next != ranges_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.len > base)
      return Status::AlreadyExists("bus range overlaps an existing device");
  }
  ranges_.emplace(base, Entry{len, std::move(device)});
  return Status::Ok();
}

BusDevice* Bus::Resolve(uint64_t addr, uint64_t size, uint64_t* offset) const {
  auto it = ranges_.upper_bound(addr);
  if (it == ranges_.begin()) return nullptr;
  --it;
  uint64_t off = addr - it->first;
  if (off >= it->second.len || size > it->second.len - off) return nullptr;
  *offset = off;
  return it->second.device.get();
}

bool Bus::Read(uint64_t addr, std::span<uint8_t> data) const {
  uint64_t off = 0;
  BusDevice* d = Resolve(addr, data.size(), &off);
  if (d == nullptr) {
    std::memset(data.data(), 0xff, data.size());
    return false;
  }
  d->Read(off, data);
  return true;
}

bool Bus::Write(uint64_t addr, std::span<const uint8_t> data) const {
  uint64_t off = 0;
  BusDevice* d = Resolve(addr, data.size(), &off);
  if (d == nullptr) return false;
  d->Write(off, data);
  return true;
}

}  // namespace kubicle::vmm::devices
