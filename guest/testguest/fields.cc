#include "guest/testguest/fields.h"

namespace kubicle::guest::testguest {

Fields::Fields(const uint8_t* payload, uint32_t size) : payload_(payload), size_(size) {
  switch (wire::ValidateTlvs(payload, size)) {
    case wire::WireError::kOk: break;
    case wire::WireError::kTruncated: error_ = "malformed payload: truncated TLV"; break;
    default: error_ = "malformed payload: TLV length overruns payload"; break;
  }
}

bool Fields::Find(wire::Tag tag, wire::Tlv* out) {
  if (error_ != nullptr) return false;
  wire::WireError err = wire::WireError::kOk;
  switch (wire::FindTlv(payload_, size_, tag, out, &err)) {
    case wire::FindResult::kFound: return true;
    case wire::FindResult::kAbsent: return false;
    case wire::FindResult::kError:
      Fail(err == wire::WireError::kDuplicate ? "duplicate field" : "malformed payload");
      return false;
  }
  return false;
}

bool Fields::U16(wire::Tag tag, uint16_t* v) {
  wire::Tlv t;
  if (!Find(tag, &t)) return false;
  if (!wire::TlvU16(t, v)) {
    Fail("field has the wrong length");
    return false;
  }
  return true;
}

bool Fields::U32(wire::Tag tag, uint32_t* v) {
  wire::Tlv t;
  if (!Find(tag, &t)) return false;
  if (!wire::TlvU32(t, v)) {
    Fail("field has the wrong length");
    return false;
  }
  return true;
}

bool Fields::U64(wire::Tag tag, uint64_t* v) {
  wire::Tlv t;
  if (!Find(tag, &t)) return false;
  if (!wire::TlvU64(t, v)) {
    Fail("field has the wrong length");
    return false;
  }
  return true;
}

bool Fields::Bool(wire::Tag tag, bool* v) {
  wire::Tlv t;
  if (!Find(tag, &t)) return false;
  uint8_t b = 0;
  if (!wire::TlvU8(t, &b) || b > 1) {
    Fail("boolean field must be one byte, 0 or 1");
    return false;
  }
  *v = b == 1;
  return true;
}

bool Fields::Bytes(wire::Tag tag, const uint8_t** data, uint32_t* len) {
  wire::Tlv t;
  if (!Find(tag, &t)) return false;
  *data = t.value;
  *len = t.length;
  return true;
}

bool Fields::Str(wire::Tag tag, const char** s, uint32_t* len, uint32_t max_len) {
  wire::Tlv t;
  if (!Find(tag, &t)) return false;
  if (t.length > max_len) {
    Fail("string field too long");
    return false;
  }
  for (uint32_t i = 0; i < t.length; ++i) {
    if (t.value[i] == 0) {
      Fail("string field contains NUL");
      return false;
    }
  }
  *s = reinterpret_cast<const char*>(t.value);
  *len = t.length;
  return true;
}

}  // namespace kubicle::guest::testguest
