#include "vmm/devices/legacy/serial_persist.h"

#include "snapshot/byte_io.h"

namespace kubicle::vmm::devices::legacy {

std::vector<uint8_t> EncodeSerialState(const SerialState& s) {
  std::vector<uint8_t> out;
  snapshot::ByteWriter w(out);
  w.U8(s.ier);
  w.U8(s.lcr);
  w.U8(s.mcr);
  w.U8(s.scr);
  w.U8(s.dll);
  w.U8(s.dlm);
  w.Bool(s.fifo_enabled);
  w.Bool(s.thre_pending);
  w.Bool(s.overrun);
  w.Bytes(s.input);
  return out;
}

Result<SerialState> DecodeSerialState(std::span<const uint8_t> bytes, bool newer_minor) {
  SerialState s;
  snapshot::ByteReader r(bytes, "serial state");
  r.U8(&s.ier, "serial ier");
  r.U8(&s.lcr, "serial lcr");
  r.U8(&s.mcr, "serial mcr");
  r.U8(&s.scr, "serial scr");
  r.U8(&s.dll, "serial dll");
  r.U8(&s.dlm, "serial dlm");
  r.Bool(&s.fifo_enabled, "serial fifo_enabled");
  r.Bool(&s.thre_pending, "serial thre_pending");
  r.Bool(&s.overrun, "serial overrun");
  r.Bytes(&s.input, Serial::kInputCapacity, "serial input");
  r.End(newer_minor);
  if (!r.ok()) return r.status();
  return s;
}

}  // namespace kubicle::vmm::devices::legacy
