// ByteWriter / ByteReader: little-endian encoding of the snapshot file
// formats: the `state` container here, and the state records devices encode
// for themselves (vmm/devices/.../ *persist*), so every byte of a snapshot is
// written the same way and documented in docs/snapshot-format.md.
//
// ByteReader is bounds-checked with a sticky error: after the first failure
// every read returns false and status() names what was being read, where,
// and in which section, so a decoder can read a whole struct and check once.
// Kernel ABI structs (kvm_regs, ...) are stored as a u32 byte count followed
// by the struct's bytes; the reader insists on the exact size so a layout
// change can never be misread.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "common/status.h"

namespace kubicle::snapshot {

class ByteWriter {
 public:
  explicit ByteWriter(std::vector<uint8_t>& out) : out_(out) {}

  void U8(uint8_t v) { out_.push_back(v); }
  void Bool(bool v) { U8(v ? 1 : 0); }
  void U16(uint16_t v) { Raw(&v, sizeof(v)); }
  void U32(uint32_t v) { Raw(&v, sizeof(v)); }
  void U64(uint64_t v) { Raw(&v, sizeof(v)); }
  void Raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  // u32 length + bytes.
  void Bytes(std::span<const uint8_t> b) {
    U32(static_cast<uint32_t>(b.size()));
    Raw(b.data(), b.size());
  }
  void String(const std::string& s) {
    Bytes({reinterpret_cast<const uint8_t*>(s.data()), s.size()});
  }
  // u32 sizeof(T) + the struct's bytes (a kernel ABI struct).
  template <typename T>
  void Blob(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    U32(sizeof(T));
    Raw(&v, sizeof(T));
  }
  void PadTo(size_t alignment) {
    while (out_.size() % alignment) out_.push_back(0);
  }
  size_t size() const { return out_.size(); }

 private:
  std::vector<uint8_t>& out_;
};

class ByteReader {
 public:
  // context names the thing being decoded in error messages ("section 3 (vcpu)").
  ByteReader(std::span<const uint8_t> data, std::string context)
      : data_(data), context_(std::move(context)) {}

  bool U8(uint8_t* v, const char* what) { return Raw(v, 1, what); }
  bool Bool(bool* v, const char* what) {
    uint8_t b = 0;
    if (!U8(&b, what)) return false;
    if (b > 1) return Fail(StatusCode::kDataLoss, std::string(what) + " is not 0 or 1");
    *v = b == 1;
    return true;
  }
  bool U16(uint16_t* v, const char* what) { return Raw(v, sizeof(*v), what); }
  bool U32(uint32_t* v, const char* what) { return Raw(v, sizeof(*v), what); }
  bool U64(uint64_t* v, const char* what) { return Raw(v, sizeof(*v), what); }
  bool Raw(void* p, size_t n, const char* what) {
    if (!ok()) return false;
    if (n > remaining()) {
      return Fail(StatusCode::kDataLoss, "truncated reading " + std::string(what) + ": needs " +
                                             std::to_string(n) + " bytes, " +
                                             std::to_string(remaining()) + " left");
    }
    if (n == 0) return true;  // p may be an empty vector's null data()
    std::memcpy(p, data_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  // u32 length (at most max) + bytes.
  bool Bytes(std::vector<uint8_t>* v, size_t max, const char* what) {
    uint32_t n = 0;
    if (!Count(&n, max, what)) return false;
    if (n > remaining()) return Raw(nullptr, n, what);  // reports truncation
    v->assign(data_.begin() + pos_, data_.begin() + pos_ + n);
    pos_ += n;
    return true;
  }
  bool String(std::string* s, size_t max, const char* what) {
    uint32_t n = 0;
    if (!Count(&n, max, what)) return false;
    if (n > remaining()) return Raw(nullptr, n, what);
    s->assign(reinterpret_cast<const char*>(data_.data() + pos_), n);
    pos_ += n;
    return true;
  }
  template <typename T>
  bool Blob(T* v, const char* what) {
    static_assert(std::is_trivially_copyable_v<T>);
    uint32_t n = 0;
    if (!U32(&n, what)) return false;
    if (n != sizeof(T)) {
      return Fail(StatusCode::kDataLoss, std::string(what) + " is " + std::to_string(n) +
                                             " bytes, expected " + std::to_string(sizeof(T)));
    }
    return Raw(v, sizeof(T), what);
  }
  // A u32 element count, refused above max (a decode-size cap).
  bool Count(uint32_t* n, size_t max, const char* what) {
    if (!U32(n, what)) return false;
    if (*n > max) {
      return Fail(StatusCode::kInvalidArgument, std::string(what) + " count " +
                                                    std::to_string(*n) + " exceeds the cap " +
                                                    std::to_string(max));
    }
    return true;
  }

  // Everything left.
  bool Rest(std::vector<uint8_t>* v) {
    if (!ok()) return false;
    v->assign(data_.begin() + pos_, data_.end());
    pos_ = data_.size();
    return true;
  }
  // The end of a record: bytes left over are an error, unless the record is
  // from a newer minor version (allow_tail), whose appended fields are skipped.
  bool End(bool allow_tail) {
    if (!ok() || remaining() == 0) return ok();
    if (allow_tail) {
      pos_ = data_.size();
      return true;
    }
    return Fail(StatusCode::kDataLoss, std::to_string(remaining()) + " unexpected trailing bytes");
  }

  bool Skip(size_t n) {
    if (!ok()) return false;
    if (n > remaining()) return Raw(nullptr, n, "skipped bytes");
    pos_ += n;
    return true;
  }

  bool Fail(StatusCode code, const std::string& message) {
    if (ok()) status_ = Status(code, context_ + ": " + message);
    return false;
  }
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  size_t remaining() const { return data_.size() - pos_; }
  size_t position() const { return pos_; }

 private:
  std::span<const uint8_t> data_;
  size_t pos_ = 0;
  std::string context_;
  Status status_;
};

namespace internal {
using ::kubicle::snapshot::ByteReader;
using ::kubicle::snapshot::ByteWriter;
}  // namespace internal

}  // namespace kubicle::snapshot
