#include "noderuntime/oci/registry_auth.h"

#include <gtest/gtest.h>

#include "common/base64.h"

namespace kubicle::noderuntime::oci {
namespace {

TEST(ParseChallengeTest, BearerWithQuotedParameters) {
  Result<Challenge> c = ParseChallenge(
      R"(Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push")");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->scheme, Challenge::Scheme::kBearer);
  EXPECT_EQ(c->realm, "https://auth.example/token");
  EXPECT_EQ(c->service, "registry.example");
  EXPECT_EQ(c->scope, "repository:a/b:pull,push");  // a comma inside quotes
}

TEST(ParseChallengeTest, BasicAndBareTokens) {
  Result<Challenge> c = ParseChallenge(R"(basic realm="Registry Realm")");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->scheme, Challenge::Scheme::kBasic);
  EXPECT_EQ(c->realm, "Registry Realm");
  c = ParseChallenge("Bearer realm=https://a/t, service=s");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->realm, "https://a/t");
  EXPECT_EQ(c->service, "s");
}

TEST(ParseChallengeTest, RefusesMalformed) {
  for (const char* h : {"", "Negotiate abc", "Bearer service=x", "Bearer realm=\"https://a",
                        "Bearer realm", "Bearer realm=a service=b", "Bearer =x"}) {
    EXPECT_FALSE(ParseChallenge(h).ok()) << h;
  }
}

TEST(ParseDockerConfigTest, AuthAndUsernamePasswordByHost) {
  std::string json = R"({"auths":{
      "https://reg.example:5000/v1/":{"auth":")" +
                     Base64Encode(std::string("alice:pa:ss")) + R"("},
      "other.example":{"username":"bob","password":"pw"},
      "helper.example":{}},
    "credHelpers":{"x":"y"}})";
  Result<CredentialMap> m = ParseDockerConfig(json);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), 2u);
  EXPECT_EQ(m->at("reg.example:5000"), (Credentials{"alice", "pa:ss"}));
  EXPECT_EQ(m->at("other.example"), (Credentials{"bob", "pw"}));
}

TEST(ParseDockerConfigTest, RefusesMalformed) {
  for (std::string j :
       {std::string("nope"), std::string(R"({"auths":[]})"),
        std::string(R"({"auths":{"a":{"auth":"!!!"}}})"),
        R"({"auths":{"a":{"auth":")" + Base64Encode(std::string("nocolon")) + R"("}}})"}) {
    EXPECT_FALSE(ParseDockerConfig(j).ok()) << j;
  }
  EXPECT_TRUE(ParseDockerConfig("{}").ok());
}

TEST(BasicAuthorizationTest, Base64OfUserColonPassword) {
  EXPECT_EQ(BasicAuthorization({"Aladdin", "open sesame"}), "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==");
}

}  // namespace
}  // namespace kubicle::noderuntime::oci
