// Holds the CRD schemas in crds/ and the typed contract (types.h) to each
// other, field by field: every field a view reads exists in its kind's
// schema with a compatible type; every spec field the schema declares is
// read by the view; a sample with every declared field parses without a
// problem; and what the node writes (status.vm, status.disk, status.nodes[])
// fits the schema. The operator's own status writes are checked in
// operator/status_schema_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "kube/api/testing/crd_schema.h"
#include "kube/api/types.h"

namespace kubicle::kube::api {
namespace {

using testing::Compatible;
using testing::LoadCrdSchema;
using testing::SampleOf;
using testing::SchemaAt;
using testing::SchemaPaths;
using testing::WriteProblems;

const char* const kKinds[] = {"Sandbox", "SandboxTemplate", "SandboxFork", "Workspace"};

Json Schema(std::string_view kind) {
  auto s = LoadCrdSchema(KUBICLE_CRDS_DIR, kind);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : Json::object();
}

std::vector<FieldRead> Reads(std::string_view kind, const Json& object) {
  std::vector<FieldRead> reads;
  RecordReads(kind, object, &reads);
  std::sort(reads.begin(), reads.end());
  reads.erase(std::unique(reads.begin(), reads.end(),
                          [](const FieldRead& a, const FieldRead& b) { return a.path == b.path && a.type == b.type; }),
              reads.end());
  return reads;
}

std::vector<std::string> ProblemsOf(std::string_view kind, const Json& object) {
  if (kind == "Sandbox") return SandboxView::Parse(object).problems;
  if (kind == "SandboxTemplate") return SandboxTemplateView::Parse(object).problems;
  if (kind == "SandboxFork") return SandboxForkView::Parse(object).problems;
  return WorkspaceView::Parse(object).problems;
}

TEST(CrdSchemaTest, EveryFieldTheTypesReadIsInTheSchemaWithItsType) {
  for (const char* kind : kKinds) {
    const Json schema = Schema(kind);
    const auto reads = Reads(kind, Json::object());
    EXPECT_GT(reads.size(), 3u) << kind;
    for (const FieldRead& r : reads) {
      const Json* node = SchemaAt(schema, r.path);
      if (!node) {
        ADD_FAILURE() << kind << ": " << r.path << " is read but not in crds/";
        continue;
      }
      EXPECT_TRUE(Compatible(*node, r.type))
          << kind << ": " << r.path << " is read as " << r.type << ", crds/ says " << node->dump();
    }
  }
}

TEST(CrdSchemaTest, EverySpecFieldOfTheSchemaIsKnownToTheTypes) {
  for (const char* kind : kKinds) {
    const Json schema = Schema(kind);
    const auto reads = Reads(kind, Json::object());
    const auto paths = SchemaPaths(schema, "spec");
    EXPECT_FALSE(paths.empty()) << kind;
    auto below = [](const std::string& path, const std::string& parent) {
      return path.size() > parent.size() && path.rfind(parent, 0) == 0 &&
             (path[parent.size()] == '.' || path[parent.size()] == '[');
    };
    for (const std::string& p : paths) {
      // Read itself, or a field below it is, or it is below a field read
      // whole ("any", "map").
      bool covered = false;
      for (const FieldRead& r : reads) {
        covered = covered || r.path == p || below(r.path, p) ||
                  ((r.type == "any" || r.type == "map") && below(p, r.path));
      }
      EXPECT_TRUE(covered) << kind << ": crds/ declares " << p << " but kube/api/types does not read it";
    }
  }
}

TEST(CrdSchemaTest, AnObjectWithEveryDeclaredFieldParsesWithoutAProblem) {
  for (const char* kind : kKinds) {
    const Json sample = SampleOf(Schema(kind));
    ASSERT_TRUE(sample.contains("spec")) << kind << ": " << sample.dump();
    const auto problems = ProblemsOf(kind, sample);
    EXPECT_TRUE(problems.empty()) << kind << ": " << JoinProblems(problems) << "\n" << sample.dump();
  }
}

TEST(CrdSchemaTest, AFieldOfAnotherTypeIsCaught) {
  // The check above fails when the types and crds/ disagree: shown here by
  // a schema changed on purpose.
  Json schema = Schema("Sandbox");
  schema["properties"]["spec"]["properties"]["ttlSeconds"]["type"] = "string";
  const Json* node = SchemaAt(schema, "spec.ttlSeconds");
  ASSERT_NE(node, nullptr);
  EXPECT_FALSE(Compatible(*node, "integer"));
  EXPECT_FALSE(ProblemsOf("Sandbox", SampleOf(schema)).empty());
  EXPECT_EQ(SchemaAt(schema, "spec.noSuchField"), nullptr);
}

TEST(CrdSchemaTest, WhatTheNodeWritesFitsTheSchema) {
  const auto now = std::chrono::system_clock::now();
  const Json sandbox = Schema("Sandbox");
  for (const SandboxVm& vm : {SandboxVm{"Running", "10.0.0.1:7443", "", 4.5}, SandboxVm{"Failed", "", "boom", 0}}) {
    const auto problems = WriteProblems(sandbox, SandboxVmStatusPatch(vm, now));
    EXPECT_TRUE(problems.empty()) << JoinProblems(problems);
  }
  const Json workspace = Schema("Workspace");
  const auto disk = WriteProblems(
      workspace, WorkspaceDiskStatusPatch({"Ready", "w-1", "10.0.0.1:7443", "k-1", "", int64_t{4096}}, now));
  EXPECT_TRUE(disk.empty()) << JoinProblems(disk);
  TemplateNodeReport ready{"Ready", 3, "", "sha256:ab", 1.5, "10.0.0.1:7443", "t-1-g3", "sha256:cd"};
  const Json entry = {{"status", {{"nodes", Json::array({TemplateNodeEntryJson("n1", ready, now)})}}}};
  const auto nodes = WriteProblems(Schema("SandboxTemplate"), entry);
  EXPECT_TRUE(nodes.empty()) << JoinProblems(nodes);
  // And a field the schema lacks is named.
  const auto extra = WriteProblems(sandbox, Json{{"status", {{"vm", {{"stateX", "Running"}}}}}});
  ASSERT_EQ(extra.size(), 1u);
  EXPECT_NE(extra[0].find("status.vm.stateX"), std::string::npos) << extra[0];
}

TEST(CrdSchemaTest, WrittenAndReadStatusRoundTrips) {
  const auto now = std::chrono::system_clock::now();
  const SandboxVm vm{"Running", "10.0.0.1:7443", "", 4.5};
  const SandboxView s = SandboxView::Parse(SandboxVmStatusPatch(vm, now));
  EXPECT_TRUE(s.status.has_vm);
  EXPECT_EQ(s.status.vm, vm);
  const WorkspaceDisk d{"Ready", "w-1", "10.0.0.1:7443", "k-1", "", int64_t{4096}};
  const WorkspaceView w = WorkspaceView::Parse(WorkspaceDiskStatusPatch(d, now));
  EXPECT_TRUE(w.status.has_disk);
  EXPECT_EQ(w.status.disk, d);
  const TemplateNodeReport r{"Ready", 3, "", "sha256:ab", 1.5, "10.0.0.1:7443", "t-1-g3", "sha256:cd"};
  const SandboxTemplateView t = SandboxTemplateView::Parse(
      Json{{"status", {{"nodes", Json::array({TemplateNodeEntryJson("n1", r, now)})}}}});
  EXPECT_EQ(t.status.NodeReport("n1"), r);
  EXPECT_FALSE(t.status.NodeReport("n2"));
}

}  // namespace
}  // namespace kubicle::kube::api
