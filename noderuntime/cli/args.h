// A small command-line parser for kubicle-nodectl: flags that take a value
// (repeatable; `--flag V` or `--flag=V`), boolean flags, positionals, and
// everything after "--".
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

// kubicle-nodectl's own flags, before the command: --server URL,
// --token-file FILE and --ca-file FILE (each also as --flag=value),
// --help / -h / help.
struct GlobalFlags {
  std::string server;      // "" = not given
  std::string token_file;  // "" = not given
  std::string ca_file;     // "" = not given
  bool help = false;
  size_t command = 0;      // index of the command in argv (argv.size(): none)
};
Result<GlobalFlags> ParseGlobalFlags(const std::vector<std::string>& argv);

}  // namespace kubicle::noderuntime::cli
