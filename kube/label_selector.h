// Kubernetes label selectors ("a=b,c!=d,e in (x,y),f notin (z),g,!h"),
// parsed once and matched against an object's labels. Used by the fake
// client (to behave like the apiserver) and by the node, whose sandbox list
// and delete take the same grammar (`?labelSelector=`, docs/node.md).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace kubicle::kube {

class LabelSelector {
 public:
  // The empty string selects everything.
  static Result<LabelSelector> Parse(std::string_view text);
  bool Matches(const std::map<std::string, std::string>& labels) const;
  // Matches metadata.labels of a Kubernetes object.
  bool MatchesObject(const nlohmann::json& object) const;
  bool empty() const { return reqs_.empty(); }

 private:
  enum class Op { kEq, kNotEq, kIn, kNotIn, kExists, kNotExists };
  struct Requirement {
    std::string key;
    Op op;
    std::vector<std::string> values;
  };
  std::vector<Requirement> reqs_;
};

// "k1=v1,k2=v2" from a map, sorted by key (stable for tests and URLs).
std::string FormatEqualitySelector(const std::map<std::string, std::string>& labels);

}  // namespace kubicle::kube
