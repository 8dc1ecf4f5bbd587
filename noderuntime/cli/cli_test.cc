// kubicle-nodectl's pieces against the API server over FakeSandboxService.
#include <gtest/gtest.h>

#include <atomic>
#include <future>

#include "noderuntime/server/api_server.h"
#include "noderuntime/server/testing/fake_sandbox_service.h"
#include "noderuntime/cli/args.h"
#include "noderuntime/cli/commands.h"
#include "noderuntime/client/node_client.h"

namespace kubicle::noderuntime::cli {
namespace {

TEST(Args, FlagsPositionalsAndRest) {
  auto a = ParseArgs({"x", "-l", "a=b", "--label=c=d", "--wait", "y", "--", "echo", "-n"},
                     {"-l", "--label"}, {"--wait"});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->positional, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(a->All("-l"), (std::vector<std::string>{"a=b"}));
  EXPECT_EQ(a->Get("--label"), "c=d");
  EXPECT_TRUE(a->Has("--wait"));
  EXPECT_EQ(a->rest, (std::vector<std::string>{"echo", "-n"}));
  EXPECT_FALSE(ParseArgs({"--nope"}, {}, {}).ok());
  EXPECT_FALSE(ParseArgs({"-l"}, {"-l"}, {}).ok());
  auto n = ParseArgs({"--count", "x"}, {"--count"}, {});
  EXPECT_FALSE(n->Int("--count", 1, 1, 10).ok());
  EXPECT_EQ(*n->Int("--other", 7, 1, 10), 7);
}

TEST(Args, GlobalFlagsInBothForms) {
  auto g = ParseGlobalFlags({"--server", "http://n:7070", "--token-file=/t", "ls", "--server=x"});
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->server, "http://n:7070");
  EXPECT_EQ(g->token_file, "/t");
  EXPECT_EQ(g->command, 3u) << "the command's own flags are its own";
  g = ParseGlobalFlags({"--server=http://a=b", "--token-file", "/t2", "get", "x"});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->server, "http://a=b");
  EXPECT_EQ(g->token_file, "/t2");
  EXPECT_EQ(g->command, 3u);
  EXPECT_TRUE(ParseGlobalFlags({"--help"})->help);
  EXPECT_EQ(ParseGlobalFlags({})->command, 0u);
  EXPECT_EQ(ParseGlobalFlags({"--server"}).status().message(), "--server needs a value");
  EXPECT_EQ(ParseGlobalFlags({"--token-file="}).status().message(), "--token-file needs a value");
  g = ParseGlobalFlags({"--ca-file=/ca.pem", "--server", "https://n:7443", "ls"});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->ca_file, "/ca.pem");
  EXPECT_EQ(g->command, 3u);
}

TEST(Labels, ParseLabelArgs) {
  auto l = ParseLabelArgs({"a=b,c=d", "e="});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ((*l)["a"], "b");
  EXPECT_EQ((*l)["c"], "d");
  EXPECT_EQ((*l)["e"], "");
  EXPECT_FALSE(ParseLabelArgs({"novalue"}).ok());
  EXPECT_EQ(QueryEscape("kubicle.dev/run=r 1", kQueryKeep), "kubicle.dev/run%3Dr%201");
}

TEST(Table, AlignsColumns) {
  EXPECT_EQ(FormatTable({{"ID", "STATE"}, {"longer-id", "Running"}}),
            "ID         STATE\nlonger-id  Running\n");
}

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<server::ApiServer>(&fake_, &registry_,
                                               server::ApiServerOptions{.admin_token = "adm"});
    Status st = Status::Unavailable("");
    for (int i = 0; i < 5 && !st.ok(); ++i) {
      port_ = *server::PickFreePort();
      st = server_->Start("127.0.0.1", port_);
    }
    ASSERT_TRUE(st.ok());
    auto c = NodeClient::Create("http://127.0.0.1:" + std::to_string(port_), "adm");
    ASSERT_TRUE(c.ok());
    client_ = std::move(*c);
    ASSERT_TRUE(client_->Call("PUT", "/v1/templates/tg", {{"kernel", "/k"}}).ok());
  }
  server::testing::FakeSandboxService fake_;
  metrics::Registry registry_;
  std::unique_ptr<server::ApiServer> server_;
  std::unique_ptr<NodeClient> client_;
  int port_ = 0;
};

TEST_F(ClientTest, ErrorsCarryHttpCodeAndMessage) {
  auto r = client_->Call("GET", "/v1/sandboxes/nope");
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("HTTP 404"), std::string::npos);
  auto bad = NodeClient::Create("http://127.0.0.1:" + std::to_string(port_), "wrong");
  EXPECT_EQ((*bad)->Call("GET", "/v1/sandboxes").status().code(), StatusCode::kPermissionDenied);
  server_->Stop();
  EXPECT_EQ(client_->Call("GET", "/v1/sandboxes").status().code(), StatusCode::kUnavailable);
}

TEST_F(ClientTest, FilesAndStreamedExec) {
  auto s = client_->Call("POST", "/v1/sandboxes", {{"template", "tg"}, {"id", "s"}});
  ASSERT_TRUE(s.ok());
  std::string data("bin\0ary", 7);
  ASSERT_TRUE(client_->PutFile("s", "/a b", data, 0600).ok());
  EXPECT_EQ(fake_.file_mode("s", "/a b"), 0600u);
  EXPECT_EQ(*client_->GetFile("s", "/a b"), data);
  std::string out;
  auto exit = client_->ExecStream("s", {{"argv", {"echo", "hi"}}},
                                  [&](const std::string& stream, const std::string& d) {
                                    if (stream == "stdout") out += d;
                                  });
  ASSERT_TRUE(exit.ok()) << exit.status().ToString();
  EXPECT_EQ((*exit)["exitCode"], 0);
  EXPECT_EQ(out, "hi\n");
}

// ExecStream hands each line over as it arrives (kubicle-nodectl exec
// shows output live), and a big stream arrives whole.
TEST_F(ClientTest, ExecStreamDeliversLinesAsTheyArrive) {
  ASSERT_TRUE(client_->Call("POST", "/v1/sandboxes", {{"template", "tg"}, {"id", "s"}}).ok());
  std::promise<void> seen;
  auto seen_future = seen.get_future().share();
  std::atomic<bool> waited_out{false};
  const std::string big(100000, 'b');
  fake_.exec_hook = [&](const std::string&, const noderuntime::ExecOptions& o) {
    auto out = [&](const std::string& s) {
      o.io.on_output(guest::protocol::OutputStream::kStdout,
                     guest::protocol::ByteSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
    };
    out("first\n");
    if (seen_future.wait_for(std::chrono::seconds(20)) != std::future_status::ready) waited_out = true;
    for (int i = 0; i < 50; ++i) out(big);
    guest::client::ExecResult r;
    r.exit_code = 0;
    return Result<guest::client::ExecResult>(r);
  };
  size_t bytes = 0;
  bool first = true;
  auto exit = client_->ExecStream("s", {{"argv", {"x"}}},
                                  [&](const std::string&, const std::string& d) {
                                    if (first) seen.set_value();
                                    first = false;
                                    bytes += d.size();
                                  });
  ASSERT_TRUE(exit.ok()) << exit.status().ToString();
  EXPECT_FALSE(waited_out) << "the first line reached the callback only with the rest";
  EXPECT_EQ(bytes, 6 + 50 * big.size());
}

TEST_F(ClientTest, SwarmCreatesRunsAndSweeps) {
  ASSERT_TRUE(client_->Call("POST", "/v1/sandboxes", {{"template", "tg"}}).ok());
  // The fake's built-in exec answers `echo`; the swarm must sweep only its run.
  int rc = CmdSwarm(*client_, {"--template", "tg", "--count", "8", "--run", "r1", "--", "echo", "x"});
  EXPECT_EQ(rc, kExitOk);
  EXPECT_EQ(fake_.sandbox_count(), 1u);
  // A command that fails makes the swarm fail, and it still sweeps.
  rc = CmdSwarm(*client_, {"--template", "tg", "--count", "2", "--", "fail", "3"});
  EXPECT_EQ(rc, kExitFailed);
  EXPECT_EQ(fake_.sandbox_count(), 1u);
}

}  // namespace
}  // namespace kubicle::noderuntime::cli
