#include "noderuntime/cli/args.h"

#include <charconv>

namespace kubicle::noderuntime::cli {

std::string Args::Get(const std::string& f, const std::string& def) const {
  auto it = values.find(f);
  return it == values.end() || it->second.empty() ? def : it->second.back();
}

const std::vector<std::string>& Args::All(const std::string& f) const {
  static const std::vector<std::string> kEmpty;
  auto it = values.find(f);
  return it == values.end() ? kEmpty : it->second;
}

Result<long long> Args::Int(const std::string& f, long long def, long long min,
                            long long max) const {
  if (!values.count(f)) return def;
  std::string s = Get(f);
  long long v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size() || v < min || v > max) {
    return Status::InvalidArgument(f + ": \"" + s + "\" is not an integer in [" +
                                   std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return v;
}

Result<Args> ParseArgs(const std::vector<std::string>& argv,
                       const std::set<std::string>& value_flags,
                       const std::set<std::string>& bool_flags) {
  Args a;
  for (size_t i = 0; i < argv.size(); ++i) {
    std::string s = argv[i];
    if (s == "--") {
      a.rest.assign(argv.begin() + static_cast<long>(i) + 1, argv.end());
      break;
    }
    if (s.size() < 2 || s[0] != '-') {
      a.positional.push_back(s);
      continue;
    }
    std::string inline_value;
    bool has_inline = false;
    if (size_t eq = s.find('='); eq != std::string::npos && s.rfind("--", 0) == 0) {
      inline_value = s.substr(eq + 1);
      s = s.substr(0, eq);
      has_inline = true;
    }
    if (value_flags.count(s)) {
      if (!has_inline && i + 1 >= argv.size()) return Status::InvalidArgument(s + " needs a value");
      a.values[s].push_back(has_inline ? inline_value : argv[++i]);
    } else if (bool_flags.count(s) && !has_inline) {
      a.bools.insert(s);
    } else {
      return Status::InvalidArgument("unknown flag \"" + s + "\"");
    }
  }
  return a;
}

Result<GlobalFlags> ParseGlobalFlags(const std::vector<std::string>& argv) {
  GlobalFlags g;
  size_t i = 0;
  for (; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "--help" || a == "-h" || a == "help") {
      g.help = true;
      continue;
    }
    std::string* target = nullptr;
    std::string name = a.substr(0, a.find('='));
    if (name == "--server") target = &g.server;
    if (name == "--token-file") target = &g.token_file;
    if (name == "--ca-file") target = &g.ca_file;
    if (!target) break;  // the command
    if (name.size() < a.size()) {
      *target = a.substr(name.size() + 1);
    } else if (i + 1 < argv.size()) {
      *target = argv[++i];
    } else {
      return Status::InvalidArgument(name + " needs a value");
    }
    if (target->empty()) return Status::InvalidArgument(name + " needs a value");
  }
  g.command = i;
  return g;
}

}  // namespace kubicle::noderuntime::cli
