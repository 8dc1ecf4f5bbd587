#include "operator/flags.h"

#include <gtest/gtest.h>

namespace kubicle::op {
namespace {

Result<OperatorFlags> Parse(std::vector<std::string> args) { return ParseOperatorFlags(args); }

std::string Error(std::vector<std::string> args) {
  auto f = ParseOperatorFlags(args);
  EXPECT_FALSE(f.ok()) << "accepted";
  return f.ok() ? "" : f.status().message();
}

TEST(OperatorFlagsTest, DefaultsWithoutArguments) {
  auto f = Parse({});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->values, DefaultOperatorFlags().values);
  EXPECT_EQ(f->Get("leader-elect"), "true");
  EXPECT_EQ(f->Int("workers"), 4);
  EXPECT_FALSE(f->check || f->help);
}

TEST(OperatorFlagsTest, BothFormsOfEveryValueFlag) {
  auto eq = Parse({"--kubeconfig=/k/config", "--context=kind", "--workers=8",
                   "--metrics-address=127.0.0.1", "--leader-elect=false", "--identity="});
  auto spaced = Parse({"--kubeconfig", "/k/config", "--context", "kind", "--workers", "8",
                       "--metrics-address", "127.0.0.1", "--leader-elect", "false",
                       "--identity", ""});
  ASSERT_TRUE(eq.ok()) << eq.status().ToString();
  ASSERT_TRUE(spaced.ok()) << spaced.status().ToString();
  EXPECT_EQ(eq->values, spaced->values);
  EXPECT_EQ(spaced->Get("kubeconfig"), "/k/config");
  EXPECT_EQ(spaced->Get("context"), "kind");
  EXPECT_EQ(spaced->Int("workers"), 8);
  EXPECT_EQ(spaced->Get("leader-elect"), "false");
  // Every flag the usage lists takes both forms.
  for (const auto& [name, def] : DefaultOperatorFlags().values) {
    const std::string v = name == "leader-elect" ? "false" : def.empty() ? "x" : def;
    auto a = Parse({"--" + name + "=" + v});
    auto b = Parse({"--" + name, v});
    ASSERT_TRUE(a.ok()) << name << ": " << a.status().ToString();
    ASSERT_TRUE(b.ok()) << name << ": " << b.status().ToString();
    EXPECT_EQ(a->Get(name), v);
    EXPECT_EQ(b->Get(name), v);
  }
  // The value keeps everything after the first '='.
  EXPECT_EQ(Parse({"--identity=a=b"})->Get("identity"), "a=b");
}

TEST(OperatorFlagsTest, LeaderElectAloneMeansTrue) {
  EXPECT_EQ(Parse({"--leader-elect=false", "--leader-elect"})->Get("leader-elect"), "true");
  auto f = Parse({"--leader-elect", "--workers", "2"});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->Get("leader-elect"), "true");
  EXPECT_EQ(f->Int("workers"), 2);
}

TEST(OperatorFlagsTest, CheckFlagsAndHelp) {
  auto f = Parse({"--check-flags", "--workers=2"});
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->check);
  EXPECT_TRUE(Parse({"--help"})->help);
  EXPECT_TRUE(Parse({"-h", "--workers=0"})->help) << "help answers even a bad command line";
  EXPECT_NE(OperatorUsage().find("--kubeconfig="), std::string::npos);
  EXPECT_NE(OperatorUsage().find("--flag value"), std::string::npos);
}

TEST(OperatorFlagsTest, ErrorsNameTheFlag) {
  EXPECT_EQ(Error({"--nope=1"}), "unknown flag --nope");
  EXPECT_EQ(Error({"--nope", "1"}), "unknown flag --nope");
  EXPECT_EQ(Error({"--kubeconfig"}), "--kubeconfig needs a value");
  EXPECT_EQ(Error({"--kubeconfig", "--context=x"}), "--kubeconfig needs a value");
  EXPECT_NE(Error({"kubeconfig"}).find("unexpected argument \"kubeconfig\""), std::string::npos);
  EXPECT_NE(Error({"--"}).find("unexpected argument"), std::string::npos);
  EXPECT_NE(Error({"--check-flags=yes"}).find("unknown flag --check-flags"), std::string::npos);
  EXPECT_EQ(Error({"--workers", "0"}), "--workers: \"0\" is not a number in [1, 1024]");
  EXPECT_EQ(Error({"--workers=4x"}), "--workers: \"4x\" is not a number in [1, 1024]");
  EXPECT_EQ(Error({"--metrics-port="}), "--metrics-port: \"\" is not a number in [0, 65535]");
  EXPECT_EQ(Error({"--log-format", "yaml"}), "--log-format: \"yaml\" is not one of text, json");
  EXPECT_EQ(Error({"--leader-elect=maybe"}),
            "--leader-elect: \"maybe\" is not one of true, false");
  EXPECT_EQ(Error({"--node-lease-namespace="}), "--node-lease-namespace needs a value");
  EXPECT_NE(Error({"--lease-duration-seconds", "10"}).find("leader election needs"),
            std::string::npos);
  EXPECT_TRUE(Parse({"--leader-elect=false", "--lease-duration-seconds", "10"}).ok())
      << "the timing rule is for leader election only";
}

}  // namespace
}  // namespace kubicle::op
