// Reads of fields of unstructured Kubernetes objects that never throw. A
// missing field, a field of another type, or a path through something that
// is not an object reads as null or the default. nlohmann's own accessors
// throw (`value()` on a non-object, `get<>()` on another type) or, through
// a const `operator[]` on a missing key, are undefined: objects come from the
// apiserver, but a CRD installed without its schema, an old object or a
// hostile client must not take a controller down.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kubicle::kube {

using Json = nlohmann::json;

// obj[a][b]... or a null that lives as long as the program.
const Json& At(const Json& obj, std::initializer_list<std::string_view> path);
// The string at `path`, else "".
std::string StrAt(const Json& obj, std::initializer_list<std::string_view> path);
// The integer at `path` (a JSON integer that fits int64), else `def`.
int64_t IntAt(const Json& obj, std::initializer_list<std::string_view> path, int64_t def = 0);
// The number at `path` (integer or float), else `def`.
double NumAt(const Json& obj, std::initializer_list<std::string_view> path, double def = 0);
// The boolean at `path`, else `def`.
bool BoolAt(const Json& obj, std::initializer_list<std::string_view> path, bool def = false);
// True when `v` is a JSON integer that fits int64 (unsigned ones may not).
bool IsInt64(const Json& v);
// At most `max` bytes of `s`, cut on a UTF-8 boundary and marked "...": a
// status message or an Event built from a guest's or a node's words.
std::string Bounded(std::string s, size_t max = 1024);

}  // namespace kubicle::kube
