// FuzzInput / FuzzOutput: the little-endian byte formats the structured
// fuzzers (virtqueue, virtio-blk, MMIO, vsock) read their inputs in, and the
// writer fuzz_make_seeds builds their seed corpora with. Reading past the end
// yields zeros, so every byte string is a valid input and libFuzzer's
// mutations stay meaningful; a format change needs new seeds (docs/testing.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

namespace kubicle::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : p_(data), left_(size) {}

  bool empty() const { return left_ == 0; }
  size_t remaining() const { return left_; }

  template <typename T>
  T Take() {
    T v{};
    const size_t n = left_ < sizeof(T) ? left_ : sizeof(T);
    std::memcpy(&v, p_, n);
    p_ += n;
    left_ -= n;
    return v;
  }
  uint8_t U8() { return Take<uint8_t>(); }
  uint16_t U16() { return Take<uint16_t>(); }
  uint32_t U32() { return Take<uint32_t>(); }
  uint64_t U64() { return Take<uint64_t>(); }
  bool Bool() { return (U8() & 1) != 0; }
  // Up to n bytes (fewer at the end of the input).
  std::span<const uint8_t> Bytes(size_t n) {
    if (n > left_) n = left_;
    std::span<const uint8_t> s(p_, n);
    p_ += n;
    left_ -= n;
    return s;
  }
  std::span<const uint8_t> Rest() { return Bytes(left_); }

 private:
  const uint8_t* p_;
  size_t left_;
};

class FuzzOutput {
 public:
  template <typename T>
  FuzzOutput& Put(T v) {
    const auto* b = reinterpret_cast<const uint8_t*>(&v);
    buf_.insert(buf_.end(), b, b + sizeof(T));
    return *this;
  }
  FuzzOutput& U8(uint8_t v) { return Put(v); }
  FuzzOutput& U16(uint16_t v) { return Put(v); }
  FuzzOutput& U32(uint32_t v) { return Put(v); }
  FuzzOutput& U64(uint64_t v) { return Put(v); }
  FuzzOutput& Bytes(std::span<const uint8_t> b) {
    buf_.insert(buf_.end(), b.begin(), b.end());
    return *this;
  }
  FuzzOutput& Str(std::string_view s) {
    buf_.insert(buf_.end(), s.begin(), s.end());
    return *this;
  }
  const std::vector<uint8_t>& bytes() const { return buf_; }

 private:
  std::vector<uint8_t> buf_;
};

// A fuzzer's invariant check: aborts (a libFuzzer crash) with the message.
[[noreturn]] void FuzzFail(const char* what, const char* file, int line);
#define FUZZ_CHECK(cond)                                         \
  do {                                                           \
    if (!(cond)) ::kubicle::fuzz::FuzzFail(#cond, __FILE__, __LINE__); \
  } while (0)

// Silences the libraries' logging (rejections of hostile input log at warn).
void QuietLogs();

}  // namespace kubicle::fuzz
