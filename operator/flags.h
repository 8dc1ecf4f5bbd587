// kubicle-operator's command line (docs/operator.md, "Flags"). Parsing is a
// pure function, so every form and error is unit-tested: it reads no files
// and asks the OS nothing (main.cc fills in the process-dependent defaults).
//
// Every value flag is accepted as `--name=value` and as `--name value`, as
// kubectl users expect; in the spaced form a value may not start with "--"
// (`--kubeconfig --context=x` is a missing value, not a path). --check-flags
// and --help take no value; --leader-elect alone means true. Values are
// checked up front: a number out of range, an unknown choice or, with leader
// election, Lease timings that break lease duration > renew deadline >
// retry period are InvalidArgument naming the flag.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace kubicle::op {

struct OperatorFlags {
  // Every flag by name (without dashes), defaults filled in.
  std::map<std::string, std::string> values;
  bool check = false;  // --check-flags: validate, print "kubicle-operator: flags ok", exit 0
  bool help = false;   // --help, -h

  const std::string& Get(const std::string& name) const { return values.at(name); }
  // An integer flag; valid once ParseOperatorFlags accepted it.
  long Int(const std::string& name) const { return std::stol(values.at(name)); }
};

// The defaults, as the usage text shows them.
OperatorFlags DefaultOperatorFlags();

// Parses argv[1..].
Result<OperatorFlags> ParseOperatorFlags(const std::vector<std::string>& args);

// The usage text: the forms, then every flag with its default.
std::string OperatorUsage();

}  // namespace kubicle::op
