#include "noderuntime/api/routes.h"

#include <gtest/gtest.h>

namespace kubicle::noderuntime::api {
namespace {

TEST(Routes, MatchesEveryRoute) {
  EXPECT_EQ(MatchRoute("/healthz")->route, Route::kHealthz);
  EXPECT_EQ(MatchRoute("/metrics")->route, Route::kMetrics);
  EXPECT_EQ(MatchRoute("/v1/templates")->route, Route::kTemplates);
  EXPECT_EQ(MatchRoute("/v1/templates/")->route, Route::kTemplates);
  auto t = MatchRoute("/v1/templates/py");
  EXPECT_EQ(t->route, Route::kTemplate);
  EXPECT_EQ(t->name, "py");
  EXPECT_EQ(MatchRoute("/v1/sandboxes")->route, Route::kSandboxes);
  EXPECT_EQ(MatchRoute("/v1/sandboxes/s1")->route, Route::kSandbox);
  auto e = MatchRoute("/v1/sandboxes/s1/exec");
  EXPECT_EQ(e->route, Route::kExec);
  EXPECT_EQ(e->name, "s1");
  EXPECT_EQ(MatchRoute("/v1/sandboxes/s1/fork")->route, Route::kFork);
  EXPECT_EQ(MatchRoute("/v1/sandboxes/s1/files")->route, Route::kFiles);
  auto c = MatchRoute("/v1/sandboxes/s1/console");
  EXPECT_EQ(c->route, Route::kConsole);
  EXPECT_EQ(c->name, "s1");
  EXPECT_EQ(MatchRoute("/v1/sandboxes/s1/stats")->route, Route::kStats);
  EXPECT_EQ(MatchRoute("/v1/sandboxes/s1/stat")->route, Route::kStat);
  EXPECT_EQ(MatchRoute("/v1/sandboxes/s1/ls")->route, Route::kList);
  auto port = MatchRoute("/v1/sandboxes/s1/ports/3000");
  ASSERT_TRUE(port.has_value());
  EXPECT_EQ(port->route, Route::kPort);
  EXPECT_EQ(port->name, "s1");
  EXPECT_EQ(port->port, "3000");
  EXPECT_FALSE(MatchRoute("/v1/sandboxes/s1/ports").has_value());
  EXPECT_FALSE(MatchRoute("/v1/sandboxes/s1/ports/3000/x").has_value());
  EXPECT_FALSE(MatchRoute("/v1/sandboxes/s1/port/3000").has_value());
}

TEST(Routes, PortsAreParsedStrictly) {
  EXPECT_EQ(ParsePort("1"), 1);
  EXPECT_EQ(ParsePort("3000"), 3000);
  EXPECT_EQ(ParsePort("65535"), 65535);
  for (const char* bad : {"", "0", "00", "03000", "65536", "99999", "100000", "+80", "-1", "80 ",
                          " 80", "8o", "0x50", "1e3"}) {
    EXPECT_FALSE(ParsePort(bad).has_value()) << bad;
  }
  EXPECT_EQ(AllowedMethods(Route::kPort), "GET");
  EXPECT_EQ(RouteAccess(Route::kPort, "GET"), Access::kAdminOrSandbox);
  EXPECT_EQ(RouteBody(Route::kPort, "GET"), BodyKind::kNone);
  EXPECT_EQ(RouteLabel(Route::kPort, "GET"), "GET /v1/sandboxes/{id}/ports/{port}");
  auto run = MatchRoute("/v1/templates/py/run");
  EXPECT_EQ(run->route, Route::kRun);
  EXPECT_EQ(run->name, "py");
}

TEST(Routes, UnknownPaths) {
  for (const char* p : {"", "/", "/v2/sandboxes", "/v1", "/v1/sandboxes/a/b/c", "/v1/x",
                        "/v1/sandboxes/s1/nope", "/v1/templates/a/b", "/v1/templates/a/run/x", "/v1//sandboxes",
                        "healthz"}) {
    EXPECT_FALSE(MatchRoute(p).has_value()) << p;
  }
}

TEST(Routes, MethodsAndAccess) {
  EXPECT_TRUE(MethodAllowed(Route::kTemplate, "PUT"));
  EXPECT_FALSE(MethodAllowed(Route::kTemplate, "POST"));
  EXPECT_FALSE(MethodAllowed(Route::kExec, "GET"));
  EXPECT_FALSE(MethodAllowed(Route::kSandbox, "GE"));
  EXPECT_FALSE(MethodAllowed(Route::kSandbox, ""));
  EXPECT_EQ(AllowedMethods(Route::kSandboxes), "GET, POST, DELETE");
  EXPECT_EQ(RouteAccess(Route::kMetrics, "GET"), Access::kPublic);
  EXPECT_EQ(RouteAccess(Route::kSandbox, "GET"), Access::kAdminOrSandbox);
  EXPECT_EQ(RouteAccess(Route::kSandbox, "DELETE"), Access::kAdmin);
  EXPECT_EQ(RouteAccess(Route::kFork, "POST"), Access::kAdmin);
  EXPECT_EQ(MatchRoute("/v1/sandboxes/s1/suspend")->route, Route::kSuspend);
  EXPECT_EQ(MatchRoute("/v1/sandboxes/s1/resume/")->route, Route::kResume);
  EXPECT_EQ(RouteAccess(Route::kSuspend, "POST"), Access::kAdminOrSandbox);
  EXPECT_EQ(RouteAccess(Route::kResume, "POST"), Access::kAdminOrSandbox);
  EXPECT_EQ(RouteBody(Route::kSuspend, "POST"), BodyKind::kNone);
  EXPECT_TRUE(MethodAllowed(Route::kResume, "POST"));
  EXPECT_FALSE(MethodAllowed(Route::kResume, "GET"));
  EXPECT_EQ(RouteAccess(Route::kExec, "POST"), Access::kAdminOrSandbox);
  EXPECT_EQ(RouteLabel(Route::kExec, "POST"), "POST /v1/sandboxes/{id}/exec");
  // A per-call run: POST only, a JSON body, the template's run token.
  EXPECT_EQ(AllowedMethods(Route::kRun), "POST");
  EXPECT_EQ(RouteAccess(Route::kRun, "POST"), Access::kAdminOrRunToken);
  EXPECT_EQ(RouteBody(Route::kRun, "POST"), BodyKind::kJson);
  EXPECT_EQ(RouteLabel(Route::kRun, "POST"), "POST /v1/templates/{name}/run");
  // The console and the stats are the sandbox's own, read-only.
  EXPECT_EQ(AllowedMethods(Route::kFiles), "GET, PUT, DELETE");
  EXPECT_EQ(RouteAccess(Route::kFiles, "DELETE"), Access::kAdminOrSandbox);
  EXPECT_EQ(RouteBody(Route::kFiles, "DELETE"), BodyKind::kNone);
  for (Route r : {Route::kConsole, Route::kStats, Route::kStat, Route::kList}) {
    EXPECT_EQ(AllowedMethods(r), "GET");
    EXPECT_EQ(RouteAccess(r, "GET"), Access::kAdminOrSandbox);
    EXPECT_EQ(RouteBody(r, "GET"), BodyKind::kNone);
  }
  EXPECT_EQ(RouteLabel(Route::kConsole, "GET"), "GET /v1/sandboxes/{id}/console");
}

TEST(Auth, BearerAndConstantTimeCompare) {
  EXPECT_EQ(*ParseBearer("Bearer abc"), "abc");
  EXPECT_EQ(*ParseBearer("bearer  abc "), "abc");
  EXPECT_FALSE(ParseBearer("Basic abc").has_value());
  EXPECT_FALSE(ParseBearer("Bearer ").has_value());
  EXPECT_FALSE(ParseBearer("Bearer a b").has_value());
  EXPECT_TRUE(ConstantTimeEqual("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEqual("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEqual("abc", "abcd"));
  EXPECT_FALSE(ConstantTimeEqual("", "a"));
}

TEST(Routes, ParseTargetDecodesPathAndQuery) {
  auto t = ParseTarget("/v1/sandboxes/a%20b/files?path=%2Ftmp%2Fx&mode=0644&flag&=v");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->path, "/v1/sandboxes/a b/files");
  EXPECT_EQ(t->query.at("path"), "/tmp/x");
  EXPECT_EQ(t->query.at("mode"), "0644");
  EXPECT_EQ(t->query.at("flag"), "");
  EXPECT_EQ(ParseTarget("/v1/sandboxes?labelSelector=a+in+(b)")->query.at("labelSelector"),
            "a+in+(b)");
  EXPECT_EQ(ParseTarget("/healthz#frag")->path, "/healthz#frag");
  EXPECT_FALSE(ParseTarget("/v1/%zz"));
  EXPECT_FALSE(ParseTarget("/v1/x?a=%4"));
  EXPECT_FALSE(ParseTarget("/v1/x%"));
  EXPECT_EQ(*PercentDecode("%41%62c"), "Abc");
}

TEST(Routes, BodyKinds) {
  EXPECT_EQ(RouteBody(Route::kFiles, "PUT"), BodyKind::kFile);
  EXPECT_EQ(RouteBody(Route::kFiles, "GET"), BodyKind::kNone);
  EXPECT_EQ(RouteBody(Route::kSandboxes, "POST"), BodyKind::kJson);
  EXPECT_EQ(RouteBody(Route::kTemplate, "PUT"), BodyKind::kJson);
  EXPECT_EQ(RouteBody(Route::kSandboxes, "DELETE"), BodyKind::kNone);
  EXPECT_EQ(RouteBody(Route::kHealthz, "GET"), BodyKind::kNone);
}

}  // namespace
}  // namespace kubicle::noderuntime::api
