// GoogleTest first: cpprestsdk's headers define a macro U that breaks its
// templates.
// clang-format off
#include <gtest/gtest.h>
#include "noderuntime/http/get_exchange.h"
// clang-format on

#include <gmock/gmock.h>

#include <mutex>
#include <string>

#include "noderuntime/nodeagent/testing/http_test_server.h"

namespace kubicle::noderuntime::http {
namespace {

using nodeagent::TestHttpReply;
using nodeagent::TestHttpServer;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

// A body collected from GatedBodyBuf's chunks.
struct Collected {
  std::mutex mu;
  std::string body;
  std::shared_ptr<GatedBodyBuf> Buf(uint64_t max) {
    return std::make_shared<GatedBodyBuf>(max, [this](const uint8_t* p, size_t n) {
      std::lock_guard<std::mutex> l(mu);
      body.append(reinterpret_cast<const char*>(p), n);
      return Status::Ok();
    });
  }
};

TEST(GetExchangeTest, A200BodyReachesTheBufferWhole) {
  TestHttpServer server([](const std::string&) { return TestHttpReply{.body = "hello body"}; });
  Collected got;
  const std::string url = server.Url("/x");
  GetExchange get(url, Clock::now() + std::chrono::seconds(20), got.Buf(100), "timeout while");
  auto resp = get.Send({{"X-Test", "1"}}, "");
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_EQ(resp->status_code(), 200);
  auto length = get.CheckLength(*resp, 100);
  ASSERT_TRUE(length.ok());
  EXPECT_EQ(*length, std::optional<uint64_t>(10));
  ASSERT_TRUE(get.ReceiveBody(*length).ok());
  EXPECT_EQ(got.body, "hello body");
}

TEST(GetExchangeTest, AContentLengthOverTheLimitIsRefusedBeforeTheBody) {
  TestHttpServer server([](const std::string&) { return TestHttpReply{.body = "0123456789"}; });
  Collected got;
  const std::string url = server.Url("/big");
  {
    GetExchange get(url, Clock::now() + std::chrono::seconds(20), got.Buf(4), "timeout while");
    auto resp = get.Send({}, "");
    ASSERT_TRUE(resp.ok()) << resp.status().ToString();
    auto length = get.CheckLength(*resp, 4);
    ASSERT_FALSE(length.ok());
    EXPECT_EQ(length.status().code(), StatusCode::kResourceExhausted);
    EXPECT_EQ(length.status().message(),
              "GET " + url + ": the body is 10 bytes, more than the limit of 4 bytes");
  }  // discarded by the destructor
  EXPECT_EQ(got.body, "");
}

TEST(GetExchangeTest, AnUnsizedBodyOverTheLimitFailsWithTheBuffersError) {
  TestHttpServer server([](const std::string&) {
    return TestHttpReply{.content_length = false, .stream_bytes = 1 << 20};
  });
  Collected got;
  const std::string url = server.Url("/endless");
  GetExchange get(url, Clock::now() + std::chrono::seconds(20), got.Buf(1000), "timeout while");
  auto resp = get.Send({}, "");
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  auto length = get.CheckLength(*resp, 1000);
  ASSERT_TRUE(length.ok());
  EXPECT_FALSE(length->has_value());
  Status s = get.ReceiveBody(*length);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("GET " + url));
  EXPECT_THAT(s.message(), HasSubstr("the body is more than the limit of 1000 bytes"));
  EXPECT_LE(got.body.size(), 1000u);
}

TEST(GetExchangeTest, AnErrorStatusBodyIsDroppedUnread) {
  TestHttpServer server([](const std::string&) {
    return TestHttpReply{.status = 404, .reason = "Not Found", .body = "no such thing"};
  });
  Collected got;
  {
    GetExchange get(server.Url("/missing"), Clock::now() + std::chrono::seconds(20), got.Buf(100),
                    "timeout while");
    auto resp = get.Send({}, "");
    ASSERT_TRUE(resp.ok()) << resp.status().ToString();
    EXPECT_EQ(resp->status_code(), 404);
  }
  EXPECT_EQ(got.body, "");
}

TEST(GetExchangeTest, ASlowServerRunsIntoTheDeadlineWithTheCallersWords) {
  TestHttpServer server([](const std::string&) {
    return TestHttpReply{.body = "late", .delay = std::chrono::milliseconds(3000)};
  });
  Collected got;
  const std::string url = server.Url("/slow");
  GetExchange get(url, Clock::now() + std::chrono::milliseconds(200), got.Buf(100),
                  "download timeout reached while");
  auto resp = get.Send({}, "");
  ASSERT_FALSE(resp.ok());
  EXPECT_EQ(resp.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(resp.status().message(),
            "GET " + url + ": download timeout reached while waiting for the response");
}

TEST(GetExchangeTest, ARefusedConnectionIsUnavailable) {
  std::string url;
  {
    TestHttpServer server([](const std::string&) { return TestHttpReply{}; });
    url = server.Url("/gone");
  }  // nothing listens there any more
  Collected got;
  GetExchange get(url, Clock::now() + std::chrono::seconds(20), got.Buf(100), "timeout while");
  auto resp = get.Send({}, "");
  ASSERT_FALSE(resp.ok());
  EXPECT_EQ(resp.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(resp.status().message(), HasSubstr("GET " + url + ": "));
}

}  // namespace
}  // namespace kubicle::noderuntime::http
