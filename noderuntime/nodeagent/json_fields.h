// Typed reads of fields of unstructured Kubernetes objects that never throw:
// a missing field or one of another type reads as the default. Objects come
// from the apiserver, but a schema change or an old object must not crash
// the node.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kubicle::noderuntime::nodeagent {

using Json = nlohmann::json;

// obj[a][b]... or null.
const Json& At(const Json& obj, std::initializer_list<std::string_view> path);
std::string StrAt(const Json& obj, std::initializer_list<std::string_view> path);
int64_t IntAt(const Json& obj, std::initializer_list<std::string_view> path, int64_t def = 0);
double NumAt(const Json& obj, std::initializer_list<std::string_view> path, double def = 0);
// At most `max` bytes, cut on a UTF-8 boundary (status messages).
std::string Bounded(std::string s, size_t max = 1024);

}  // namespace kubicle::noderuntime::nodeagent
