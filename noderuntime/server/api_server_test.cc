// Runs the real listener on 127.0.0.1 against FakeSandboxService and talks
// to it with cpprestsdk's http_client.
#include "noderuntime/server/api_server.h"

#include <gtest/gtest.h>
#include <cpprest/containerstream.h>
#include <cpprest/http_client.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdio>
#include <fstream>
#include <future>
#include <thread>

#include <nlohmann/json.hpp>

#include "noderuntime/server/testing/fake_sandbox_service.h"

namespace kubicle::noderuntime::server {

using testing::FakeSandboxService;
namespace {

namespace http = web::http;
using nlohmann::json;

constexpr char kAdmin[] = "admin-secret-token";

struct Resp {
  int code = 0;
  std::string body;
  json j;
  http::http_headers headers;
};

class ApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ApiServerOptions opts;
    opts.admin_token = kAdmin;
    opts.max_json_bytes = 4096;
    opts.max_file_bytes = 1 << 16;
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
  }
  void TearDown() override { server_->Stop(); }

  Resp Do(const http::method& method, const std::string& path, const std::string& body = "",
          const std::string& token = kAdmin) {
    http::http_request req(method);
    req.set_request_uri(path);
    if (!token.empty()) req.headers().add("Authorization", "Bearer " + token);
    if (!body.empty()) req.set_body(body, "application/json");
    auto resp = client_->request(req).get();
    Resp r;
    r.code = resp.status_code();
    r.headers = resp.headers();
    auto v = resp.extract_vector().get();
    r.body.assign(v.begin(), v.end());
    r.j = json::parse(r.body, nullptr, false);
    return r;
  }

  void PutReadyTemplate(const std::string& name = "tg") {
    auto r = Do("PUT", "/v1/templates/" + name, R"({"kernel":"/guest","memMib":64})");
    ASSERT_EQ(r.code, 202) << r.body;
  }
  json Create(const std::string& body) {
    auto r = Do("POST", "/v1/sandboxes", body);
    EXPECT_EQ(r.code, 201) << r.body;
    return r.j;
  }
  // Asserts a JSON error body with this code mentioning `needle`.
  static void ExpectError(const Resp& r, int code, const std::string& needle = "") {
    EXPECT_EQ(r.code, code) << r.body;
    ASSERT_TRUE(r.j.is_object()) << r.body;
    ASSERT_TRUE(r.j.contains("error")) << r.body;
    EXPECT_TRUE(r.j["error"]["code"].is_string());
    EXPECT_NE(r.j["error"]["message"].get<std::string>().find(needle), std::string::npos)
        << r.body;
  }

  FakeSandboxService fake_;
  metrics::Registry registry_;
  std::unique_ptr<ApiServer> server_;
  std::unique_ptr<http::client::http_client> client_;
  std::string base_;
};

TEST_F(ApiServerTest, HealthzAndMetricsNeedNoToken) {
  EXPECT_EQ(Do("GET", "/healthz", "", "").code, 200);
  auto m = Do("GET", "/metrics", "", "");
  EXPECT_EQ(m.code, 200);
  EXPECT_NE(m.body.find("kubicle_http_request_seconds"), std::string::npos);
}

TEST_F(ApiServerTest, TemplateLifecycle) {
  auto put = Do("PUT", "/v1/templates/tg", R"({"kernel":"/guest","warmup":["true"]})");
  EXPECT_EQ(put.code, 202) << put.body;
  EXPECT_EQ(put.j["state"], "Baking");
  auto get = Do("GET", "/v1/templates/tg");
  EXPECT_EQ(get.code, 200);
  EXPECT_EQ(get.j["state"], "Ready");
  EXPECT_EQ(get.j["spec"]["warmup"][0], "true");
  EXPECT_EQ(Do("PUT", "/v1/templates/tg", R"({"kernel":"/guest","warmup":["true"]})").code, 200);
  ExpectError(Do("PUT", "/v1/templates/tg", R"({"kernel":"/other"})"), 409);
  EXPECT_EQ(Do("GET", "/v1/templates").j["items"].size(), 1u);
  EXPECT_EQ(Do("DELETE", "/v1/templates/tg").code, 200);
  ExpectError(Do("GET", "/v1/templates/tg"), 404, "tg");
}

// Each route calls its own role (ServiceRoles): with the tokens role taken
// from another service, a sandbox's own token no longer opens its routes,
// while the admin still reads that sandbox through the lifecycle role.
TEST_F(ApiServerTest, EachRouteCallsItsOwnRole) {
  PutReadyTemplate();
  json s = Create(R"({"template":"tg","id":"s1"})");
  const std::string tok = s["token"];
  EXPECT_EQ(Do("GET", "/v1/sandboxes/s1", "", tok).code, 200);
  server_->Stop();

  FakeSandboxService other;
  ServiceRoles roles = ServiceRoles::Of(&fake_);
  roles.tokens = &other;
  ApiServerOptions opts;
  opts.admin_token = kAdmin;
  server_ = std::make_unique<ApiServer>(roles, &registry_, opts);
  auto port = PickFreePort();
  ASSERT_TRUE(port.ok());
  ASSERT_TRUE(server_->Start("127.0.0.1", *port).ok());
  client_ = std::make_unique<http::client::http_client>("http://127.0.0.1:" +
                                                        std::to_string(*port));
  const int other_calls = other.calls();
  ExpectError(Do("GET", "/v1/sandboxes/s1", "", tok), 401);
  EXPECT_GT(other.calls(), other_calls) << "the token was not checked by the tokens role";
  auto get = Do("GET", "/v1/sandboxes/s1");
  EXPECT_EQ(get.code, 200);
  EXPECT_EQ(get.j["id"], "s1");
}

TEST_F(ApiServerTest, TemplateInUseCannotBeDeleted) {
  PutReadyTemplate();
  Create(R"({"template":"tg"})");
  ExpectError(Do("DELETE", "/v1/templates/tg"), 409);
}

TEST_F(ApiServerTest, SandboxLifecycle) {
  PutReadyTemplate();
  json s = Create(R"({"template":"tg","id":"s1","labels":{"kubicle.dev/run":"r1"},"ttlSeconds":60})");
  EXPECT_EQ(s["id"], "s1");
  EXPECT_EQ(s["state"], "Running");
  EXPECT_FALSE(s["token"].get<std::string>().empty());
  EXPECT_TRUE(s["expiresAt"].is_string());
  auto get = Do("GET", "/v1/sandboxes/s1");
  EXPECT_EQ(get.code, 200);
  EXPECT_FALSE(get.j.contains("token")) << "the token is returned only once";
  Create(R"({"template":"tg","id":"s2","labels":{"kubicle.dev/run":"r2"}})");
  auto list = Do("GET", "/v1/sandboxes?labelSelector=kubicle.dev%2Frun%3Dr1");
  ASSERT_EQ(list.j["items"].size(), 1u) << list.body;
  EXPECT_EQ(list.j["items"][0]["id"], "s1");
  auto in = Do("GET", "/v1/sandboxes?labelSelector=kubicle.dev/run+in+(r1,r2)");
  EXPECT_EQ(in.j["items"].size(), 2u) << in.body;
  ExpectError(Do("POST", "/v1/sandboxes", R"({"template":"tg","id":"s1"})"), 409);
  EXPECT_EQ(Do("DELETE", "/v1/sandboxes/s1").code, 200);
  ExpectError(Do("GET", "/v1/sandboxes/s1"), 404);
  ExpectError(Do("DELETE", "/v1/sandboxes/s1"), 404);
}

TEST_F(ApiServerTest, SweepByLabelSelector) {
  PutReadyTemplate();
  for (int i = 0; i < 5; ++i) Create(R"({"template":"tg","labels":{"kubicle.dev/run":"x"}})");
  Create(R"({"template":"tg","labels":{"kubicle.dev/run":"keep"}})");
  auto r = Do("DELETE", "/v1/sandboxes?labelSelector=kubicle.dev/run%3Dx");
  EXPECT_EQ(r.code, 200) << r.body;
  EXPECT_EQ(r.j["deleted"].size(), 5u);
  EXPECT_EQ(fake_.sandbox_count(), 1u);
}

TEST_F(ApiServerTest, CollectionDeleteNeedsASelector) {
  PutReadyTemplate();
  Create(R"({"template":"tg"})");
  ExpectError(Do("DELETE", "/v1/sandboxes"), 400, "labelSelector");
  ExpectError(Do("DELETE", "/v1/sandboxes?labelSelector="), 400, "labelSelector");
  EXPECT_EQ(fake_.sandbox_count(), 1u);
}

TEST_F(ApiServerTest, BadInputChangesNothing) {
  PutReadyTemplate();
  const int calls = fake_.calls();
  ExpectError(Do("POST", "/v1/sandboxes", R"({"template":)"), 400, "JSON");
  ExpectError(Do("POST", "/v1/sandboxes", R"([1,2])"), 400, "object");
  ExpectError(Do("POST", "/v1/sandboxes", R"({"template":"tg","ttlSeconds":"1h"})"), 400,
              "ttlSeconds");
  ExpectError(Do("POST", "/v1/sandboxes", R"({"template":"tg","lables":{}})"), 400, "lables");
  ExpectError(Do("POST", "/v1/sandboxes", R"({"template":"tg","id":"Not_Valid"})"), 400, "id");
  ExpectError(Do("POST", "/v1/sandboxes?dryRun=1", R"({"template":"tg"})"), 400, "dryRun");
  ExpectError(Do("POST", "/v1/sandboxes", R"({"template":"tg","labels":{"a b":"c"}})"), 400);
  ExpectError(Do("GET", "/v1/sandboxes/UPPER"), 400, "DNS-1123");
  ExpectError(Do("PUT", "/v1/templates/t", R"({"kernel":5})"), 400, "kernel");
  std::string big = R"({"template":"tg","hostname":")" + std::string(5000, 'a') + "\"}";
  ExpectError(Do("POST", "/v1/sandboxes", big), 413, "4096");
  EXPECT_EQ(fake_.calls(), calls) << "a refused request reached the service";
  EXPECT_EQ(fake_.sandbox_count(), 0u);
  // Checked by the service: nothing created either.
  ExpectError(Do("POST", "/v1/sandboxes", R"({"template":"nope"})"), 404, "nope");
  ExpectError(Do("GET", "/v1/sandboxes?labelSelector=a%20in%20(b"), 400);
  EXPECT_EQ(fake_.sandbox_count(), 0u);
}

TEST_F(ApiServerTest, UnknownRouteAndWrongMethod) {
  ExpectError(Do("GET", "/v1/nothing"), 404, "/v1/nothing");
  ExpectError(Do("GET", "/v2/sandboxes"), 404);
  auto r = Do("PATCH", "/v1/sandboxes/s1");
  ExpectError(r, 405, "PATCH");
  EXPECT_EQ(r.headers["Allow"], "GET, DELETE");
  ExpectError(Do("GET", "/v1/sandboxes/s1/exec"), 405);
}

TEST_F(ApiServerTest, ServiceErrorsMapToHttp) {
  PutReadyTemplate();
  fake_.create_error = Status::ResourceExhausted("no memory left");
  ExpectError(Do("POST", "/v1/sandboxes", R"({"template":"tg"})"), 429, "no memory");
  fake_.create_error = Status::Unavailable("pool empty");
  ExpectError(Do("POST", "/v1/sandboxes", R"({"template":"tg"})"), 503);
  fake_.create_error = Status::DeadlineExceeded("slow");
  ExpectError(Do("POST", "/v1/sandboxes", R"({"template":"tg"})"), 504);
  fake_.create_error = Status::DataLoss("disk");
  ExpectError(Do("POST", "/v1/sandboxes", R"({"template":"tg"})"), 500);
}

TEST_F(ApiServerTest, AuthAdminAndSandboxTokens) {
  PutReadyTemplate();
  json a = Create(R"({"template":"tg","id":"a"})");
  Create(R"({"template":"tg","id":"b"})");
  const std::string tok = a["token"];
  ExpectError(Do("GET", "/v1/sandboxes", "", ""), 401, "Authorization");
  ExpectError(Do("GET", "/v1/sandboxes", "", "wrong"), 401);
  ExpectError(Do("GET", "/v1/templates", "", tok), 401);
  http::http_request basic(http::methods::GET);
  basic.set_request_uri("/v1/sandboxes");
  basic.headers().add("Authorization", std::string("Basic ") + kAdmin);
  EXPECT_EQ(client_->request(basic).get().status_code(), 401);

  EXPECT_EQ(Do("GET", "/v1/sandboxes/a", "", tok).code, 200);
  auto exec = Do("POST", "/v1/sandboxes/a/exec", R"({"argv":["echo","hi"]})", tok);
  EXPECT_EQ(exec.code, 200) << exec.body;
  http::http_request put(http::methods::PUT);
  put.set_request_uri("/v1/sandboxes/a/files?path=/f");
  put.headers().add("Authorization", "Bearer " + tok);
  put.set_body(std::string("x"));
  EXPECT_EQ(client_->request(put).get().status_code(), 200);
  EXPECT_EQ(Do("GET", "/v1/sandboxes/a/files?path=/f", "", tok).body, "x");
  // Another sandbox's token does not open this one.
  ExpectError(Do("GET", "/v1/sandboxes/b", "", tok), 401);
  ExpectError(Do("POST", "/v1/sandboxes/b/exec", R"({"argv":["echo"]})", tok), 401);
  // Its own token, on a route that needs the admin token.
  ExpectError(Do("DELETE", "/v1/sandboxes/a", "", tok), 403, "admin");
  ExpectError(Do("POST", "/v1/sandboxes/a/fork", "{}", tok), 403);
  EXPECT_EQ(fake_.sandbox_count(), 2u);
}

TEST_F(ApiServerTest, Fork) {
  PutReadyTemplate();
  Create(R"({"template":"tg","id":"src","labels":{"kubicle.dev/run":"r"}})");
  auto r = Do("POST", "/v1/sandboxes/src/fork", R"({"count":3,"labels":{"child":"yes"}})");
  ASSERT_EQ(r.code, 201) << r.body;
  ASSERT_EQ(r.j["items"].size(), 3u);
  for (const auto& c : r.j["items"]) {
    EXPECT_EQ(c["forkOf"], "src");
    EXPECT_EQ(c["labels"]["child"], "yes");
    EXPECT_EQ(c["labels"]["kubicle.dev/run"], "r");
    EXPECT_FALSE(c["token"].get<std::string>().empty());
  }
  ExpectError(Do("POST", "/v1/sandboxes/src/fork", R"({"count":0})"), 400, "count");
  ExpectError(Do("POST", "/v1/sandboxes/src/fork", R"({"count":65})"), 400, "count");
  ExpectError(Do("POST", "/v1/sandboxes/nope/fork", R"({"count":1})"), 404);
  EXPECT_EQ(fake_.sandbox_count(), 4u);
}

// docs/node.md, "Suspend and resume": the owner's token or the admin's,
// no body, idempotent, and exec or files of a suspended sandbox are 409.
TEST_F(ApiServerTest, SuspendAndResume) {
  PutReadyTemplate();
  json a = Create(R"({"template":"tg","id":"a"})");
  json b = Create(R"({"template":"tg","id":"b"})");
  const std::string tok = a["token"];
  auto r = Do("POST", "/v1/sandboxes/a/suspend", "", tok);
  ASSERT_EQ(r.code, 200) << r.body;
  EXPECT_EQ(r.j["state"], "Suspended");
  EXPECT_TRUE(r.j["suspendedAt"].is_string());
  EXPECT_GT(r.j["suspendedBytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(Do("POST", "/v1/sandboxes/a/suspend", "", tok).code, 200);  // idempotent
  EXPECT_EQ(Do("GET", "/v1/sandboxes/a", "", tok).j["state"], "Suspended");
  ExpectError(Do("POST", "/v1/sandboxes/a/exec", R"({"argv":["echo","hi"]})", tok), 409, "Suspended");
  ExpectError(Do("GET", "/v1/sandboxes/a/files?path=/f", "", tok), 409, "resume");
  // Another sandbox's token does not reach it; a body is refused; GET is 405.
  ExpectError(Do("POST", "/v1/sandboxes/a/resume", "", b["token"]), 401);
  ExpectError(Do("POST", "/v1/sandboxes/a/resume", "{}", tok), 413, "no request body");
  EXPECT_EQ(Do("GET", "/v1/sandboxes/a/resume", "", tok).code, 405);
  ExpectError(Do("POST", "/v1/sandboxes/nope/resume"), 404);
  ExpectError(Do("POST", "/v1/sandboxes/BAD/suspend"), 400, "DNS-1123");
  r = Do("POST", "/v1/sandboxes/a/resume");  // the admin token too
  ASSERT_EQ(r.code, 200) << r.body;
  EXPECT_EQ(r.j["state"], "Running");
  EXPECT_TRUE(r.j["suspendedAt"].is_null());
  EXPECT_EQ(Do("POST", "/v1/sandboxes/a/resume", "", tok).code, 200);
  EXPECT_EQ(Do("POST", "/v1/sandboxes/a/exec", R"({"argv":["echo","hi"]})", tok).code, 200);
  fake_.FailSandbox("b", "boom");
  ExpectError(Do("POST", "/v1/sandboxes/b/suspend"), 409, "Failed");
}

TEST_F(ApiServerTest, ExecCollected) {
  PutReadyTemplate();
  Create(R"({"template":"tg","id":"s"})");
  auto r = Do("POST", "/v1/sandboxes/s/exec", R"({"argv":["echo","hello","world"]})");
  ASSERT_EQ(r.code, 200) << r.body;
  EXPECT_EQ(r.j["exitCode"], 0);
  EXPECT_EQ(r.j["encoding"], "utf-8");
  EXPECT_EQ(r.j["stdout"], "hello world\n");
  r = Do("POST", "/v1/sandboxes/s/exec", R"({"argv":["fail","3"]})");
  EXPECT_EQ(r.j["exitCode"], 3);
  EXPECT_EQ(r.j["stderr"], "failing\n");
  // Binary output and stdin travel as base64.
  fake_.exec_hook = [](const std::string&, const ExecOptions& o) {
    guest::client::ExecResult res;
    res.exit_code = 0;
    res.stdout_data = o.request.stdin_data;
    res.stdout_data.push_back(0xff);
    return Result<guest::client::ExecResult>(res);
  };
  r = Do("POST", "/v1/sandboxes/s/exec", R"({"argv":["cat"],"stdinBase64":"aGk="})");
  EXPECT_EQ(r.j["encoding"], "base64");
  EXPECT_EQ(r.j["stdout"], "aGn/");
  ExpectError(Do("POST", "/v1/sandboxes/s/exec", R"({"argv":["cat"],"shell":"x"})"), 400, "argv");
  ExpectError(Do("POST", "/v1/sandboxes/s/exec?stream=maybe", R"({"argv":["a"]})"), 400, "stream");
  ExpectError(Do("POST", "/v1/sandboxes/none/exec", R"({"argv":["a"]})"), 404);
}

TEST_F(ApiServerTest, ExecStreamsOutputAsItIsProduced) {
  PutReadyTemplate();
  Create(R"({"template":"tg","id":"s"})");
  std::promise<void> first_seen;
  auto first_seen_future = first_seen.get_future().share();
  std::atomic<bool> waited_out{false};
  fake_.exec_hook = [&](const std::string&, const ExecOptions& o) {
    auto out = [&](const std::string& s) {
      o.io.on_output(guest::protocol::OutputStream::kStdout,
                     guest::protocol::Bytes(s.begin(), s.end()));
    };
    out("one\n");
    // The rest is produced only after the client has read the first chunk:
    // if the API buffered the whole response this would wait out.
    if (first_seen_future.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
      waited_out = true;
    }
    out("two\n");
    o.io.on_output(guest::protocol::OutputStream::kStderr, guest::protocol::Bytes{'e'});
    guest::client::ExecResult res;
    res.exit_code = 7;
    return Result<guest::client::ExecResult>(res);
  };
  http::http_request req(http::methods::POST);
  req.set_request_uri("/v1/sandboxes/s/exec?stream=true");
  req.headers().add("Authorization", std::string("Bearer ") + kAdmin);
  req.set_body(std::string(R"({"argv":["x"]})"), "application/json");
  auto resp = client_->request(req).get();
  ASSERT_EQ(resp.status_code(), 200);
  EXPECT_EQ(resp.headers().content_type(), "application/x-ndjson");
  auto body = resp.body();
  std::vector<json> lines;
  while (true) {
    concurrency::streams::container_buffer<std::string> line;
    size_t n = body.read_line(line).get();
    if (n == 0 && body.is_eof()) break;
    if (line.collection().empty()) continue;
    lines.push_back(json::parse(line.collection()));
    if (lines.size() == 1) first_seen.set_value();
  }
  EXPECT_FALSE(waited_out) << "the first chunk did not reach the client before the exec ended";
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0]["stream"], "stdout");
  EXPECT_EQ(lines[0]["data"], "b25lCg==");  // "one\n"
  EXPECT_EQ(lines[1]["data"], "dHdvCg==");  // "two\n"
  EXPECT_EQ(lines[2]["stream"], "stderr");
  EXPECT_EQ(lines[3]["exit"]["exitCode"], 7);
}

// A streamed answer is one answer: a failure after it started ends it
// (an error line for exec, a cut body for files), never a second response.
TEST_F(ApiServerTest, ExecStreamFailingHalfWayEndsWithOneErrorLine) {
  PutReadyTemplate();
  Create(R"({"template":"tg","id":"s"})");
  fake_.exec_hook = [](const std::string&, const ExecOptions& o) {
    o.io.on_output(guest::protocol::OutputStream::kStdout, guest::protocol::Bytes{'o', 'k'});
    return Result<guest::client::ExecResult>(
        Status::Unavailable("agent connection broken: agent closed the connection"));
  };
  auto r = Do("POST", "/v1/sandboxes/s/exec?stream=true", R"({"argv":["x"]})");
  ASSERT_EQ(r.code, 200) << r.body;
  std::vector<json> lines;
  size_t start = 0;
  for (size_t nl; (nl = r.body.find('\n', start)) != std::string::npos; start = nl + 1) {
    lines.push_back(json::parse(r.body.substr(start, nl - start)));
  }
  EXPECT_EQ(start, r.body.size()) << "the body ends with a whole line";
  ASSERT_EQ(lines.size(), 2u) << r.body;
  EXPECT_EQ(lines[0]["data"], "b2s=");  // "ok"
  EXPECT_EQ(lines[1]["error"]["code"], "Unavailable");
  EXPECT_FALSE(lines[1].contains("exit"));
}

TEST_F(ApiServerTest, FileReadFailingHalfWayIsACutBodyNeverACompleteOne) {
  PutReadyTemplate();
  Create(R"({"template":"tg","id":"s"})");
  ASSERT_EQ(Do("PUT", "/v1/sandboxes/s/files?path=/f", std::string(50000, 'z')).code, 200);
  fake_.read_chunk_bytes = 10000;
  fake_.read_fails_after_bytes = 20000;
  const int port = std::stoi(base_.substr(base_.rfind(':') + 1));
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string req = std::string("GET /v1/sandboxes/s/files?path=/f HTTP/1.1\r\n") +
                          "Host: node\r\nAuthorization: Bearer " + kAdmin + "\r\n\r\n";
  ASSERT_EQ(::send(fd.get(), req.data(), req.size(), MSG_NOSIGNAL), ssize_t(req.size()));
  // Everything until the server closes (it must: the answer cannot end well).
  std::string got;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  char buf[16384];
  for (;;) {
    pollfd p{fd.get(), POLLIN, 0};
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the connection stayed open";
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, size_t(n));
  }
  size_t answers = 0;
  for (size_t at = got.find("HTTP/1.1 "); at != std::string::npos;
       at = got.find("HTTP/1.1 ", at + 1)) {
    ++answers;
  }
  EXPECT_LE(answers, 1u) << got.substr(0, 400);
  if (answers == 1) {
    EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got.substr(0, 200);
  }
  const std::string last_chunk = "\r\n0\r\n\r\n";
  EXPECT_FALSE(got.size() >= last_chunk.size() &&
               got.compare(got.size() - last_chunk.size(), last_chunk.size(), last_chunk) == 0)
      << "a chunked body that ends well would pass for a short file";
  EXPECT_EQ(got.find("\"error\""), std::string::npos) << "no error document after the data";
}

TEST_F(ApiServerTest, Files) {
  PutReadyTemplate();
  Create(R"({"template":"tg","id":"s"})");
  std::vector<unsigned char> data(50000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 7);
  http::http_request put(http::methods::PUT);
  put.set_request_uri("/v1/sandboxes/s/files?path=%2Ftmp%2Fa%20b&mode=0755");
  put.headers().add("Authorization", std::string("Bearer ") + kAdmin);
  put.set_body(data);
  auto pr = client_->request(put).get();
  ASSERT_EQ(pr.status_code(), 200) << pr.extract_string().get();
  EXPECT_EQ(fake_.file_mode("s", "/tmp/a b"), 0755u);
  auto get = Do("GET", "/v1/sandboxes/s/files?path=/tmp/a%20b");
  EXPECT_EQ(get.code, 200);
  EXPECT_EQ(get.headers.content_type(), "application/octet-stream");
  EXPECT_EQ(std::vector<unsigned char>(get.body.begin(), get.body.end()), data);
  ExpectError(Do("GET", "/v1/sandboxes/s/files?path=/none"), 404);
  ExpectError(Do("GET", "/v1/sandboxes/s/files?path=rel"), 400, "absolute");
  ExpectError(Do("GET", "/v1/sandboxes/s/files"), 400, "path");
  ExpectError(Do("PUT", "/v1/sandboxes/s/files?path=/x&mode=999"), 400, "mode");
  http::http_request big(http::methods::PUT);
  big.set_request_uri("/v1/sandboxes/s/files?path=/big");
  big.headers().add("Authorization", std::string("Bearer ") + kAdmin);
  big.set_body(std::vector<unsigned char>((1 << 16) + 1, 'x'));
  EXPECT_EQ(client_->request(big).get().status_code(), 413);
  ExpectError(Do("GET", "/v1/sandboxes/s/files?path=/big"), 404);
}

TEST_F(ApiServerTest, ManyConcurrentRequests) {
  PutReadyTemplate();
  constexpr int kThreads = 32;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      http::client::http_client client(base_);
      auto call = [&](const http::method& m, const std::string& path, const std::string& body) {
        http::http_request req(m);
        req.set_request_uri(path);
        req.headers().add("Authorization", std::string("Bearer ") + kAdmin);
        if (!body.empty()) req.set_body(body, "application/json");
        auto resp = client.request(req).get();
        return std::make_pair(static_cast<int>(resp.status_code()), resp.extract_string().get());
      };
      const std::string id = "c" + std::to_string(t);
      for (int i = 0; i < 5; ++i) {
        if (call("POST", "/v1/sandboxes", R"({"template":"tg","id":")" + id + "\"}").first != 201 ||
            call("POST", "/v1/sandboxes/" + id + "/exec", R"({"argv":["echo","x"]})").second.find(
                "x\\n") == std::string::npos ||
            call("DELETE", "/v1/sandboxes/" + id, "").first != 200) {
          ++failures;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(fake_.sandbox_count(), 0u);
}

TEST_F(ApiServerTest, HealthzAnswersWhileManyExecsBlock) {
  PutReadyTemplate();
  Create(R"({"template":"tg","id":"s"})");
  // More blocked execs than cpprestsdk has I/O threads (40 by default).
  constexpr int kBlocked = 64;
  std::promise<void> release;
  auto released = release.get_future().share();
  std::atomic<int> started{0};
  fake_.exec_hook = [&](const std::string&, const ExecOptions&) {
    ++started;
    released.wait_for(std::chrono::seconds(60));
    guest::client::ExecResult r;
    r.exit_code = 0;
    return Result<guest::client::ExecResult>(r);
  };
  std::vector<pplx::task<http::http_response>> execs;
  for (int i = 0; i < kBlocked; ++i) {
    http::http_request req(http::methods::POST);
    req.set_request_uri("/v1/sandboxes/s/exec");
    req.headers().add("Authorization", std::string("Bearer ") + kAdmin);
    req.set_body(std::string(R"({"argv":["x"]})"), "application/json");
    execs.push_back(client_->request(req));
  }
  for (int i = 0; i < 6000 && started < kBlocked; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (started < kBlocked) release.set_value();  // let the stuck ones finish before failing
  ASSERT_EQ(started, kBlocked) << "execs were not all admitted at once";
  // Every exec is now blocked inside the service; the API still answers.
  EXPECT_EQ(Do("GET", "/healthz", "", "").code, 200);
  EXPECT_EQ(Do("GET", "/v1/sandboxes/s").code, 200);
  release.set_value();
  for (auto& t : execs) EXPECT_EQ(t.get().status_code(), 200);
}

TEST_F(ApiServerTest, MetricsParseWithPrometheusClient) {
  PutReadyTemplate();
  Create(R"({"template":"tg","id":"s"})");
  Do("GET", "/v1/nothing");
  auto m = Do("GET", "/metrics", "", "");
  ASSERT_EQ(m.code, 200);
  EXPECT_NE(m.body.find(R"(route="POST /v1/sandboxes",code="201")"), std::string::npos) << m.body;
  char path[] = "/tmp/kubicle-api-metrics-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, m.body.data(), m.body.size()), static_cast<ssize_t>(m.body.size()));
  close(fd);
  std::string cmd = std::string("python3 ") + KUBICLE_CHECK_METRICS + " " + path +
                    " 'kubicle_http_request_seconds{route=POST /v1/sandboxes,code=201}'" +
                    " 'kubicle_http_request_seconds{code=404}'";
  int rc = std::system(cmd.c_str());
  unlink(path);
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) GTEST_SKIP() << "prometheus_client not installed";
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << cmd;
}

TEST(ApiServer, BindFailureIsAStatus) {
  FakeSandboxService fake;
  metrics::Registry registry;
  ApiServer empty(&fake, &registry, {});
  EXPECT_EQ(empty.Start("127.0.0.1", 1).code(), StatusCode::kInvalidArgument);
  metrics::Registry registry2;
  ApiServer s(&fake, &registry2, ApiServerOptions{.admin_token = "t"});
  EXPECT_FALSE(s.Start("256.1.1.1", 80).ok());
}

}  // namespace
}  // namespace kubicle::noderuntime::server
