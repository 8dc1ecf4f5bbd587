// GET .../console (plain and followed) and GET .../stats on a real listener
// over FakeSandboxService.
#include <gtest/gtest.h>
#include <cpprest/containerstream.h>
#include <cpprest/http_client.h>

#include <future>
#include <thread>

#include <nlohmann/json.hpp>

#include "noderuntime/server/api_server.h"
#include "noderuntime/api/codec.h"
#include "noderuntime/server/testing/fake_sandbox_service.h"

namespace kubicle::noderuntime::server {

using testing::FakeSandboxService;
namespace {

namespace http = web::http;
using nlohmann::json;
using namespace std::chrono_literals;

constexpr char kAdmin[] = "admin-secret-token";

class ConsoleStatsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ApiServerOptions opts;
    opts.admin_token = kAdmin;
    opts.console_poll_interval = 10ms;
    opts.console_heartbeat = 100ms;
    server_ = std::make_unique<ApiServer>(&fake_, &registry_, opts);
    Status st = Status::Unavailable("no attempt");
    for (int attempt = 0; attempt < 5 && !st.ok(); ++attempt) {
      auto port = PickFreePort();
      ASSERT_TRUE(port.ok());
      base_ = "http://127.0.0.1:" + std::to_string(*port);
      st = server_->Start("127.0.0.1", *port);
    }
    ASSERT_TRUE(st.ok()) << st.ToString();
    client_ = std::make_unique<http::client::http_client>(base_);
    ASSERT_TRUE(fake_.PutTemplate({.name = "tg", .kernel = "/guest", .mem_mib = 64}).ok());
    SandboxSpec spec;
    spec.id = "s";
    spec.template_name = "tg";
    auto s = fake_.CreateSandbox(spec);
    ASSERT_TRUE(s.ok());
    token_ = s->token;
  }
  void TearDown() override { server_->Stop(); }

  http::http_response Get(const std::string& path, const std::string& token = kAdmin) {
    http::http_request req(http::methods::GET);
    req.set_request_uri(path);
    req.headers().add("Authorization", "Bearer " + token);
    return client_->request(req).get();
  }
  static std::string Body(http::http_response r) {
    auto v = r.extract_vector().get();
    return std::string(v.begin(), v.end());
  }

  FakeSandboxService fake_;
  metrics::Registry registry_;
  std::unique_ptr<ApiServer> server_;
  std::string base_, token_;
  std::unique_ptr<http::client::http_client> client_;
};

// Reads NDJSON lines of a streamed body, one at a time.
class Lines {
 public:
  explicit Lines(http::http_response r) : body_(r.body()) {}
  std::optional<json> Next() {
    while (true) {
      concurrency::streams::container_buffer<std::string> line;
      size_t n = body_.read_line(line).get();
      if (n == 0 && line.collection().empty() && body_.is_eof()) return std::nullopt;
      if (line.collection().empty()) continue;
      return json::parse(line.collection());
    }
  }

 private:
  concurrency::streams::istream body_;
};

std::string Data(const json& line) {
  auto d = Base64Decode(line.at("data").get<std::string>());
  return d.ok() ? std::string(d->begin(), d->end()) : "<bad base64>";
}

TEST_F(ConsoleStatsTest, ConsoleReadsTheLogFromAnOffset) {
  fake_.AppendConsole("s", "boot ok\nagent up\n");
  auto r = Get("/v1/sandboxes/s/console");
  ASSERT_EQ(r.status_code(), 200);
  EXPECT_EQ(r.headers().content_type(), "application/octet-stream");
  EXPECT_EQ(Body(r), "boot ok\nagent up\n");
  EXPECT_EQ(Body(Get("/v1/sandboxes/s/console?offset=8")), "agent up\n");
  // An offset past the end (the log rotated) reads from the start.
  EXPECT_EQ(Body(Get("/v1/sandboxes/s/console?offset=999")), "boot ok\nagent up\n");
  // The sandbox's own token may read it; another one may not.
  EXPECT_EQ(Get("/v1/sandboxes/s/console", token_).status_code(), 200);
  EXPECT_EQ(Get("/v1/sandboxes/s/console", "wrong").status_code(), 401);
}

TEST_F(ConsoleStatsTest, ConsoleRefusesBadInputBeforeTheService) {
  const int before = fake_.calls();
  EXPECT_EQ(Get("/v1/sandboxes/s/console?offset=-1").status_code(), 400);
  EXPECT_EQ(Get("/v1/sandboxes/s/console?offset=x").status_code(), 400);
  EXPECT_EQ(Get("/v1/sandboxes/s/console?follow=maybe").status_code(), 400);
  EXPECT_EQ(Get("/v1/sandboxes/s/console?tail=3").status_code(), 400);
  EXPECT_EQ(Get("/v1/sandboxes/S_/console").status_code(), 400);
  EXPECT_EQ(fake_.calls(), before);
  EXPECT_EQ(Get("/v1/sandboxes/nope/console").status_code(), 404);
  EXPECT_EQ(Get("/v1/sandboxes/nope/console?follow=true").status_code(), 404);
}

TEST_F(ConsoleStatsTest, FollowStreamsNewOutputHeartbeatsAndEndsWithTheVm) {
  fake_.AppendConsole("s", "one\n");
  auto r = Get("/v1/sandboxes/s/console?follow=true");
  ASSERT_EQ(r.status_code(), 200);
  EXPECT_EQ(r.headers().content_type(), "application/x-ndjson");
  Lines lines(r);
  auto first = lines.Next();
  ASSERT_TRUE(first);
  EXPECT_EQ((*first)["offset"], 0);
  EXPECT_EQ(Data(*first), "one\n");
  // Nothing new: a heartbeat line carries the offset reached.
  auto beat = lines.Next();
  ASSERT_TRUE(beat);
  EXPECT_FALSE(beat->contains("data"));
  EXPECT_EQ((*beat)["offset"], 4);
  // Output written while following arrives.
  fake_.AppendConsole("s", "two\n");
  std::optional<json> next;
  do next = lines.Next(); while (next && !next->contains("data"));
  ASSERT_TRUE(next);
  EXPECT_EQ((*next)["offset"], 4);
  EXPECT_EQ(Data(*next), "two\n");
  // A rotation starts the new file at offset 0.
  fake_.RotateConsole("s");
  fake_.AppendConsole("s", "3\n");
  do next = lines.Next(); while (next && !next->contains("data"));
  ASSERT_TRUE(next);
  EXPECT_EQ((*next)["offset"], 0);
  EXPECT_EQ(Data(*next), "3\n");
  // The VM stops: the stream ends with its state and reason.
  fake_.FailSandbox("s", "kubicle-vmm killed by signal 9 (SIGKILL)");
  do next = lines.Next(); while (next && !next->contains("end"));
  ASSERT_TRUE(next);
  EXPECT_EQ((*next)["end"]["state"], "Failed");
  EXPECT_EQ((*next)["end"]["message"], "kubicle-vmm killed by signal 9 (SIGKILL)");
  EXPECT_FALSE(lines.Next());
}

TEST_F(ConsoleStatsTest, FollowEndsWhenTheSandboxIsDeleted) {
  auto r = Get("/v1/sandboxes/s/console?follow=1");
  ASSERT_EQ(r.status_code(), 200);
  Lines lines(r);
  auto beat = lines.Next();  // the stream is open
  ASSERT_TRUE(beat);
  ASSERT_TRUE(fake_.DeleteSandbox("s").ok());
  std::optional<json> next;
  do next = lines.Next(); while (next && !next->contains("end"));
  ASSERT_TRUE(next);
  EXPECT_EQ((*next)["end"]["state"], "Gone");
}

// A followed console must not hold the server's Stop (which waits for every
// request in flight) for as long as the VM runs.
TEST_F(ConsoleStatsTest, StopEndsAFollowedConsole) {
  auto r = Get("/v1/sandboxes/s/console?follow=true");
  ASSERT_EQ(r.status_code(), 200);
  Lines lines(r);
  ASSERT_TRUE(lines.Next());
  auto stopped = std::async(std::launch::async, [&] { return server_->Stop(30s); });
  ASSERT_EQ(stopped.wait_for(20s), std::future_status::ready);
  EXPECT_TRUE(stopped.get()) << "the follow was still in flight";
}

TEST_F(ConsoleStatsTest, StatsOfARunningSandbox) {
  SandboxStats s;
  s.cpu_usage_ns = 1500000000;
  s.memory_bytes = 70u << 20;
  s.memory_limit_bytes = 128u << 20;
  s.pids = 2;
  fake_.SetStats("s", s);
  auto r = Get("/v1/sandboxes/s/stats", token_);
  ASSERT_EQ(r.status_code(), 200);
  json j = json::parse(Body(r));
  EXPECT_EQ(j["id"], "s");
  EXPECT_EQ(j["cpuUsageNanos"], 1500000000u);
  EXPECT_EQ(j["memoryBytes"], 70u << 20);
  EXPECT_EQ(j["memoryLimitBytes"], 128u << 20);
  EXPECT_EQ(j["pids"], 2);
  EXPECT_EQ(j["memMib"], 64);
  EXPECT_EQ(j["vcpus"], 1);
  EXPECT_EQ(j["source"], "cgroup");
  EXPECT_EQ(Get("/v1/sandboxes/s/stats?x=1").status_code(), 400);
  EXPECT_EQ(Get("/v1/sandboxes/nope/stats").status_code(), 404);
  fake_.FailSandbox("s", "gone");
  EXPECT_EQ(Get("/v1/sandboxes/s/stats").status_code(), 409);
}

http::http_response Delete(http::client::http_client& c, const std::string& path,
                           const std::string& token) {
  http::http_request req(http::methods::DEL);
  req.set_request_uri(path);
  req.headers().add("Authorization", "Bearer " + token);
  return c.request(req).get();
}

// stat, ls and DELETE of files: what the SDK's filesystem needs beyond
// read and write, with the sandbox's own token.
TEST_F(ConsoleStatsTest, FileStatListAndRemove) {
  auto put = [&](const std::string& path, const std::string& data) {
    const auto* p = reinterpret_cast<const uint8_t*>(data.data());
    ASSERT_TRUE(fake_.WriteFile("s", path, {p, data.size()}, 0640).ok());
  };
  put("/work/a.txt", "hello");
  put("/work/sub/b.txt", "x");
  auto st = Get("/v1/sandboxes/s/stat?path=/work/a.txt", token_);
  ASSERT_EQ(st.status_code(), 200);
  json j = json::parse(Body(st));
  EXPECT_EQ(j["path"], "/work/a.txt");
  EXPECT_EQ(j["type"], "file");
  EXPECT_EQ(j["size"], 5);
  EXPECT_EQ(j["mode"], 0640);
  EXPECT_EQ(json::parse(Body(Get("/v1/sandboxes/s/stat?path=/work", token_)))["type"], "dir");
  EXPECT_EQ(Get("/v1/sandboxes/s/stat?path=/nope", token_).status_code(), 404);

  auto ls = Get("/v1/sandboxes/s/ls?path=/work", token_);
  ASSERT_EQ(ls.status_code(), 200);
  json items = json::parse(Body(ls))["items"];
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0]["name"], "a.txt");
  EXPECT_EQ(items[0]["path"], "/work/a.txt");
  EXPECT_EQ(items[0]["type"], "file");
  EXPECT_EQ(items[1]["name"], "sub");
  EXPECT_EQ(items[1]["type"], "dir");
  EXPECT_EQ(Get("/v1/sandboxes/s/ls?path=/work/a.txt", token_).status_code(), 409);
  EXPECT_EQ(Get("/v1/sandboxes/s/ls?path=/none", token_).status_code(), 404);

  // A non-empty directory needs recursive=true; a file goes at once.
  EXPECT_EQ(Delete(*client_, "/v1/sandboxes/s/files?path=/work/sub", token_).status_code(), 409);
  auto rm = Delete(*client_, "/v1/sandboxes/s/files?path=/work/sub&recursive=true", token_);
  ASSERT_EQ(rm.status_code(), 200);
  EXPECT_EQ(json::parse(Body(rm))["removed"], "/work/sub");
  EXPECT_EQ(Delete(*client_, "/v1/sandboxes/s/files?path=/work/a.txt", token_).status_code(), 200);
  EXPECT_EQ(Get("/v1/sandboxes/s/stat?path=/work/a.txt", token_).status_code(), 404);
  EXPECT_EQ(Delete(*client_, "/v1/sandboxes/s/files?path=/work/a.txt", token_).status_code(), 404);

  // Bad input never reaches the service (asked with the admin token: a
  // sandbox token is itself checked through the service).
  const int before = fake_.calls();
  EXPECT_EQ(Get("/v1/sandboxes/s/stat?path=relative").status_code(), 400);
  EXPECT_EQ(Get("/v1/sandboxes/s/ls").status_code(), 400);
  EXPECT_EQ(Delete(*client_, "/v1/sandboxes/s/files?path=/x&recursive=yes", kAdmin).status_code(), 400);
  EXPECT_EQ(Delete(*client_, "/v1/sandboxes/s/files?path=/x&mode=0644", kAdmin).status_code(), 400);
  EXPECT_EQ(fake_.calls(), before);
  EXPECT_EQ(Get("/v1/sandboxes/s/ls?path=/", "wrong").status_code(), 401);
}

}  // namespace
}  // namespace kubicle::noderuntime::server
