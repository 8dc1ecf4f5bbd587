// The CRD schemas of crds/ as tests read them: loaded from the YAML the
// cluster gets, walked by the field paths kube/api records ("spec.env[].name"),
// sampled into objects that carry every declared field, and checked against
// what a writer puts in an object. For crd_schema_test and the operator's
// status-write test; no production code links it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "kube/kube_client.h"

namespace kubicle::kube::api::testing {

// The v1alpha1 openAPIV3Schema of `kind` ("Sandbox", ...) in `crds_dir`,
// as JSON (YAML booleans and integers as such).
Result<Json> LoadCrdSchema(const std::string& crds_dir, std::string_view kind);

// The schema at `path` ("spec.env[].name"; "[]" an array's items, a key of a
// map its additionalProperties), or nullptr when the schema declares none.
// Below a node with x-kubernetes-preserve-unknown-fields every path exists.
const Json* SchemaAt(const Json& schema, std::string_view path);

// An object with every field the schema declares: arrays and maps with
// one item, strings the first enum value or "x", numbers their minimum.
Json SampleOf(const Json& schema);

// Every path the schema declares below `prefix` (e.g. "spec"), with "[]"
// for array items; not below preserve-unknown-fields nodes.
std::vector<std::string> SchemaPaths(const Json& schema, std::string_view prefix);

// Whether a value of JSON type `read` ("string", "integer", "number",
// "boolean", "object", "array", "map", "any") fits the schema node.
bool Compatible(const Json& node, std::string_view read);

// Each field of `written` (a patch or object a writer sends) that the schema
// lacks or types otherwise, as "path: why"; nulls (merge-patch removals)
// only need the field to exist.
std::vector<std::string> WriteProblems(const Json& schema, const Json& written);

}  // namespace kubicle::kube::api::testing
