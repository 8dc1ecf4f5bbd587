// Persist of the 8250 serial port: its SerialState (serial.h) as the bytes
// of the `state` file's serial section (docs/snapshot-format.md, 2.4.4). The
// serial port is part of every machine, so restore attaches it and applies
// this state (Serial::SetState) instead of going through a device table.
//
// Contract: DecodeSerialState never trusts its input: the input FIFO is
// capped at Serial::kInputCapacity, flags must be 0 or 1, and bytes left
// over are DataLoss unless the snapshot is from a newer minor version.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "vmm/devices/legacy/serial.h"

namespace kubicle::vmm::devices::legacy {

std::vector<uint8_t> EncodeSerialState(const SerialState& state);
Result<SerialState> DecodeSerialState(std::span<const uint8_t> bytes, bool newer_minor);

}  // namespace kubicle::vmm::devices::legacy
