#include "noderuntime/daemon/serve_flags.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "noderuntime/daemon/admin_token.h"

namespace kubicle::noderuntime::daemon {
namespace {

TEST(ServeFlags, ParsesEveryFlag) {
  auto f = ParseServeFlags({"--state-dir", "/s", "--vmm", "/v", "--listen", "0.0.0.0:8080",
                            "--capacity-mem", "20G", "--capacity-vcpus", "16", "--pool-size",
                            "3", "--log-json", "--no-cgroups", "--token-file", "/t",
                            "--stop-vms-on-exit"});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->listen_host, "0.0.0.0");
  EXPECT_EQ(f->listen_port, 8080);
  EXPECT_EQ(f->capacity_mem_mib, 20u * 1024);
  EXPECT_EQ(f->capacity_vcpus, 16u);
  EXPECT_EQ(f->pool_size, 3u);
  EXPECT_TRUE(f->log_json);
  EXPECT_FALSE(f->use_cgroups);
  EXPECT_TRUE(f->stop_vms_on_exit);
  EXPECT_EQ(f->token_file, "/t");
  auto d = ParseServeFlags({"--state-dir", "/s", "--vmm", "/v"});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->token_file, "/s/admin-token");
  EXPECT_EQ(d->listen_port, 7070);
}

TEST(ServeFlags, RejectsBadInput) {
  for (std::vector<std::string> bad : std::vector<std::vector<std::string>>{
           {"--vmm", "/v"},
           {"--state-dir", "/s"},
           {"--state-dir", "/s", "--vmm", "/v", "--bogus"},
           {"--state-dir", "/s", "--vmm", "/v", "--pool-size"},
           {"--state-dir", "/s", "--vmm", "/v", "--pool-size", "-1"},
           {"--state-dir", "/s", "--vmm", "/v", "--listen", "nocolon"},
           {"--state-dir", "/s", "--vmm", "/v", "--listen", "h:70000"},
           {"--state-dir", "/s", "--vmm", "/v", "--capacity-mem", "12Q"},
           {"--state-dir", "/s", "--vmm", "/v", "--log-level", "loud"}}) {
    EXPECT_FALSE(ParseServeFlags(bad).ok()) << bad.back();
  }
  EXPECT_TRUE(ParseServeFlags({"--help"})->help);
}

TEST(ServeFlags, MemorySizes) {
  EXPECT_EQ(*ParseMemMib("512"), 512u);
  EXPECT_EQ(*ParseMemMib("512M"), 512u);
  EXPECT_EQ(*ParseMemMib("2Gi"), 2048u);
  EXPECT_EQ(*ParseMemMib("1t"), 1024u * 1024);
  EXPECT_EQ(*ParseMemMib("2048K"), 2u);
  EXPECT_FALSE(ParseMemMib("").ok());
  EXPECT_FALSE(ParseMemMib("G").ok());
  EXPECT_FALSE(ParseMemMib("1K").ok());
  EXPECT_FALSE(ParseMemMib("-5G").ok());
}

TEST(AdminToken, CreatedOnceWithMode0600) {
  char dir[] = "/tmp/kubicle-token-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string path = std::string(dir) + "/token";
  auto t1 = LoadOrCreateAdminToken(path);
  ASSERT_TRUE(t1.ok()) << t1.status().ToString();
  EXPECT_EQ(t1->size(), 64u);
  struct stat sb{};
  ASSERT_EQ(stat(path.c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0600u);
  auto t2 = LoadOrCreateAdminToken(path);
  ASSERT_TRUE(t2.ok());
  EXPECT_EQ(*t1, *t2);
  chmod(path.c_str(), 0644);
  EXPECT_FALSE(LoadOrCreateAdminToken(path).ok()) << "a world-readable token is refused";
  chmod(path.c_str(), 0600);
  std::ofstream(path) << "  \n";
  EXPECT_FALSE(LoadOrCreateAdminToken(path).ok());
  std::ofstream(path) << " mine \n";
  EXPECT_EQ(*LoadOrCreateAdminToken(path), "mine");
  unlink(path.c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace kubicle::noderuntime::daemon
