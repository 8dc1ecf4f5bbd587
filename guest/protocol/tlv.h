// Host-side TLV helpers on top of wire.h: TlvBuilder appends fields to a
// growable buffer; FieldReader parses a payload once and hands out typed,
// validated fields.
//
// FieldReader treats the payload as hostile. Errors are sticky: the first
// problem (malformed TLV, duplicate singular field, wrong fixed width, string
// too long or containing NUL, missing required field) is kept in status() and
// later getters return defaults, so a decoder reads all its fields and checks
// status() once. Unknown tags are ignored (forward compatibility).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "guest/protocol/wire.h"

namespace kubicle::guest::protocol {

// Human-readable tag name for error messages ("path", "tag 0x1234").
std::string TagName(Tag tag);

class TlvBuilder {
 public:
  TlvBuilder& U8(Tag tag, uint8_t v);
  TlvBuilder& U16(Tag tag, uint16_t v);
  TlvBuilder& U32(Tag tag, uint32_t v);
  TlvBuilder& U64(Tag tag, uint64_t v);
  TlvBuilder& Bool(Tag tag, bool v) { return U8(tag, v ? 1 : 0); }
  TlvBuilder& Str(Tag tag, std::string_view s);
  TlvBuilder& Bytes(Tag tag, std::span<const uint8_t> b);
  // Nested container: the marker returned by BeginNested goes to EndNested.
  size_t BeginNested(Tag tag);
  void EndNested(size_t mark);

  size_t size() const { return buf_.size(); }
  std::vector<uint8_t> Take() { return std::move(buf_); }

 private:
  std::vector<uint8_t> buf_;
};

class FieldReader {
 public:
  explicit FieldReader(std::span<const uint8_t> payload);

  // Singular fields; nullopt when absent (or after an error).
  std::optional<uint8_t> U8(Tag tag);
  std::optional<uint16_t> U16(Tag tag);
  std::optional<uint32_t> U32(Tag tag);
  std::optional<uint64_t> U64(Tag tag);
  // A u8 that must be 0 or 1; absent gives `def`.
  bool Bool(Tag tag, bool def = false);
  std::optional<std::string> Str(Tag tag, size_t max_len);
  std::optional<std::vector<uint8_t>> Bytes(Tag tag, size_t max_len);
  // Repeated fields, in order.
  std::vector<std::string> StrList(Tag tag, size_t max_len, size_t max_count);
  std::vector<std::span<const uint8_t>> NestedList(Tag tag, size_t max_count);

  // Records "missing required field" when `present` is false.
  template <typename T>
  T Required(std::optional<T> v, Tag tag) {
    if (!v.has_value()) {
      Fail(Status::InvalidArgument("missing required field " + TagName(tag)));
      return T{};
    }
    return std::move(*v);
  }
  void Fail(Status s) {
    if (status_.ok()) status_ = std::move(s);
  }
  const Status& status() const { return status_; }

 private:
  // The single field with `tag`, or nullptr (absent, duplicate, or error).
  const Tlv* Find(Tag tag);
  std::optional<std::span<const uint8_t>> Fixed(Tag tag, size_t width);

  std::vector<Tlv> fields_;
  Status status_;
};

}  // namespace kubicle::guest::protocol
