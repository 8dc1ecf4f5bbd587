// A small command-line parser for kubicle-nodectl: flags that take a value
// (repeatable), boolean flags, positionals, and everything after "--".
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace kubicle::noderuntime::cli {

struct Args {
  std::map<std::string, std::vector<std::string>> values;  // --flag V (repeatable)
  std::set<std::string> bools;                             // --flag
  std::vector<std::string> positional;
  std::vector<std::string> rest;                           // after "--"

  bool Has(const std::string& f) const { return bools.count(f) || values.count(f); }
  std::string Get(const std::string& f, const std::string& def = "") const;
  const std::vector<std::string>& All(const std::string& f) const;
  // An integer flag in [min, max]; `def` when absent.
  Result<long long> Int(const std::string& f, long long def, long long min, long long max) const;
};

// `value_flags` and `bool_flags` list the accepted names (with dashes, e.g.
// "--count", "-l"); anything else starting with '-' is an error. "--x=v"
// is accepted for value flags.
Result<Args> ParseArgs(const std::vector<std::string>& argv,
                       const std::set<std::string>& value_flags,
                       const std::set<std::string>& bool_flags);

}  // namespace kubicle::noderuntime::cli
