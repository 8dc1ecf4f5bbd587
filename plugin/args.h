// kubectl-kubicle's command line: the verb, kubectl's global flags
// (--kubeconfig, --context, -n/--namespace) anywhere on the line, the verb's
// own flags, and the command after `--`. Pure functions, tested on their own.
//
// Flags are written as kubectl writes them: --name=value or --name value,
// short ones as -n value, -n=value or -nvalue; a boolean alone means true
// (--wait, -i) and takes =true/=false. Everything after `--` is the
// command, untouched.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace kubicle::plugin {

struct GlobalFlags {
  std::string kubeconfig;  // empty: $KUBECONFIG, ~/.kube/config
  std::string context;     // empty: the current context
  std::string ns;          // empty: the context's namespace
  std::string node_lease_namespace = "kubicle-node-lease";
};

struct Invocation {
  std::string verb;                      // "" with --help alone
  GlobalFlags global;
  std::vector<std::string> positional;   // SBX, cp operands
  // Verb flags by their long name (without dashes); repeatable ones keep
  // every value in order; booleans hold "true" or "false".
  std::map<std::string, std::vector<std::string>> flags;
  std::vector<std::string> command;      // after `--`
  bool dash_dash = false;                // `--` was given
  bool help = false;

  bool Has(const std::string& name) const { return flags.count(name) != 0; }
  // The last value of a flag, or `def`.
  std::string Get(const std::string& name, const std::string& def = "") const;
  bool Bool(const std::string& name) const { return Get(name, "false") == "true"; }
  const std::vector<std::string>& All(const std::string& name) const;
};

// The verbs, in the order `--help` lists them.
const std::vector<std::string>& Verbs();

// Parses argv after the program name. InvalidArgument names the flag or
// word that is wrong (an unknown verb or flag, a missing value, a bad
// boolean, a verb flag before the verb).
Result<Invocation> ParseArgs(const std::vector<std::string>& args);

// "30s", "2m", "1h", "500ms", "45" (seconds). Positive, at most a day.
Result<std::chrono::milliseconds> ParseDuration(const std::string& text);

// A cp operand: "SBX:/path" is remote (a name without '/' before the first
// ':'), anything else ("./a:b", "/tmp/x", "-") local.
// SBX:/path, ws/NAME:/path (or workspace/NAME:/path: a Workspace's disk,
// no VM needed), or a local path.
struct CpOperand {
  std::string sandbox;  // the object's name; empty: local
  std::string path;
  bool workspace = false;  // `sandbox` names a Workspace
};
CpOperand ParseCpOperand(const std::string& arg);

// Usage text: the whole plugin ("" verb) or one verb.
std::string Usage(const std::string& verb = "");

}  // namespace kubicle::plugin
