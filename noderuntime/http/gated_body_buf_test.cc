// GoogleTest first: cpprestsdk's headers define a macro U that breaks its
// templates.
// clang-format off
#include <gtest/gtest.h>
#include "noderuntime/http/gated_body_buf.h"
// clang-format on

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace kubicle::noderuntime::http {
namespace {

using Clock = std::chrono::steady_clock;

// What on_chunk saw, chunk by chunk.
struct Seen {
  std::vector<std::string> chunks;
  std::string All() const {
    std::string s;
    for (const auto& c : chunks) s += c;
    return s;
  }
};

std::shared_ptr<GatedBodyBuf> MakeBuf(uint64_t max, std::shared_ptr<Seen> seen) {
  return std::make_shared<GatedBodyBuf>(max, [seen](const uint8_t* p, size_t n) {
    seen->chunks.emplace_back(reinterpret_cast<const char*>(p), n);
    return Status::Ok();
  });
}

// Writes `s` the way cpprestsdk's http client does (putn_nocopy); `s` must
// outlive the task.
pplx::task<size_t> Put(const std::shared_ptr<GatedBodyBuf>& buf, const std::string& s) {
  return buf->putn_nocopy(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

TEST(GatedBodyBufTest, HoldsWritesUntilOpenThenPassesChunksInOrder) {
  auto seen = std::make_shared<Seen>();
  auto buf = MakeBuf(100, seen);
  const std::string first = "GET", second = " body", third = " bytes";
  pplx::task<size_t> held = Put(buf, first);
  EXPECT_FALSE(WaitUntil(held, Clock::now() + std::chrono::milliseconds(50)));
  EXPECT_TRUE(seen->chunks.empty());

  buf->Open();
  EXPECT_EQ(held.get(), first.size());
  EXPECT_EQ(Put(buf, second).get(), second.size());
  EXPECT_EQ(Put(buf, third).get(), third.size());
  EXPECT_EQ(seen->chunks, (std::vector<std::string>{"GET", " body", " bytes"}));
  EXPECT_EQ(buf->bytes(), 14u);
  EXPECT_FALSE(buf->error().has_value());
}

TEST(GatedBodyBufTest, DiscardDropsTheBodyUnwritten) {
  auto seen = std::make_shared<Seen>();
  auto buf = MakeBuf(100, seen);
  const std::string redirect_body = "<html>moved</html>";
  pplx::task<size_t> held = Put(buf, redirect_body);
  buf->Discard();
  // The write completes (the client reads on) but nothing reaches on_chunk.
  EXPECT_EQ(held.get(), redirect_body.size());
  EXPECT_EQ(Put(buf, redirect_body).get(), redirect_body.size());
  EXPECT_TRUE(seen->chunks.empty());
  EXPECT_EQ(buf->bytes(), 0u);
  EXPECT_FALSE(buf->error().has_value());
  // A late Open changes nothing: the gate is set once.
  buf->Open();
  EXPECT_EQ(Put(buf, redirect_body).get(), redirect_body.size());
  EXPECT_TRUE(seen->chunks.empty());
}

TEST(GatedBodyBufTest, RefusesTheChunkThatPassesTheLimitBeforeItIsWritten) {
  auto seen = std::make_shared<Seen>();
  auto buf = MakeBuf(8, seen);
  buf->Open();
  const std::string five = "12345", four = "6789", one = "6";
  EXPECT_EQ(Put(buf, five).get(), 5u);
  EXPECT_THROW(Put(buf, four).get(), std::runtime_error);
  EXPECT_EQ(seen->All(), "12345");  // the refused chunk never reached on_chunk
  EXPECT_EQ(buf->bytes(), 5u);
  ASSERT_TRUE(buf->error().has_value());
  EXPECT_EQ(buf->error()->code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(buf->error()->message(), "the body is more than the limit of 8 bytes");
  // After an error every write fails, even one that would fit.
  EXPECT_THROW(Put(buf, one).get(), std::runtime_error);
  EXPECT_EQ(seen->All(), "12345");
}

TEST(GatedBodyBufTest, ExactlyTheLimitIsAccepted) {
  auto seen = std::make_shared<Seen>();
  auto buf = MakeBuf(4, seen);
  buf->Open();
  const std::string four = "abcd";
  EXPECT_EQ(Put(buf, four).get(), 4u);
  EXPECT_EQ(seen->All(), "abcd");
  EXPECT_FALSE(buf->error().has_value());
}

TEST(GatedBodyBufTest, AChunkErrorFailsTheTransferWithThatError) {
  int calls = 0;
  auto buf = std::make_shared<GatedBodyBuf>(100, [&calls](const uint8_t*, size_t) {
    ++calls;
    return Status::Unavailable("disk full");
  });
  buf->Open();
  const std::string s = "data";
  EXPECT_THROW(Put(buf, s).get(), std::runtime_error);
  ASSERT_TRUE(buf->error().has_value());
  EXPECT_EQ(buf->error()->code(), StatusCode::kUnavailable);
  EXPECT_EQ(buf->error()->message(), "disk full");
  EXPECT_EQ(buf->bytes(), 0u);
  EXPECT_THROW(Put(buf, s).get(), std::runtime_error);
  EXPECT_EQ(calls, 1);
}

TEST(GatedBodyBufTest, ReadsReportEndOfStream) {
  auto buf = MakeBuf(100, std::make_shared<Seen>());
  EXPECT_FALSE(buf->can_read());
  EXPECT_TRUE(buf->can_write());
  EXPECT_FALSE(buf->can_seek());
}

}  // namespace
}  // namespace kubicle::noderuntime::http
