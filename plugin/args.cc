#include "plugin/args.h"

#include <algorithm>
#include <cctype>

namespace kubicle::plugin {

namespace {

struct FlagSpec {
  std::string name;   // long name
  char short_name;    // 0: none
  bool boolean;
  bool repeated;
};

const std::vector<FlagSpec>& GlobalSpecs() {
  static const std::vector<FlagSpec> specs = {
      {"kubeconfig", 0, false, false},
      {"context", 0, false, false},
      {"namespace", 'n', false, false},
      {"node-lease-namespace", 0, false, false},
  };
  return specs;
}

const std::map<std::string, std::vector<FlagSpec>>& VerbSpecs() {
  static const std::map<std::string, std::vector<FlagSpec>> specs = {
      {"exec",
       {{"stdin", 'i', true, false},
        {"tty", 't', true, false},
        {"timeout", 0, false, false},
        {"env", 'e', false, true},
        {"cwd", 0, false, false}}},
      {"run",
       {{"stdin", 'i', true, false},
        {"timeout", 0, false, false},
        {"workspace", 0, false, false},
        {"env", 'e', false, true},
        {"cwd", 0, false, false}}},
      {"cp", {}},
      {"fork",
       {{"replicas", 0, false, false},
        {"wait", 0, true, false},
        {"timeout", 0, false, false},
        {"name", 0, false, false},
        {"labels", 'l', false, true}}},
      {"sweep", {{"run", 0, false, false}, {"timeout", 0, false, false}}},
      {"suspend", {{"wait", 0, true, false}, {"timeout", 0, false, false}}},
      {"resume", {{"wait", 0, true, false}, {"timeout", 0, false, false}}},
      {"logs", {{"follow", 'f', true, false}}},
      {"wait", {{"for", 0, false, false}, {"timeout", 0, false, false}}},
      {"top", {{"selector", 'l', false, false}, {"interval", 0, false, false}}},
      {"port-forward", {{"address", 0, false, false}}},
  };
  return specs;
}

const FlagSpec* Find(const std::vector<FlagSpec>& specs, const std::string& name, char short_name) {
  for (const FlagSpec& s : specs) {
    if ((!name.empty() && s.name == name) || (short_name != 0 && s.short_name == short_name)) {
      return &s;
    }
  }
  return nullptr;
}

void SetGlobal(GlobalFlags& g, const std::string& name, const std::string& v) {
  if (name == "kubeconfig") g.kubeconfig = v;
  if (name == "context") g.context = v;
  if (name == "namespace") g.ns = v;
  if (name == "node-lease-namespace") g.node_lease_namespace = v;
}

}  // namespace

std::string Invocation::Get(const std::string& name, const std::string& def) const {
  auto it = flags.find(name);
  return it == flags.end() || it->second.empty() ? def : it->second.back();
}

const std::vector<std::string>& Invocation::All(const std::string& name) const {
  static const std::vector<std::string> none;
  auto it = flags.find(name);
  return it == flags.end() ? none : it->second;
}

const std::vector<std::string>& Verbs() {
  static const std::vector<std::string> verbs = {"exec", "run",  "cp",   "fork",         "sweep",
                                                 "logs", "wait", "top",  "port-forward", "suspend",
                                                 "resume"};
  return verbs;
}

Result<Invocation> ParseArgs(const std::vector<std::string>& args) {
  Invocation inv;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      inv.dash_dash = true;
      inv.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
      break;
    }
    if (a == "-h" || a == "--help" || (a == "help" && inv.verb.empty())) {
      inv.help = true;
      continue;
    }
    if (a.size() < 2 || a[0] != '-') {  // "-" alone is an operand (cp's stdin/stdout)
      if (inv.verb.empty()) {
        if (std::find(Verbs().begin(), Verbs().end(), a) == Verbs().end()) {
          if (inv.help) continue;  // `help X` of an unknown X: the usage
          return Status::InvalidArgument("unknown command \"" + a + "\"");
        }
        inv.verb = a;
      } else {
        inv.positional.push_back(a);
      }
      continue;
    }
    // A flag: --name[=v], -x[=v], -xVALUE.
    std::string name, value;
    char short_name = 0;
    bool has_value = false;
    if (a[1] == '-') {
      size_t eq = a.find('=');
      name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
      if (eq != std::string::npos) {
        value = a.substr(eq + 1);
        has_value = true;
      }
    } else {
      short_name = a[1];
      if (a.size() > 2) {
        value = a.substr(a[2] == '=' ? 3 : 2);
        has_value = true;
      }
    }
    const FlagSpec* spec = Find(GlobalSpecs(), name, short_name);
    bool global = spec != nullptr;
    if (!spec && !inv.verb.empty()) spec = Find(VerbSpecs().at(inv.verb), name, short_name);
    if (!spec) {
      if (inv.verb.empty()) {
        return Status::InvalidArgument("unknown flag " + a +
                                       (Verbs().empty() ? "" : " (a command's flags come after it)"));
      }
      return Status::InvalidArgument("unknown flag " + a + " for \"" + inv.verb + "\"");
    }
    if (spec->boolean && short_name != 0 && has_value && a[2] != '=') {
      // -it: several short booleans in one word.
      for (char c : a.substr(1)) {
        const FlagSpec* b = inv.verb.empty() ? nullptr : Find(VerbSpecs().at(inv.verb), "", c);
        if (!b || !b->boolean) {
          return Status::InvalidArgument("flag " + a + ": -" + std::string(1, c) +
                                         " is not a boolean flag of \"" + inv.verb + "\"");
        }
        inv.flags[b->name] = {"true"};
      }
      continue;
    }
    if (spec->boolean) {
      if (has_value && value != "true" && value != "false") {
        // -if: short booleans do not combine; say which letter is wrong.
        return Status::InvalidArgument("flag " + a + ": a boolean takes =true or =false");
      }
      if (!has_value) value = "true";
    } else if (!has_value) {
      if (i + 1 >= args.size() || (args[i + 1].size() > 1 && args[i + 1].rfind("--", 0) == 0)) {
        return Status::InvalidArgument("flag " + a + " needs a value");
      }
      value = args[++i];
    }
    if (global) {
      SetGlobal(inv.global, spec->name, value);
    } else if (spec->repeated) {
      inv.flags[spec->name].push_back(value);
    } else {
      inv.flags[spec->name] = {value};
    }
  }
  if (!inv.help && inv.verb.empty()) return Status::InvalidArgument("no command given");
  return inv;
}

Result<std::chrono::milliseconds> ParseDuration(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  std::string unit = text.substr(digits);
  if (digits == 0 || digits > 9) {
    return Status::InvalidArgument("duration \"" + text + "\" is not like 30s, 2m, 1h or 500ms");
  }
  const long long n = std::stoll(text.substr(0, digits));
  long long ms;
  if (unit.empty() || unit == "s") ms = n * 1000;
  else if (unit == "ms") ms = n;
  else if (unit == "m") ms = n * 60000;
  else if (unit == "h") ms = n * 3600000;
  else return Status::InvalidArgument("duration \"" + text + "\": unknown unit \"" + unit + "\"");
  if (ms <= 0 || ms > 24LL * 3600000) {
    return Status::InvalidArgument("duration \"" + text + "\" must be above 0 and at most 24h");
  }
  return std::chrono::milliseconds(ms);
}

CpOperand ParseCpOperand(const std::string& arg) {
  size_t colon = arg.find(':');
  if (colon == std::string::npos || colon == 0) return {"", arg};
  std::string before = arg.substr(0, colon);
  for (std::string_view kind : {"workspace/", "ws/"}) {
    if (before.size() > kind.size() && before.compare(0, kind.size(), kind) == 0 &&
        before.find('/', kind.size()) == std::string::npos)
      return {before.substr(kind.size()), arg.substr(colon + 1), true};
  }
  if (before.find('/') != std::string::npos || before == "." || before == "..") return {"", arg};
  return {before, arg.substr(colon + 1)};
}

}  // namespace kubicle::plugin
