// POST /v1/templates/{name}/run through the real listener against
// FakeSandboxService: who may run (the template's run token only, or the
// admin token), the per-token budget, body errors, a run with a workspace,
// the streamed answer; and the workspace routes (docs/workspaces.md): who
// may call them, one writer, files without a VM.
#include <gtest/gtest.h>
#include <cpprest/http_client.h>

#include <atomic>
#include <future>
#include <thread>

#include <nlohmann/json.hpp>

#include "noderuntime/server/api_server.h"
#include "noderuntime/server/testing/fake_sandbox_service.h"
#include "noderuntime/node_util.h"

namespace kubicle::noderuntime::server {

using testing::FakeSandboxService;
namespace {

namespace http = web::http;
using nlohmann::json;
using namespace std::chrono_literals;

constexpr char kAdmin[] = "admin-secret-token";
constexpr char kRunTg[] = "run-token-of-tg";
constexpr char kRunOther[] = "run-token-of-other";

struct Resp {
  int code = 0;
  std::string body;
  json j;
};

class RunApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ApiServerOptions opts;
    opts.admin_token = kAdmin;
    opts.max_json_bytes = 4096;
    opts.max_in_flight_per_run_token = 2;
    server_ = std::make_unique<ApiServer>(&fake_, &registry_, opts);
    Status st = Status::Unavailable("no attempt");
    for (int attempt = 0; attempt < 5 && !st.ok(); ++attempt) {
      auto port = PickFreePort();
      ASSERT_TRUE(port.ok());
      st = server_->Start("127.0.0.1", *port);
      client_ = std::make_unique<http::client::http_client>("http://127.0.0.1:" + std::to_string(*port));
    }
    ASSERT_TRUE(st.ok()) << st.ToString();
    for (const char* name : {"tg", "other"}) {
      TemplateSpec spec;
      spec.name = name;
      spec.kernel = "/guest";
      ASSERT_TRUE(fake_.PutTemplate(spec).ok());
    }
    ASSERT_TRUE(fake_.SetRunToken("tg", Sha256Hex(kRunTg)).ok());
    ASSERT_TRUE(fake_.SetRunToken("other", Sha256Hex(kRunOther)).ok());
  }
  void TearDown() override { server_->Stop(); }

  http::http_request Request(const std::string& path, const std::string& body,
                             const std::string& token, const http::method& method = http::methods::POST) {
    http::http_request req(method);
    req.set_request_uri(path);
    if (!token.empty()) req.headers().add("Authorization", "Bearer " + token);
    if (!body.empty()) req.set_body(body, "application/json");
    return req;
  }
  Resp Do(const std::string& path, const std::string& body, const std::string& token,
          const http::method& method = http::methods::POST) {
    auto resp = client_->request(Request(path, body, token, method)).get();
    Resp r;
    r.code = resp.status_code();
    auto v = resp.extract_vector().get();
    r.body.assign(v.begin(), v.end());
    r.j = json::parse(r.body, nullptr, false);
    return r;
  }
  Resp Run(const std::string& body, const std::string& token = kRunTg, const std::string& tmpl = "tg") {
    return Do("/v1/templates/" + tmpl + "/run", body, token);
  }
  static void ExpectError(const Resp& r, int code, const std::string& needle = "") {
    EXPECT_EQ(r.code, code) << r.body;
    ASSERT_TRUE(r.j.is_object() && r.j.contains("error")) << r.body;
    EXPECT_NE(r.j["error"]["message"].get<std::string>().find(needle), std::string::npos) << r.body;
  }

  FakeSandboxService fake_;
  metrics::Registry registry_;
  std::unique_ptr<ApiServer> server_;
  std::unique_ptr<http::client::http_client> client_;
};

TEST_F(RunApiTest, RunAnswersOutputExitCodeAndTimings) {
  auto r = Run(R"({"argv":["echo","hi","there"]})");
  ASSERT_EQ(r.code, 200) << r.body;
  EXPECT_EQ(r.j["stdout"], "hi there\n");
  EXPECT_EQ(r.j["exitCode"], 0);
  EXPECT_EQ(r.j["timings"]["restoreMs"], 1.0);
  EXPECT_TRUE(r.j["timings"].contains("execMs") && r.j["timings"].contains("totalMs"));
  auto f = Run(R"({"argv":["fail","3"]})");
  ASSERT_EQ(f.code, 200) << f.body;
  EXPECT_EQ(f.j["exitCode"], 3);
  EXPECT_EQ(fake_.runs(), 2);
}

TEST_F(RunApiTest, OnlyThatTemplatesRunTokenOrTheAdminMayRun) {
  auto sb = fake_.CreateSandbox({.template_name = "tg"});
  ASSERT_TRUE(sb.ok());
  const std::string body = R"({"argv":["echo","x"]})";
  ExpectError(Run(body, kRunOther), 401, "run token of template \"tg\"");  // another template's
  ExpectError(Run(body, sb->token), 401);                                   // a sandbox's
  ExpectError(Run(body, ""), 401);
  ExpectError(Run(body, std::string(kRunTg) + "x"), 401);
  EXPECT_EQ(fake_.runs(), 0);  // none reached the service
  EXPECT_EQ(Run(body, kRunTg).code, 200);
  EXPECT_EQ(Run(body, kRunOther, "other").code, 200);
  EXPECT_EQ(Run(body, kAdmin).code, 200);
  // A run token opens nothing else: not its template, not a sandbox.
  ExpectError(Do("/v1/templates/tg", "", kRunTg, http::methods::GET), 401);
  ExpectError(Do("/v1/sandboxes/" + sb->id + "/exec", body, kRunTg), 401);
  ExpectError(Do("/v1/sandboxes", R"({"template":"tg"})", kRunTg), 401);
  // A cleared token runs nothing.
  ASSERT_TRUE(fake_.SetRunToken("tg", "").ok());
  ExpectError(Run(body, kRunTg), 401);
  EXPECT_EQ(fake_.runs(), 3);
}

TEST_F(RunApiTest, BadRequestsAreRefusedBeforeAnyRun) {
  ExpectError(Run(R"({})"), 400, "argv");
  ExpectError(Run(R"({"argv":"echo"})"), 400);
  ExpectError(Run(R"([1])"), 400);
  ExpectError(Run(R"({"argv":["x"],"bogus":1})"), 400, "bogus");
  ExpectError(Run(R"({"argv":["x"],"timeoutSeconds":0})"), 400, "timeoutSeconds");
  ExpectError(Run(R"({"argv":["x"],"workspace":7})"), 400, "workspace");
  ExpectError(Run(R"({"argv":["x"],"workspace":"ws-1"})"), 404, "no workspace");
  ExpectError(Run(R"({"argv":["x"],"workspace":"Bad_Name"})"), 400, "workspace");
  ExpectError(Run(R"({"argv":["x"]})", kAdmin, "nope"), 404, "nope");
  ExpectError(Run(R"({"argv":["x"]})", kAdmin, "Bad_Name"), 400);
  ExpectError(Do("/v1/templates/tg/run?stream=maybe", R"({"argv":["x"]})", kRunTg), 400, "stream");
  ExpectError(Do("/v1/templates/tg/run", "", kRunTg, http::methods::GET), 405);
  ExpectError(Run(R"({"argv":[")" + std::string(5000, 'a') + R"("]})"), 413);
  fake_.FailTemplate("tg", "bake failed");
  ExpectError(Run(R"({"argv":["x"]})"), 409, "not ready on this node");
  EXPECT_EQ(fake_.runs(), 0);
}

TEST_F(RunApiTest, StreamedRunEndsWithExitAndTimings) {
  auto r = Do("/v1/templates/tg/run?stream=true", R"({"argv":["echo","streamed"]})", kRunTg);
  ASSERT_EQ(r.code, 200) << r.body;
  std::vector<json> lines;
  size_t at = 0;
  while (at < r.body.size()) {
    size_t nl = r.body.find('\n', at);
    ASSERT_NE(nl, std::string::npos) << r.body;
    lines.push_back(json::parse(r.body.substr(at, nl - at)));
    at = nl + 1;
  }
  ASSERT_EQ(lines.size(), 2u) << r.body;
  EXPECT_EQ(lines[0]["stream"], "stdout");
  EXPECT_EQ(lines[0]["data"], "c3RyZWFtZWQK");  // "streamed\n"
  EXPECT_EQ(lines[1]["exit"]["exitCode"], 0);
  EXPECT_EQ(lines[1]["exit"]["timings"]["restoreMs"], 1.0);
  EXPECT_FALSE(lines[1]["exit"].contains("stdout"));
}

TEST_F(RunApiTest, EachRunTokenHasItsOwnBudget) {
  std::promise<void> release;
  auto released = release.get_future().share();
  std::atomic<int> started{0};
  fake_.run_hook = [&](const RunOptions&) {
    ++started;
    released.wait_for(60s);
    guest::client::ExecResult r;
    r.exit_code = 0;
    return Result<guest::client::ExecResult>(r);
  };
  std::vector<pplx::task<http::http_response>> held;
  for (int i = 0; i < 2; ++i) held.push_back(client_->request(Request("/v1/templates/tg/run", R"({"argv":["x"]})", kRunTg)));
  for (int i = 0; i < 2000 && started < 2; ++i) std::this_thread::sleep_for(5ms);
  if (started < 2) release.set_value();
  ASSERT_EQ(started, 2);
  ExpectError(Run(R"({"argv":["x"]})"), 429, "run token of template tg");
  // Another template's token, and the admin, still run.
  auto other = client_->request(Request("/v1/templates/other/run", R"({"argv":["x"]})", kRunOther));
  for (int i = 0; i < 2000 && started < 3; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(started, 3);
  release.set_value();
  EXPECT_EQ(other.get().status_code(), 200);
  for (auto& t : held) EXPECT_EQ(t.get().status_code(), 200);
  EXPECT_EQ(Run(R"({"argv":["x"]})").code, 200);  // the slots came back
}

TEST_F(RunApiTest, WorkspaceRoutesTokensOneWriterAndFiles) {
  auto put = Do("/v1/workspaces/ws-1", R"({"sizeMiB":64,"labels":{"team":"a"}})", kAdmin,
                http::methods::PUT);
  ASSERT_EQ(put.code, 201) << put.body;
  const std::string tok = put.j.value("token", "");
  ASSERT_FALSE(tok.empty());
  EXPECT_EQ(put.j["sizeMiB"], 64);
  EXPECT_TRUE(put.j["attachedTo"].is_null());
  auto again = Do("/v1/workspaces/ws-1", R"({"sizeMiB":64})", kAdmin, http::methods::PUT);
  EXPECT_EQ(again.code, 200);
  EXPECT_FALSE(again.j.contains("token"));
  ExpectError(Do("/v1/workspaces/ws-1", R"({"sizeMiB":128})", kAdmin, http::methods::PUT), 409);
  ExpectError(Do("/v1/workspaces/ws-2", R"({"sizeMiB":1})", kAdmin, http::methods::PUT), 400, "sizeMiB");
  ExpectError(Do("/v1/workspaces/ws-2", R"({"sizeMiB":64,"bogus":1})", kAdmin, http::methods::PUT), 400, "bogus");
  // The workspace's token: its files and GET; 403 on admin routes, 401 elsewhere.
  auto w = Do("/v1/workspaces/ws-1/files?path=/d/a.txt&mode=0600", "hello", tok, http::methods::PUT);
  ASSERT_EQ(w.code, 200) << w.body;
  auto r = Do("/v1/workspaces/ws-1/files?path=/d/a.txt", "", tok, http::methods::GET);
  EXPECT_EQ(r.code, 200);
  EXPECT_EQ(r.body, "hello");
  auto st = Do("/v1/workspaces/ws-1/stat?path=/d/a.txt", "", tok, http::methods::GET);
  EXPECT_EQ(st.j["mode"], 0600);
  auto ls = Do("/v1/workspaces/ws-1/ls?path=/d", "", tok, http::methods::GET);
  ASSERT_EQ(ls.j["items"].size(), 1u);
  EXPECT_EQ(Do("/v1/workspaces/ws-1", "", tok, http::methods::GET).code, 200);
  ExpectError(Do("/v1/workspaces/ws-1", "", tok, http::methods::DEL), 403);
  ExpectError(Do("/v1/workspaces", "", tok, http::methods::GET), 401);
  ExpectError(Do("/v1/workspaces/ws-1/files?path=/d/a.txt", "", kRunTg, http::methods::GET), 401);
  ExpectError(Do("/v1/workspaces/ws-1/files?path=/d/a.txt", "", "", http::methods::GET), 401);
  ExpectError(Do("/v1/workspaces/ws-1/files?path=rel", "", tok, http::methods::GET), 400, "path");
  // One writer: a sandbox holds it; file calls, a second holder, a run and
  // a delete are 409 naming it; its delete frees it.
  auto sb = Do("/v1/sandboxes", R"({"template":"tg","id":"sb-1","workspace":"ws-1"})", kAdmin);
  ASSERT_EQ(sb.code, 201) << sb.body;
  EXPECT_EQ(sb.j["workspace"], "ws-1");
  EXPECT_EQ(Do("/v1/workspaces/ws-1", "", kAdmin, http::methods::GET).j["attachedTo"], "sb-1");
  ExpectError(Do("/v1/workspaces/ws-1/files?path=/d/a.txt", "", tok, http::methods::GET), 409, "sb-1");
  ExpectError(Do("/v1/sandboxes", R"({"template":"tg","workspace":"ws-1"})", kAdmin), 409, "sb-1");
  ExpectError(Run(R"({"argv":["echo"],"workspace":"ws-1"})"), 409, "sb-1");
  ExpectError(Do("/v1/workspaces/ws-1", "", kAdmin, http::methods::DEL), 409, "sb-1");
  ExpectError(Do("/v1/sandboxes/sb-1/fork", "{}", kAdmin), 409, "cannot be forked");
  ASSERT_EQ(Do("/v1/sandboxes/sb-1", "", kAdmin, http::methods::DEL).code, 200);
  auto run = Run(R"({"argv":["echo","x"],"workspace":"ws-1"})");
  EXPECT_EQ(run.code, 200) << run.body;
  EXPECT_EQ(Do("/v1/workspaces/ws-1/files?path=/d/a.txt", "", tok, http::methods::GET).body, "hello");
  EXPECT_EQ(Do("/v1/workspaces", "", kAdmin, http::methods::GET).j["items"].size(), 1u);
  EXPECT_EQ(Do("/v1/workspaces/ws-1", "", kAdmin, http::methods::DEL).code, 200);
  ExpectError(Do("/v1/workspaces/ws-1", "", kAdmin, http::methods::GET), 404);
}

}  // namespace
}  // namespace kubicle::noderuntime::server
