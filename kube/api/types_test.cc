#include "kube/api/types.h"

#include <gtest/gtest.h>

#include "kube/api/names.h"

namespace kubicle::kube::api {
namespace {

bool Mentions(const std::vector<std::string>& problems, const std::string& what) {
  for (const std::string& p : problems) {
    if (p.find(what) != std::string::npos) return true;
  }
  return false;
}

TEST(ViewsTest, SandboxFieldsAsWritten) {
  SandboxView v = SandboxView::Parse(Json::parse(R"({
    "metadata": {"name": "s", "namespace": "team", "uid": "u", "resourceVersion": "7",
                 "generation": 2, "creationTimestamp": "2026-01-01T00:00:00Z",
                 "labels": {"kubicle.dev/node": "n1"}, "finalizers": ["a", "b"]},
    "spec": {"templateRef": {"name": "py"}, "ttlSeconds": 90, "forkSource": "src",
             "resources": {"memoryMiB": 512, "vcpus": 2}, "env": [{"name": "A", "value": "1"}]},
    "status": {"phase": "Running", "nodeName": "n1", "tokenSha256": "ab",
               "vm": {"state": "Running", "message": "ok"},
               "conditions": [{"type": "Ready", "status": "True"}]}
  })"));
  EXPECT_TRUE(v.problems.empty()) << JoinProblems(v.problems);
  EXPECT_EQ(v.meta.Key(), "team/s");
  EXPECT_EQ(v.meta.uid, "u");
  EXPECT_EQ(v.meta.resource_version, "7");
  EXPECT_EQ(v.meta.generation, 2);
  EXPECT_EQ(v.meta.Label("kubicle.dev/node"), "n1");
  EXPECT_TRUE(v.meta.HasFinalizer("b"));
  EXPECT_FALSE(v.meta.deleting);
  EXPECT_EQ(v.spec.template_name, "py");
  EXPECT_EQ(v.spec.ttl_seconds, 90);
  EXPECT_EQ(v.spec.fork_source, "src");
  EXPECT_EQ(v.spec.memory_mib, 512);
  EXPECT_EQ(v.spec.vcpus, 2);
  EXPECT_FALSE(v.spec.expires_at);
  EXPECT_EQ(v.status.vm.state, "Running");
  EXPECT_EQ(v.status.vm.message, "ok");
  EXPECT_EQ(v.status.conditions.size(), 1u);
  EXPECT_EQ(v.object["spec"]["env"][0]["name"], "A") << "the object is kept whole";
}

TEST(ViewsTest, MissingEverythingIsAbsentNotAProblem) {
  for (const char* text : {"{}", R"({"metadata": {}, "spec": {}, "status": {}})",
                           R"({"metadata": null, "spec": null, "status": null})"}) {
    SandboxView s = SandboxView::Parse(Json::parse(text));
    EXPECT_TRUE(s.problems.empty()) << text << ": " << JoinProblems(s.problems);
    EXPECT_EQ(s.meta.name, "");
    EXPECT_EQ(s.spec.template_name, "");
    EXPECT_FALSE(s.spec.ttl_seconds || s.spec.memory_mib || s.spec.fork_source);
    EXPECT_TRUE(s.status.conditions.is_array());
    SandboxTemplateView t = SandboxTemplateView::Parse(Json::parse(text));
    EXPECT_TRUE(t.problems.empty()) << text;
    EXPECT_TRUE(t.spec.warmup.empty());
    EXPECT_TRUE(t.status.nodes.empty());
    SandboxForkView f = SandboxForkView::Parse(Json::parse(text));
    EXPECT_TRUE(f.problems.empty()) << text;
    EXPECT_EQ(f.spec.replicas, 1) << "the schema's default";
  }
}

TEST(ViewsTest, HostileRootsAndMetadataNeverThrow) {
  for (const char* text : {"null", "[]", "[1,2]", "\"text\"", "42", "true",
                           R"({"metadata": "x", "spec": 3, "status": []})",
                           R"({"metadata": {"name": 1, "labels": ["a"], "finalizers": "f",
                                            "generation": "2", "deletionTimestamp": 5}})",
                           R"({"metadata": {"labels": {"a": 1, "b": null, "c": "ok"},
                                            "finalizers": [1, "f", null]}})"}) {
    const Json obj = Json::parse(text);
    SandboxView s = SandboxView::Parse(obj);
    SandboxTemplateView t = SandboxTemplateView::Parse(obj);
    SandboxForkView f = SandboxForkView::Parse(obj);
    EXPECT_EQ(s.meta.name, "") << text;
    EXPECT_EQ(s.meta.generation, 0) << text;
    EXPECT_EQ(t.meta.labels.count("a"), 0u) << text;
    EXPECT_EQ(f.spec.replicas, 1) << text;
  }
  ObjectMeta m = ParseObjectMeta(Json::parse(
      R"({"metadata": {"labels": {"a": 1, "c": "ok"}, "finalizers": [1, "f"],
                       "deletionTimestamp": "2026-01-01T00:00:00Z"}})"));
  EXPECT_EQ(m.labels, (std::map<std::string, std::string>{{"c", "ok"}}));
  EXPECT_EQ(m.finalizers, std::vector<std::string>{"f"});
  EXPECT_TRUE(m.deleting);
  // A spec that is not an object is a problem of the spec itself.
  EXPECT_TRUE(Mentions(SandboxView::Parse(Json::parse(R"({"spec": 3})")).problems,
                       "spec: expected an object, got number"));
}

TEST(ViewsTest, SandboxSpecOfTheWrongTypesIsNamed) {
  SandboxView v = SandboxView::Parse(Json::parse(R"({
    "spec": {"templateRef": "py", "ttlSeconds": "90", "expiresAt": 5, "forkSource": ["a"],
             "resources": {"memoryMiB": 1.5, "vcpus": -1}, "env": {"A": "1"}},
    "status": {"phase": 3, "vm": "Running", "conditions": [1, {"type": "Ready"}, "x"]}
  })"));
  EXPECT_TRUE(Mentions(v.problems, "spec.templateRef: expected an object, got string"));
  EXPECT_TRUE(Mentions(v.problems, "spec.ttlSeconds: expected an integer, got string"));
  EXPECT_TRUE(Mentions(v.problems, "spec.expiresAt: expected a string, got number"));
  EXPECT_TRUE(Mentions(v.problems, "spec.forkSource: expected a string, got array"));
  EXPECT_TRUE(Mentions(v.problems, "spec.resources.memoryMiB: expected an integer, got number"));
  EXPECT_TRUE(Mentions(v.problems, "spec.resources.vcpus: -1 is outside"));
  EXPECT_TRUE(Mentions(v.problems, "spec.env: expected an array, got object"));
  EXPECT_EQ(v.problems.size(), 7u) << JoinProblems(v.problems);
  EXPECT_EQ(v.spec.template_name, "");
  EXPECT_FALSE(v.spec.ttl_seconds || v.spec.expires_at || v.spec.fork_source ||
               v.spec.memory_mib || v.spec.vcpus);
  // Status is not the spec: garbled reports read as absent, silently.
  EXPECT_EQ(v.status.phase, "");
  EXPECT_EQ(v.status.vm.state, "");
  EXPECT_EQ(v.status.conditions, Json::parse(R"([{"type": "Ready"}])"));
}

TEST(ViewsTest, IntegersOutsideWhatTheOperatorComputesWithAreProblems) {
  SandboxView v = SandboxView::Parse(Json::parse(
      R"({"spec": {"ttlSeconds": 18446744073709551615, "resources": {"memoryMiB": 0}}})"));
  EXPECT_TRUE(Mentions(v.problems, "spec.ttlSeconds: expected an integer"));
  EXPECT_TRUE(Mentions(v.problems, "spec.resources.memoryMiB: 0 is outside"));
  v = SandboxView::Parse(Json::parse(R"({"spec": {"ttlSeconds": 99999999999999}})"));
  EXPECT_TRUE(Mentions(v.problems, "spec.ttlSeconds: 99999999999999 is outside"));
  SandboxForkView f = SandboxForkView::Parse(Json::parse(R"({"spec": {"replicas": 1000000}})"));
  EXPECT_TRUE(Mentions(f.problems, "spec.replicas"));
  EXPECT_EQ(f.spec.replicas, 1);
}

TEST(ViewsTest, TemplateSpecAndNodeEntries) {
  SandboxTemplateView t = SandboxTemplateView::Parse(Json::parse(R"({
    "metadata": {"generation": 4},
    "spec": {"kernel": "/k", "rootfs": 7, "memoryMiB": "256",
             "warmup": [{"command": ["pip", 3]}, "x", {"command": "ls"}, {}]},
    "status": {"nodes": [{"nodeName": "a", "phase": "Ready", "observedGeneration": 4},
                         {"phase": "Ready"}, 5, {"nodeName": "b", "observedGeneration": "4"}]}
  })"));
  EXPECT_EQ(t.spec.kernel, "/k");
  EXPECT_FALSE(t.spec.rootfs);
  EXPECT_FALSE(t.spec.memory_mib);
  EXPECT_TRUE(Mentions(t.problems, "spec.rootfs: expected a string, got number"));
  EXPECT_TRUE(Mentions(t.problems, "spec.memoryMiB: expected an integer, got string"));
  EXPECT_TRUE(Mentions(t.problems, "spec.warmup[0].command[1]: expected a string"));
  EXPECT_TRUE(Mentions(t.problems, "spec.warmup[1]: expected an object, got string"));
  EXPECT_TRUE(Mentions(t.problems, "spec.warmup[2].command: expected an array, got string"));
  ASSERT_EQ(t.spec.warmup.size(), 4u);
  EXPECT_EQ(t.spec.warmup[0].command, (std::vector<std::string>{"pip", ""}));
  EXPECT_TRUE(t.spec.warmup[3].command.empty());
  ASSERT_EQ(t.status.nodes.size(), 2u) << "entries without a node name are dropped";
  EXPECT_EQ(t.status.nodes[0].node_name, "a");
  EXPECT_EQ(t.status.nodes[0].observed_generation, 4);
  EXPECT_EQ(t.status.nodes[1].observed_generation, 0) << "a string generation matches nothing";
  // Not an array at all.
  EXPECT_TRUE(SandboxTemplateView::Parse(Json::parse(R"({"status": {"nodes": {"a": 1}}})"))
                  .status.nodes.empty());
  EXPECT_TRUE(Mentions(SandboxTemplateView::Parse(Json::parse(R"({"spec": {"warmup": {}}})"))
                           .problems,
                       "spec.warmup: expected an array, got object"));
}

TEST(ViewsTest, ForkSpecAndChildMetadata) {
  SandboxForkView f = SandboxForkView::Parse(Json::parse(R"({
    "spec": {"sourceRef": {"name": "src"}, "replicas": 3, "ttlSeconds": 60,
             "childMetadata": {"labels": {"team": "x"}, "annotations": {"a": "1"}}}
  })"));
  EXPECT_TRUE(f.problems.empty()) << JoinProblems(f.problems);
  EXPECT_EQ(f.spec.source_name, "src");
  EXPECT_EQ(f.spec.replicas, 3);
  EXPECT_EQ(f.spec.ttl_seconds, 60);
  EXPECT_EQ(f.spec.child_labels.at("team"), "x");
  EXPECT_EQ(f.spec.child_annotations.at("a"), "1");

  f = SandboxForkView::Parse(Json::parse(R"({
    "spec": {"sourceRef": {"name": 5}, "replicas": "3",
             "childMetadata": {"labels": {"team": 1, "ok": "y"}, "annotations": []}}
  })"));
  EXPECT_TRUE(Mentions(f.problems, "spec.sourceRef.name: expected a string, got number"));
  EXPECT_TRUE(Mentions(f.problems, "spec.replicas: expected an integer, got string"));
  EXPECT_TRUE(Mentions(f.problems, "spec.childMetadata.labels.team: expected a string"));
  EXPECT_TRUE(Mentions(f.problems, "spec.childMetadata.annotations: expected an object, got array"));
  EXPECT_EQ(f.spec.replicas, 1);
  EXPECT_EQ(f.spec.child_labels, (std::map<std::string, std::string>{{"ok", "y"}}));
  EXPECT_TRUE(f.spec.child_annotations.empty());
}

TEST(ViewsTest, NewSandboxForkReadsBack) {
  SandboxForkSpec spec;
  spec.source_name = "src";
  spec.replicas = 4;
  spec.child_labels = {{"team", "x"}};
  const Json fork = NewSandboxFork("f1", {{"kubicle.dev/run", "r1"}}, spec);
  EXPECT_EQ(fork["apiVersion"], "kubicle.dev/v1alpha1");
  EXPECT_EQ(fork["kind"], "SandboxFork");
  SandboxForkView f = SandboxForkView::Parse(fork);
  EXPECT_TRUE(f.problems.empty()) << JoinProblems(f.problems);
  EXPECT_EQ(f.meta.name, "f1");
  EXPECT_EQ(f.meta.Label("kubicle.dev/run"), "r1");
  EXPECT_EQ(f.spec.source_name, "src");
  EXPECT_EQ(f.spec.replicas, 4);
  EXPECT_EQ(f.spec.child_labels, spec.child_labels);
  EXPECT_FALSE(f.spec.ttl_seconds);
  EXPECT_FALSE(fork["spec"].contains("ttlSeconds"));
  EXPECT_FALSE(NewSandboxFork("f2", {}, SandboxForkSpec{})["spec"].contains("childMetadata"))
      << "childMetadata only when it has entries";
  spec.ttl_seconds = 60;
  spec.child_annotations = {{"a", "1"}};
  f = SandboxForkView::Parse(NewSandboxFork("f3", {}, spec));
  EXPECT_EQ(f.spec.ttl_seconds, 60);
  EXPECT_EQ(f.spec.child_annotations, spec.child_annotations);
  EXPECT_FALSE(NewSandboxFork("f3", {}, spec)["spec"].contains("childTokenSha256"));
  spec.child_token_sha256 = {std::string(64, 'a'), std::string(64, 'b')};
  f = SandboxForkView::Parse(NewSandboxFork("f4", {}, spec));
  EXPECT_TRUE(f.problems.empty()) << JoinProblems(f.problems);
  EXPECT_EQ(f.spec.child_token_sha256, spec.child_token_sha256);
}

TEST(ViewsTest, ConditionsSuspendAndLeases) {
  SandboxView v = SandboxView::Parse(Json::parse(R"({"status": {"conditions": [
    "junk", {"type": "Ready", "status": "False", "reason": "Starting", "message": "m"}]}})"));
  std::optional<Condition> ready = FindCondition(v.status.conditions, kCondReady);
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, "False");
  EXPECT_EQ(ready->reason, "Starting");
  EXPECT_EQ(ready->message, "m");
  EXPECT_FALSE(FindCondition(v.status.conditions, kCondExpired));
  EXPECT_FALSE(FindCondition(Json(), kCondReady));

  EXPECT_EQ(SandboxSuspendPatch(true), Json::parse(R"({"spec": {"suspend": true}})"));
  EXPECT_EQ(SandboxSuspendPatch(false), Json::parse(R"({"spec": {"suspend": false}})"));

  EXPECT_EQ(NodeLeaseName("n1"), "kubicle-node-n1");
  EXPECT_EQ(NodeLeaseServingCa(
                Json::parse(R"({"metadata": {"annotations": {"kubicle.dev/serving-ca": "PEM"}}})")),
            "PEM");
  EXPECT_EQ(NodeLeaseServingCa(Json::parse(R"({"metadata": {"annotations": ["x"]}})")), "");
  EXPECT_EQ(NodeLeaseServingCa(Json()), "");

  SandboxTemplateView t = SandboxTemplateView::Parse(
      Json::parse(R"({"status": {"runTokenSha256": "ab", "runTokenSecretName": "t-run-token"}})"));
  EXPECT_EQ(t.status.run_token_sha256, "ab");
  EXPECT_EQ(t.status.run_token_secret_name, "t-run-token");
}

}  // namespace
}  // namespace kubicle::kube::api
