// Bus: routes guest port-I/O or MMIO accesses to the device that owns the
// address. kubicle-vmm has one PIO bus and one MMIO bus; vCPU threads call
// Read/Write on every I/O exit, concurrently, so devices synchronise themselves.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>

#include "common/status.h"

namespace kubicle::vmm::devices {

class BusDevice {
 public:
  virtual ~BusDevice() = default;
  // offset is relative to the base the device was inserted at. data.size() is 1, 2, 4 or 8.
  virtual void Read(uint64_t offset, std::span<uint8_t> data) = 0;
  virtual void Write(uint64_t offset, std::span<const uint8_t> data) = 0;
};

class Bus {
 public:
  // Fails with AlreadyExists when [base, base+len) overlaps an inserted range.
  Status Insert(std::shared_ptr<BusDevice> device, uint64_t base, uint64_t len);
  // Returns false (and for Read fills data with 0xff, as an absent device reads)
  // when no device covers the whole access.
  bool Read(uint64_t addr, std::span<uint8_t> data) const;
  bool Write(uint64_t addr, std::span<const uint8_t> data) const;

 private:
  struct Entry {
    uint64_t len;
    std::shared_ptr<BusDevice> device;
  };
  // Returns the device and offset for an access, or nullptr.
  BusDevice* Resolve(uint64_t addr, uint64_t size, uint64_t* offset) const;
  std::map<uint64_t, Entry> ranges_;  // keyed by base; immutable once vCPUs run
};

}  // namespace kubicle::vmm::devices
