#include "noderuntime/oci/manifest.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kubicle::noderuntime::oci {
namespace {

using ::testing::HasSubstr;

std::string D(char c) { return "sha256:" + std::string(64, c); }

std::string Desc(const std::string& type, char c, uint64_t size, const std::string& platform = "") {
  std::string s =
      R"({"mediaType":")" + type + R"(","digest":")" + D(c) + R"(","size":)" + std::to_string(size);
  if (!platform.empty()) s += R"(,"platform":)" + platform;
  return s + "}";
}

const std::string kLayer = "application/vnd.oci.image.layer.v1.tar+gzip";

TEST(ParseManifestTest, OciManifestGivesConfigAndLayersInOrder) {
  std::string body = R"({"schemaVersion":2,"mediaType":")" + std::string(kOciManifest) +
                     R"(","config":)" + Desc("application/vnd.oci.image.config.v1+json", 'c', 10) +
                     R"(,"layers":[)" + Desc(kLayer, '1', 100) + "," +
                     Desc("application/vnd.docker.image.rootfs.diff.tar.gzip", '2', 200) + "]}";
  Result<ParsedManifest> m = ParseManifest(body, kOciManifest);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_FALSE(m->is_index);
  EXPECT_EQ(m->config.digest, D('c'));
  ASSERT_EQ(m->layers.size(), 2u);
  EXPECT_EQ(m->layers[0].digest, D('1'));
  EXPECT_EQ(m->layers[1].size, 200u);
}

TEST(ParseManifestTest, IndexAndPlatformChoice) {
  std::string body =
      R"({"mediaType":")" + std::string(kDockerList) + R"(","manifests":[)" +
      Desc(std::string(kDockerManifest), 'a', 5, R"({"os":"linux","architecture":"arm64"})") + "," +
      Desc(std::string(kDockerManifest), 'b', 5, R"({"os":"linux","architecture":"amd64"})") + "]}";
  Result<ParsedManifest> m = ParseManifest(body, "");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_TRUE(m->is_index);
  Result<Descriptor> d = ChoosePlatform(*m);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->digest, D('b'));
  Result<Descriptor> none = ChoosePlatform(*m, "linux", "s390x");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(none.status().message(), HasSubstr("linux/arm64, linux/amd64"));
}

TEST(ParseManifestTest, ShapeDecidesWhenMediaTypeIsAbsent) {
  Result<ParsedManifest> m = ParseManifest(R"({"manifests":[]})", "application/json");
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->is_index);
}

TEST(ParseManifestTest, RefusesHostileManifests) {
  std::string many = R"({"config":)" + Desc("x", 'c', 1) + R"(,"layers":[)";
  for (size_t i = 0; i <= kMaxLayers; ++i) many += (i ? "," : "") + Desc(kLayer, '1', 1);
  many += "]}";
  const std::pair<std::string, std::string> bad[] = {
      {"not json", ""},
      {"[]", ""},
      {R"({"mediaType":"application/vnd.docker.distribution.manifest.v1+json"})", ""},  // schema 1
      {R"({"layers":[]})", ""},                                                         // no config
      {R"({"config":{"digest":"sha256:x","size":1},"layers":[]})", ""},
      {R"({"config":)" + Desc("x", 'c', 1) + R"(,"layers":[{"mediaType":")" + kLayer +
           R"(","digest":")" + D('1') + R"(","size":-1}]})",
       ""},
      {R"({"config":)" + Desc("x", 'c', 1) + R"(,"layers":[)" + Desc("text/html", '1', 1) + "]}",
       ""},
      {R"({"mediaType":")" + std::string(kOciManifest) + R"("})",
       std::string(kOciIndex)},  // disagree
      {many, ""},
  };
  for (const auto& [body, type] : bad) {
    Result<ParsedManifest> m = ParseManifest(body, type);
    EXPECT_FALSE(m.ok()) << body.substr(0, 200);
  }
}

TEST(ParseImageConfigTest, ReadsTheProcessFields) {
  Result<ImageConfig> c = ParseImageConfig(
      R"({"architecture":"amd64","config":{"Env":["PATH=/usr/bin","A=b"],"Entrypoint":["/bin/sh","-c"],)"
      R"("Cmd":null,"WorkingDir":"/app","User":"1000:1000"},"rootfs":{}})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->env, (std::vector<std::string>{"PATH=/usr/bin", "A=b"}));
  EXPECT_EQ(c->entrypoint, (std::vector<std::string>{"/bin/sh", "-c"}));
  EXPECT_TRUE(c->cmd.empty());
  EXPECT_EQ(c->working_dir, "/app");
  EXPECT_EQ(c->user, "1000:1000");
  EXPECT_FALSE(ParseImageConfig(R"({"config":{"Env":"PATH=x"}})").ok());
  EXPECT_FALSE(ParseImageConfig(R"({"config":{"User":5}})").ok());
  EXPECT_FALSE(
      ParseImageConfig(R"({"config":{"Cmd":[")" + std::string(65 << 10, 'x') + R"("]}})").ok());
}

}  // namespace
}  // namespace kubicle::noderuntime::oci
