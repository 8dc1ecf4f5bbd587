// Command lines take `--flag value` and `--flag=value` alike, as kubectl
// users expect. A parser written for the spaced form reads both by walking
// SplitFlagValues(argc, argv) instead of argv.
//
// Contract: every "--name=value" before a "--" terminator becomes "--name",
// "value" (split at the first '='); everything else is kept as it is. A
// boolean flag given "=value" thus becomes the flag and a stray argument,
// which the parser refuses. A value that itself looks like "--x=y" is
// split too, so this is for parsers whose values never start with "--".
// Header-only: the statically linked guest agent uses it without
// kubicle_common.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace kubicle {

inline std::vector<std::string> SplitFlagValues(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  bool rest = false;
  for (const std::string& a : args) {
    if (a == "--") rest = true;
    const size_t eq = a.find('=');
    if (rest || a.size() < 3 || a.compare(0, 2, "--") != 0 || eq == std::string::npos) {
      out.push_back(a);
      continue;
    }
    out.push_back(a.substr(0, eq));
    out.push_back(a.substr(eq + 1));
  }
  return out;
}

// For parsers whose values may start with "--" (a kernel command line): a
// value-taking flag's next argument is kept whole; only arguments in a flag's
// place are split. `is_boolean(name)` tells the flags that take no value.
template <typename IsBoolean>
std::vector<std::string> SplitFlagValues(const std::vector<std::string>& args, IsBoolean is_boolean) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
      break;
    }
    const size_t eq = a.find('=');
    if (a.size() >= 3 && a.compare(0, 2, "--") == 0 && eq != std::string::npos) {
      out.push_back(a.substr(0, eq));
      out.push_back(a.substr(eq + 1));
    } else {
      out.push_back(a);
      const bool takes_value = a.compare(0, 2, "--") == 0 && !is_boolean(a);
      if (takes_value && i + 1 < args.size()) out.push_back(args[++i]);
    }
  }
  return out;
}

// argv[1..argc-1], split.
inline std::vector<std::string> SplitFlagValues(int argc, char** argv) {
  return SplitFlagValues(std::vector<std::string>(argv + (argc > 0 ? 1 : 0), argv + argc));
}

}  // namespace kubicle
