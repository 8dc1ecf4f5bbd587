#include "noderuntime/server/serving_cert.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "noderuntime/node_util.h"

namespace kubicle::noderuntime::server {
namespace {

using namespace std::chrono_literals;

class ServingCertTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kn-tls-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { (void)RemoveTree(dir_); }
  static unsigned Mode(const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 ? st.st_mode & 07777 : 0;
  }
  std::string dir_;
};

TEST_F(ServingCertTest, CaSignsAServingCertForNamesAndAddresses) {
  auto ca = MakeCa("test CA", 24h);
  ASSERT_TRUE(ca.ok()) << ca.status().ToString();
  EXPECT_TRUE(InspectCert(ca->cert_pem)->is_ca);
  auto leaf = MakeServingCert(*ca, {"node-1.example", "10.0.0.7", "::1"}, 48h);
  ASSERT_TRUE(leaf.ok()) << leaf.status().ToString();
  auto info = InspectCert(leaf->cert_pem);
  ASSERT_TRUE(info.ok());
  EXPECT_FALSE(info->is_ca);
  EXPECT_EQ(info->hosts, (std::vector<std::string>{"node-1.example", "10.0.0.7", "::1"}));
  EXPECT_GT(info->not_after, WallClock::now() + 47h);
  EXPECT_LT(info->not_after, WallClock::now() + 49h);
  EXPECT_FALSE(MakeServingCert(*ca, {}, 1h).ok());
  EXPECT_FALSE(MakeServingCert(*ca, {"a,IP:1.2.3.4"}, 1h).ok()) << "no SAN injection";
  EXPECT_FALSE(InspectCert("not a certificate").ok());
}

TEST_F(ServingCertTest, NodeTlsIsMadeOnceAndRenewedOnlyWhenNeeded) {
  const std::string tls = dir_ + "/tls";
  auto a = EnsureNodeTls(tls, {"127.0.0.1", "localhost"}, "n1");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(Mode(tls), 0700u);
  EXPECT_EQ(Mode(tls + "/ca.key"), 0600u);
  EXPECT_EQ(Mode(tls + "/tls.key"), 0600u);
  EXPECT_NE(a->cert_chain_pem.find(a->ca_pem), std::string::npos) << "the chain ends in the CA";
  // Same hosts: reused as is.
  auto b = EnsureNodeTls(tls, {"localhost", "127.0.0.1"}, "n1");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->cert_chain_pem, a->cert_chain_pem);
  // A new address: a new serving certificate from the same CA.
  auto c = EnsureNodeTls(tls, {"127.0.0.1", "10.1.2.3"}, "n1");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->ca_pem, a->ca_pem);
  EXPECT_NE(c->key_pem, a->key_pem);
  auto hosts = InspectCert(c->cert_chain_pem)->hosts;
  EXPECT_NE(std::find(hosts.begin(), hosts.end(), "10.1.2.3"), hosts.end());
  // Near its expiry: renewed, the CA kept.
  auto d = EnsureNodeTls(tls, {"127.0.0.1", "10.1.2.3"}, "n1", WallClock::now() + 24h * 340);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->ca_pem, a->ca_pem);
  EXPECT_NE(d->key_pem, c->key_pem);
  // A broken CA is never silently replaced (clients trust it).
  ASSERT_TRUE(AtomicWriteFile(tls + "/ca.key", MakeCa("other", 1h)->key_pem).ok());
  auto e = EnsureNodeTls(tls, {"127.0.0.1"}, "n1");
  EXPECT_EQ(e.status().code(), StatusCode::kFailedPrecondition) << e.status().ToString();
}

TEST_F(ServingCertTest, LongNodeAndHostNamesFitTheCommonName) {
  // A node name may have 253 characters, the CN only 64: the e2e tier's
  // node names (test names) found it.
  const std::string node(253, 'n');
  const std::string host = std::string(60, 'h') + ".example";
  auto tls = EnsureNodeTls(dir_ + "/tls", {host, "127.0.0.1"}, node);
  ASSERT_TRUE(tls.ok()) << tls.status().ToString();
  auto leaf = MakeServingCert(*MakeCa("kubicle-node " + node + " serving CA", 24h), {host}, 24h);
  ASSERT_TRUE(leaf.ok()) << leaf.status().ToString();
  EXPECT_EQ(InspectCert(leaf->cert_pem)->hosts, std::vector<std::string>{host});
}

TEST_F(ServingCertTest, GivenFilesMustMatch) {
  auto ca = MakeCa("given CA", 24h);
  auto leaf = MakeServingCert(*ca, {"127.0.0.1"}, 24h);
  ASSERT_TRUE(AtomicWriteFile(dir_ + "/chain.pem", leaf->cert_pem + ca->cert_pem).ok());
  ASSERT_TRUE(AtomicWriteFile(dir_ + "/key.pem", leaf->key_pem).ok());
  ASSERT_TRUE(AtomicWriteFile(dir_ + "/wrong.pem", ca->key_pem).ok());
  auto t = LoadTlsFiles(dir_ + "/chain.pem", dir_ + "/key.pem");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->ca_pem, ca->cert_pem);
  EXPECT_FALSE(LoadTlsFiles(dir_ + "/chain.pem", dir_ + "/wrong.pem").ok());
  EXPECT_FALSE(LoadTlsFiles(dir_ + "/key.pem", dir_ + "/key.pem").ok());
  EXPECT_EQ(SplitPemCerts(leaf->cert_pem + ca->cert_pem)->size(), 2u);
}

}  // namespace
}  // namespace kubicle::noderuntime::server
