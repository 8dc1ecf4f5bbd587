// The image's defaults (/.kubicle/image.json): parsed as functions
// (ParseImageDefaults, ResolveUser on test passwd/group files), and applied
// by a running agent started with --image-config: Env merged under the
// request's env, WorkingDir as the default cwd, User for every exec; a
// malformed or oversized file is ignored and the agent still serves.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "guest/agent/agent_test_env.h"
#include "guest/agent/image_defaults.h"

namespace kubicle::guest::agent::testing {
namespace {

using protocol::ExecStartRequest;

TEST(ImageDefaultsTest, ParsesTheOciConfigSubsetAndSkipsTheRest) {
  auto d = ParseImageDefaults(R"({"Cmd":["python3"],"Entrypoint":null,
      "Env":["PATH=/usr/local/bin:/usr/bin","LANG=C.UTF-8","Q=a\"b\u00e9\ud83d\ude00"],
      "Labels":{"x":[1,2.5e3,{"y":true}]},"WorkingDir":"/srv","User":"app:staff"})");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->env, (std::vector<std::string>{"PATH=/usr/local/bin:/usr/bin", "LANG=C.UTF-8",
                                              "Q=a\"b\xc3\xa9\xf0\x9f\x98\x80"}));
  EXPECT_EQ(d->working_dir, "/srv");
  EXPECT_EQ(d->user, "app:staff");
  auto empty = ParseImageDefaults(R"({"Env":null,"WorkingDir":null,"User":""})");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->env.empty());
}

TEST(ImageDefaultsTest, MalformedFilesAreErrors) {
  for (
      const char* bad :
      {"", "[]", "{", R"({"Env":"A=1"})", R"({"Env":["NOEQUALS"]})", R"({"Env":["=x"]})",
       R"({"WorkingDir":"relative"})", R"({"User":5})", R"({"Env":["A=1"]} trailing)",
       R"({"User":"\ud800"})", R"({"User":"a)", "{\"User\":\"tab\there\"}",
       R"({"X":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]})"}) {
    EXPECT_FALSE(ParseImageDefaults(bad).ok()) << bad;
  }
  EXPECT_EQ(ParseImageDefaults(std::string(2 << 20, ' ')).status().code(),
            StatusCode::kResourceExhausted);
}

class ResolveUserTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/resolve_user_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::ofstream(dir_ + "/passwd") << "root:x:0:0:root:/root:/bin/sh\n# comment\n"
                                       "app:x:1000:1000:App:/home/app:/bin/sh\nbroken:x:zz:1::/:\n";
    std::ofstream(dir_ + "/group")
        << "root:x:0:\napp:x:1000:\nstaff:x:50:app,other\ndocker:x:999:other,app\n";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  Result<Credentials> Resolve(const std::string& u) {
    return ResolveUser(u, dir_ + "/passwd", dir_ + "/group");
  }
  std::string dir_;
};

TEST_F(ResolveUserTest, NamesNumbersAndGroups) {
  auto app = Resolve("app");
  ASSERT_TRUE(app.ok()) << app.status().ToString();
  EXPECT_EQ(app->uid, 1000u);
  EXPECT_EQ(app->gid, 1000u);
  EXPECT_EQ(app->home, "/home/app");
  EXPECT_EQ(app->groups, (std::vector<gid_t>{50, 999}));
  auto with_group = Resolve("app:staff");
  ASSERT_TRUE(with_group.ok());
  EXPECT_EQ(with_group->gid, 50u);
  auto numeric = Resolve("1000");  // has an entry: its gid and home
  ASSERT_TRUE(numeric.ok());
  EXPECT_EQ(numeric->gid, 1000u);
  EXPECT_EQ(numeric->home, "/home/app");
  auto stranger = Resolve("4242:4343");  // no entry needed
  ASSERT_TRUE(stranger.ok());
  EXPECT_EQ(stranger->uid, 4242u);
  EXPECT_EQ(stranger->gid, 4343u);
  EXPECT_TRUE(stranger->groups.empty());
  EXPECT_TRUE(stranger->home.empty());
  auto lone_uid = Resolve("4242");
  ASSERT_TRUE(lone_uid.ok());
  EXPECT_EQ(lone_uid->gid, 0u);
  EXPECT_EQ(Resolve("nobody-here").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Resolve("app:nogroup").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Resolve("broken").status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(Resolve(":50").ok());
  EXPECT_FALSE(Resolve("4294967295").ok()) << "(uid_t)-1 would mean 'unchanged'";
}

// An agent started on an image.json written before it starts.
class ImageAgentTest : public ::testing::Test {
 protected:
  void Start(const std::string& json) {
    char tmpl[] = "/tmp/image_agent_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    conf_dir_ = tmpl;
    std::ofstream(conf_dir_ + "/image.json") << json;
    auto a = AgentProcess::Start({"--image-config", conf_dir_ + "/image.json"});
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    agent_ = std::move(*a);
    auto c = agent_->Connect();
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client_ = std::move(*c);
  }
  void TearDown() override {
    client_.reset();
    agent_.reset();
    if (!conf_dir_.empty()) std::filesystem::remove_all(conf_dir_);
  }
  client::ExecResult Run(const std::string& cmd, std::vector<std::string> env = {},
                         std::string cwd = "") {
    ExecStartRequest req;
    req.shell_command = cmd;
    req.env = std::move(env);
    req.cwd = std::move(cwd);
    auto r = client_->Exec(req);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *std::move(r) : client::ExecResult{};
  }
  std::string conf_dir_;
  std::unique_ptr<AgentProcess> agent_;
  std::unique_ptr<client::AgentClient> client_;
};

TEST_F(ImageAgentTest, EnvAndWorkingDirAreDefaults) {
  Start(R"({"Env":["FROM_IMAGE=1","SHARED=image","PATH=/usr/bin:/bin"],"WorkingDir":"/tmp"})");
  auto r = Run("echo \"$FROM_IMAGE $SHARED\"; pwd", {"SHARED=request"});
  EXPECT_EQ(ToString(r.stdout_data), "1 request\n/tmp\n");
  // The request's cwd wins.
  r = Run("pwd", {}, "/");
  EXPECT_EQ(ToString(r.stdout_data), "/\n");
  // as_agent: none of the image's defaults.
  ExecStartRequest req;
  req.shell_command = "echo \"[$FROM_IMAGE]\"; [ \"$(pwd)\" = /tmp ] && echo tmp || echo not-tmp";
  req.as_agent = true;
  auto own = client_->Exec(req);
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  EXPECT_EQ(ToString(own->stdout_data), "[]\nnot-tmp\n");
}

TEST_F(ImageAgentTest, UserAppliesToEveryExec) {
  if (::geteuid() != 0) GTEST_SKIP() << "changing uid needs root";
  Start(R"({"User":"65534:65534"})");
  auto r = Run("id -u; id -g; id -G");
  EXPECT_EQ(ToString(r.stdout_data), "65534\n65534\n65534\n");
  // The node's own commands (as_agent) run as the agent.
  ExecStartRequest req;
  req.shell_command = "id -u";
  req.as_agent = true;
  auto own = client_->Exec(req);
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  EXPECT_EQ(ToString(own->stdout_data), "0\n");
}

TEST_F(ImageAgentTest, AnUnknownUserFailsTheExecNamingIt) {
  Start(R"({"User":"no-such-user-here"})");
  ExecStartRequest req;
  req.argv = {"/bin/true"};
  auto r = client_->Exec(req);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
  EXPECT_NE(r.status().message().find("no-such-user-here"), std::string::npos);
}

TEST_F(ImageAgentTest, AMalformedFileIsIgnored) {
  Start(R"({"Env":["BROKEN"],"WorkingDir":"/tmp")");
  auto r = Run("echo \"[$BROKEN]\"; [ \"$(pwd)\" = /tmp ] && echo tmp || echo not-tmp");
  EXPECT_EQ(ToString(r.stdout_data), "[]\nnot-tmp\n");
  EXPECT_TRUE(agent_->alive());
}

}  // namespace
}  // namespace kubicle::guest::agent::testing
