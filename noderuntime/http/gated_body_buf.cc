#include "noderuntime/http/gated_body_buf.h"

#include <stdexcept>
#include <string>
#include <utility>

namespace kubicle::noderuntime::http {

GatedBodyBuf::GatedBodyBuf(uint64_t max_bytes, ChunkFn on_chunk)
    : Base(std::ios_base::out), max_bytes_(max_bytes), on_chunk_(std::move(on_chunk)) {}

std::optional<Status> GatedBodyBuf::error() const {
  std::lock_guard<std::mutex> l(mu_);
  return error_;
}

bool GatedBodyBuf::acquire(uint8_t*& ptr, size_t& count) {
  ptr = nullptr;
  count = 0;
  return false;
}

pplx::task<size_t> GatedBodyBuf::_putn(const uint8_t* ptr, size_t count) {
  auto self = std::static_pointer_cast<GatedBodyBuf>(shared_from_this());
  // putn_nocopy: cpprestsdk keeps `ptr` valid until this task completes.
  return pplx::create_task(gate_).then([self, ptr, count](bool keep) -> size_t {
    if (keep) self->Write(ptr, count);
    return count;
  });
}

pplx::task<GatedBodyBuf::int_type> GatedBodyBuf::_putc(uint8_t ch) {
  auto self = std::static_pointer_cast<GatedBodyBuf>(shared_from_this());
  return pplx::create_task(gate_).then([self, ch](bool keep) -> int_type {
    if (keep) self->Write(&ch, 1);
    return ch;
  });
}

void GatedBodyBuf::Write(const uint8_t* p, size_t n) {
  std::lock_guard<std::mutex> l(mu_);
  if (error_) throw std::runtime_error(error_->message());
  if (bytes_ + n > max_bytes_) {
    error_ = Status::ResourceExhausted("the body is more than the limit of " +
                                       std::to_string(max_bytes_) + " bytes");
    throw std::runtime_error(error_->message());
  }
  Status s = on_chunk_(p, n);
  if (!s.ok()) {
    error_ = std::move(s);
    throw std::runtime_error(error_->message());
  }
  bytes_ += n;
}

}  // namespace kubicle::noderuntime::http
