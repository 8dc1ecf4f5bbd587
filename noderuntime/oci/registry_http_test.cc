#include "noderuntime/oci/registry_http.h"

#include <gtest/gtest.h>

namespace kubicle::noderuntime::oci {
namespace {

TEST(CheckRedirectTest, HttpsNeverFallsBackToHttp) {
  EXPECT_TRUE(CheckRedirect("https://reg.example/v2/x", "https://storage.example/b?sig=1").ok());
  EXPECT_TRUE(CheckRedirect("http://127.0.0.1:5000/v2/x", "https://storage.example/b").ok());
  EXPECT_TRUE(CheckRedirect("http://127.0.0.1:5000/v2/x", "http://127.0.0.1:9000/b").ok());
  Status down = CheckRedirect("https://reg.example/v2/x", "http://storage.example/b");
  EXPECT_EQ(down.code(), StatusCode::kUnavailable);
  EXPECT_NE(down.message().find("https to http"), std::string::npos);
  EXPECT_FALSE(CheckRedirect("HTTPS://reg.example/v2/x", "HTTP://storage.example/b").ok());
  for (const char* to : {"file:///etc/passwd", "ftp://x/y", "gopher://x", "no-scheme"}) {
    EXPECT_FALSE(CheckRedirect("http://reg.example/v2/x", to).ok()) << to;
  }
}

TEST(UrlOriginTest, SchemeHostAndPortOnly) {
  EXPECT_EQ(UrlOrigin("https://Reg.Example:5000/v2/x?y#z"), "https://reg.example:5000");
  EXPECT_EQ(UrlOrigin("http://127.0.0.1:5000"), "http://127.0.0.1:5000");
  EXPECT_EQ(UrlOrigin("https://reg.example?x"), "https://reg.example");
  // A different port, scheme or host is another origin: no credentials.
  EXPECT_NE(UrlOrigin("https://reg.example:5000/a"), UrlOrigin("https://reg.example:5001/a"));
  EXPECT_NE(UrlOrigin("https://reg.example/a"), UrlOrigin("http://reg.example/a"));
  EXPECT_NE(UrlOrigin("https://reg.example/a"), UrlOrigin("https://reg.example@evil.example/a"));
}

}  // namespace
}  // namespace kubicle::noderuntime::oci
