#include "noderuntime/oci/reference.h"

#include <gtest/gtest.h>

namespace kubicle::noderuntime::oci {
namespace {

const std::string kHex(64, 'a');

struct Good {
  std::string text, registry, repository, tag, digest;
};

TEST(ParseImageReferenceTest, AcceptsTheGrammar) {
  const Good cases[] = {
      {"reg.example:5000/team/agent-python:3.12", "reg.example:5000", "team/agent-python", "3.12",
       ""},
      {"localhost/x", "localhost", "x", "latest", ""},
      {"localhost:5000/a/b/c", "localhost:5000", "a/b/c", "latest", ""},
      {"127.0.0.1:5000/img:v1.0-rc_1", "127.0.0.1:5000", "img", "v1.0-rc_1", ""},
      {"Reg-1.Example/a__b.c_d---e:_x", "Reg-1.Example", "a__b.c_d---e", "_x", ""},
      {"reg.example/x@sha256:" + kHex, "reg.example", "x", "", "sha256:" + kHex},
      {"reg.example/x:t@sha256:" + kHex, "reg.example", "x", "t", "sha256:" + kHex},
      {"reg.example/x:" + std::string(128, 't'), "reg.example", "x", std::string(128, 't'), ""},
  };
  for (const Good& g : cases) {
    Result<ImageReference> r = ParseImageReference(g.text);
    ASSERT_TRUE(r.ok()) << g.text << ": " << r.status().ToString();
    EXPECT_EQ(r->registry, g.registry) << g.text;
    EXPECT_EQ(r->repository, g.repository) << g.text;
    EXPECT_EQ(r->tag, g.tag) << g.text;
    EXPECT_EQ(r->digest, g.digest) << g.text;
    // ToString parses back to the same reference.
    Result<ImageReference> again = ParseImageReference(r->ToString());
    ASSERT_TRUE(again.ok()) << r->ToString();
    EXPECT_EQ(*again, *r);
  }
}

TEST(ParseImageReferenceTest, RefusesWhatTheGrammarDoesNot) {
  const std::string bad[] = {
      "",
      "reg.example/",
      "reg.example//x",
      "reg.example/X",      // uppercase path
      "reg.example/x/",     // empty last component
      "reg.example/-x",     // separator first
      "reg.example/x.",     // separator last
      "reg.example/a...b",  // not a separator
      "reg.example/x:",     // empty tag
      "reg.example/x:.t",   // tag starting with '.'
      "reg.example/x:" + std::string(129, 't'),
      "reg.example/x:t/y",  // ':' in a path
      "reg.example/x@sha256:" + std::string(63, 'a'),
      "reg.example/x@sha256:" + std::string(64, 'A'),
      "reg.example/x@sha512:" + std::string(128, 'a'),
      "-reg.example/x",
      "reg.example:/x",
      "reg.example:123456/x",
      "reg..example/x",
      "reg.example/" + std::string(250, 'a'),  // name over 255
      "reg.example/x y",
      "reg.example/x\n",
  };
  for (const std::string& b : bad) {
    Result<ImageReference> r = ParseImageReference(b);
    EXPECT_FALSE(r.ok()) << "accepted: " << b;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << b;
    }
  }
}

TEST(ParseImageReferenceTest, ANameWithoutRegistryHostAsksForOne) {
  for (const char* text : {"python:3.12-slim", "library/python:3.12", "team/x", "ubuntu"}) {
    Result<ImageReference> r = ParseImageReference(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("registry host"), std::string::npos)
        << r.status().message();
  }
}

TEST(ParseImageReferenceTest, ManifestRefPrefersTheDigest) {
  Result<ImageReference> r = ParseImageReference("reg.example/x:t@sha256:" + kHex);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->ManifestRef(), "sha256:" + kHex);
  r = ParseImageReference("reg.example/x:t");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->ManifestRef(), "t");
}

TEST(IsSha256DigestTest, OnlyLowercaseHexOfTheRightLength) {
  EXPECT_TRUE(IsSha256Digest("sha256:" + kHex));
  EXPECT_FALSE(IsSha256Digest("sha256:" + kHex + "a"));
  EXPECT_FALSE(IsSha256Digest("sha256:" + std::string(64, 'g')));
  EXPECT_FALSE(IsSha256Digest(kHex));
}

}  // namespace
}  // namespace kubicle::noderuntime::oci
