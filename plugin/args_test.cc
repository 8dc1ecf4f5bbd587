#include "plugin/args.h"

#include <gtest/gtest.h>

namespace kubicle::plugin {
namespace {

using Args = std::vector<std::string>;

TEST(PluginArgs, GlobalFlagsAnywhereInEveryForm) {
  auto inv = ParseArgs({"exec", "--kubeconfig=/k", "sbx", "-n", "team", "--context", "dev", "--",
                        "echo", "-n", "hi"});
  ASSERT_TRUE(inv.ok()) << inv.status().ToString();
  EXPECT_EQ(inv->verb, "exec");
  EXPECT_EQ(inv->global.kubeconfig, "/k");
  EXPECT_EQ(inv->global.ns, "team");
  EXPECT_EQ(inv->global.context, "dev");
  EXPECT_EQ(inv->positional, Args{"sbx"});
  // Everything after -- is the command, flags included.
  EXPECT_EQ(inv->command, (Args{"echo", "-n", "hi"}));
  EXPECT_TRUE(inv->dash_dash);
  EXPECT_EQ(ParseArgs({"-nteam", "top"})->global.ns, "team");
  EXPECT_EQ(ParseArgs({"top", "-n=team"})->global.ns, "team");
  EXPECT_EQ(ParseArgs({"top", "--namespace", "x"})->global.ns, "x");
  EXPECT_EQ(ParseArgs({"top", "--node-lease-namespace=l"})->global.node_lease_namespace, "l");
  EXPECT_EQ(ParseArgs({"top"})->global.node_lease_namespace, "kubicle-node-lease");
}

TEST(PluginArgs, VerbFlags) {
  auto exec = ParseArgs({"exec", "s", "-i", "--timeout", "5s", "-e", "A=1", "--env=B=2", "--", "x"});
  ASSERT_TRUE(exec.ok()) << exec.status().ToString();
  EXPECT_TRUE(exec->Bool("stdin"));
  EXPECT_EQ(exec->Get("timeout"), "5s");
  EXPECT_EQ(exec->All("env"), (Args{"A=1", "B=2"}));
  auto it = ParseArgs({"exec", "s", "-it", "--", "x"});
  ASSERT_TRUE(it.ok()) << it.status().ToString();
  EXPECT_TRUE(it->Bool("stdin"));
  EXPECT_TRUE(it->Bool("tty"));
  auto fork = ParseArgs({"fork", "src", "--replicas=3", "--wait", "-l", "a=b"});
  ASSERT_TRUE(fork.ok());
  EXPECT_EQ(fork->Get("replicas"), "3");
  EXPECT_TRUE(fork->Bool("wait"));
  EXPECT_FALSE(ParseArgs({"fork", "src", "--replicas=3", "--wait=false"})->Bool("wait"));
  EXPECT_EQ(fork->All("labels"), Args{"a=b"});
  EXPECT_TRUE(ParseArgs({"logs", "s", "-f"})->Bool("follow"));
  EXPECT_EQ(ParseArgs({"wait", "s", "--for=ready"})->Get("for"), "ready");
  EXPECT_EQ(ParseArgs({"sweep", "--run", "r1"})->Get("run"), "r1");
  EXPECT_EQ(ParseArgs({"top", "-l", "kubicle.dev/run=r1"})->Get("selector"), "kubicle.dev/run=r1");
  // "-" is an operand (stdin/stdout for cp), not a flag.
  EXPECT_EQ(ParseArgs({"cp", "-", "s:/x"})->positional, (Args{"-", "s:/x"}));
}

TEST(PluginArgs, RefusalsNameWhatIsWrong) {
  struct Case {
    Args args;
    std::string needle;
  };
  for (const Case& c : std::vector<Case>{
           {{}, "no command"},
           {{"frobnicate"}, "unknown command \"frobnicate\""},
           {{"exec", "s", "--bogus"}, "unknown flag --bogus for \"exec\""},
           {{"--replicas=3", "fork", "s"}, "unknown flag --replicas=3"},
           {{"logs", "s", "--wait"}, "unknown flag --wait for \"logs\""},
           {{"exec", "s", "--timeout"}, "--timeout needs a value"},
           {{"exec", "s", "--timeout", "--", "x"}, "--timeout needs a value"},
           {{"fork", "s", "--wait=maybe"}, "=true or =false"},
           {{"exec", "s", "-ix", "--", "x"}, "-x is not a boolean flag"},
       }) {
    auto r = ParseArgs(c.args);
    ASSERT_FALSE(r.ok()) << ::testing::PrintToString(c.args);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos) << r.status().message();
  }
}

TEST(PluginArgs, HelpForThePluginAndEachVerb) {
  auto top = ParseArgs({"--help"});
  ASSERT_TRUE(top.ok());
  EXPECT_TRUE(top->help);
  EXPECT_EQ(top->verb, "");
  auto verb = ParseArgs({"fork", "-h"});
  ASSERT_TRUE(verb.ok());
  EXPECT_TRUE(verb->help);
  EXPECT_EQ(verb->verb, "fork");
  EXPECT_EQ(ParseArgs({"help", "logs"})->verb, "logs");
  for (const std::string& v : Verbs()) {
    std::string u = Usage(v);
    EXPECT_NE(u.find("Usage: kubectl kubicle " + v), std::string::npos) << v;
    EXPECT_NE(u.find("--kubeconfig"), std::string::npos) << v;
    EXPECT_NE(Usage().find("  " + v + " "), std::string::npos) << v;
  }
}

TEST(PluginArgs, Durations) {
  EXPECT_EQ(ParseDuration("30s")->count(), 30000);
  EXPECT_EQ(ParseDuration("45")->count(), 45000);
  EXPECT_EQ(ParseDuration("2m")->count(), 120000);
  EXPECT_EQ(ParseDuration("1h")->count(), 3600000);
  EXPECT_EQ(ParseDuration("250ms")->count(), 250);
  for (const char* bad : {"", "s", "0s", "-1s", "1.5s", "3d", "25h", "9999999999s"}) {
    EXPECT_FALSE(ParseDuration(bad).ok()) << bad;
  }
}

TEST(PluginArgs, CpOperands) {
  auto r = ParseCpOperand("sbx-1:/work/a.txt");
  EXPECT_EQ(r.sandbox, "sbx-1");
  EXPECT_EQ(r.path, "/work/a.txt");
  for (const char* local : {"./a:b", "/tmp/a:b", "a.txt", "-", ":x", "../x:y", ".:y"}) {
    EXPECT_EQ(ParseCpOperand(local).sandbox, "") << local;
    EXPECT_EQ(ParseCpOperand(local).path, local) << local;
  }
  EXPECT_FALSE(r.workspace);
  for (const char* ws : {"ws/data:/notes/a.txt", "workspace/data:/notes/a.txt"}) {
    auto w = ParseCpOperand(ws);
    EXPECT_TRUE(w.workspace) << ws;
    EXPECT_EQ(w.sandbox, "data") << ws;
    EXPECT_EQ(w.path, "/notes/a.txt") << ws;
  }
  for (const char* local : {"ws/a/b:/x", "ws/:/x", "workspace/:y", "./ws/a:b"}) {
    EXPECT_EQ(ParseCpOperand(local).sandbox, "") << local;
    EXPECT_FALSE(ParseCpOperand(local).workspace) << local;
  }
}

}  // namespace
}  // namespace kubicle::plugin
