// Fields: freestanding, allocation-free reader for one request payload, on
// top of wire.h. The payload is hostile: the constructor validates the whole
// TLV sequence; getters check widths, duplicates, string limits and NULs.
// The first problem is kept as a static message (error()); later getters
// return "absent", so a handler reads its fields and checks ok() once.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "guest/protocol/wire.h"

namespace kubicle::guest::testguest {

namespace wire = ::kubicle::guest::protocol;

class Fields {
 public:
  Fields(const uint8_t* payload, uint32_t size);

  bool ok() const { return error_ == nullptr; }
  const char* error() const { return error_; }
  void Fail(const char* message) {
    if (error_ == nullptr) error_ = message;
  }

  // Each getter returns true when the field is present and valid.
  bool U16(wire::Tag tag, uint16_t* v);
  bool U32(wire::Tag tag, uint32_t* v);
  bool U64(wire::Tag tag, uint64_t* v);
  bool Bool(wire::Tag tag, bool* v);
  bool Bytes(wire::Tag tag, const uint8_t** data, uint32_t* len);
  bool Str(wire::Tag tag, const char** s, uint32_t* len, uint32_t max_len);
  // Records `message` ("missing required field path") when !present.
  void Require(bool present, const char* message) {
    if (!present) Fail(message);
  }

 private:
  bool Find(wire::Tag tag, wire::Tlv* out);
  const uint8_t* payload_;
  uint32_t size_;
  const char* error_ = nullptr;
};

}  // namespace kubicle::guest::testguest
