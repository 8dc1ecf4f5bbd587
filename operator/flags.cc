#include "operator/flags.h"

#include <charconv>
#include <initializer_list>

namespace kubicle::op {

namespace {

// Integer flags and their ranges: checked up front so a bad value is a usage
// error (and fails --check-flags) rather than std::stol throwing later.
struct IntFlag {
  const char* name;
  long min, max;
};
constexpr IntFlag kIntFlags[] = {
    {"lease-duration-seconds", 1, 3600}, {"renew-deadline-seconds", 1, 3600},
    {"retry-period-seconds", 1, 3600},   {"default-ttl-seconds", 0, 10L * 365 * 86400},
    {"node-gone-grace-seconds", 0, 30L * 86400}, {"workers", 1, 1024},
    {"metrics-port", 0, 65535}};

Status CheckChoice(const OperatorFlags& f, const std::string& k,
                   std::initializer_list<const char*> ok) {
  std::string names;
  for (const char* c : ok) {
    if (f.Get(k) == c) return Status::Ok();
    names += names.empty() ? c : std::string(", ") + c;
  }
  return Status::InvalidArgument("--" + k + ": \"" + f.Get(k) + "\" is not one of " + names);
}

Status Validate(const OperatorFlags& f) {
  for (const IntFlag& i : kIntFlags) {
    const std::string& text = f.Get(i.name);
    long n = 0;
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (text.empty() || ec != std::errc() || p != text.data() + text.size() || n < i.min ||
        n > i.max) {
      return Status::InvalidArgument("--" + std::string(i.name) + ": \"" + text +
                                     "\" is not a number in [" + std::to_string(i.min) + ", " +
                                     std::to_string(i.max) + "]");
    }
  }
  RETURN_IF_ERROR(CheckChoice(f, "leader-elect", {"true", "false"}));
  RETURN_IF_ERROR(CheckChoice(f, "log-format", {"text", "json"}));
  RETURN_IF_ERROR(CheckChoice(f, "log-level", {"debug", "info", "warn", "error"}));
  // client-go's rule: the leader must give up (renew deadline) before its
  // Lease can be taken, and retry more often than that.
  if (f.Get("leader-elect") == "true" &&
      !(f.Int("lease-duration-seconds") > f.Int("renew-deadline-seconds") &&
        f.Int("renew-deadline-seconds") > f.Int("retry-period-seconds"))) {
    return Status::InvalidArgument(
        "leader election needs --lease-duration-seconds > --renew-deadline-seconds > "
        "--retry-period-seconds");
  }
  for (const char* k : {"leader-election-namespace", "leader-election-lease",
                        "node-lease-namespace", "metrics-address"}) {
    if (f.Get(k).empty()) return Status::InvalidArgument("--" + std::string(k) + " needs a value");
  }
  return Status::Ok();
}

}  // namespace

OperatorFlags DefaultOperatorFlags() {
  OperatorFlags f;
  f.values = {{"kubeconfig", ""},
              {"context", ""},
              {"leader-elect", "true"},
              {"leader-election-namespace", "kubicle-system"},
              {"leader-election-lease", "kubicle-operator-leader"},
              {"lease-duration-seconds", "15"},
              {"renew-deadline-seconds", "10"},
              {"retry-period-seconds", "2"},
              {"node-lease-namespace", "kubicle-node-lease"},
              {"default-ttl-seconds", "3600"},
              {"node-gone-grace-seconds", "120"},
              {"workers", "4"},
              {"metrics-port", "9090"},
              {"metrics-address", "0.0.0.0"},
              {"log-format", "text"},
              {"log-level", "info"},
              {"identity", ""}};
  return f;
}

Result<OperatorFlags> ParseOperatorFlags(const std::vector<std::string>& args) {
  OperatorFlags f = DefaultOperatorFlags();
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      f.help = true;
      continue;
    }
    if (a == "--check-flags") {
      f.check = true;
      continue;
    }
    if (!a.starts_with("--") || a.size() == 2) {
      return Status::InvalidArgument("unexpected argument \"" + a + "\" (flags are --name=value)");
    }
    const size_t eq = a.find('=');
    const std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    if (!f.values.count(name)) return Status::InvalidArgument("unknown flag --" + name);
    if (eq != std::string::npos) {
      f.values[name] = a.substr(eq + 1);
      continue;
    }
    const bool has_next = i + 1 < args.size() && !args[i + 1].starts_with("--");
    if (name == "leader-elect") {
      // A boolean: alone it means true; a following true/false is its value.
      const bool next_is_bool = has_next && (args[i + 1] == "true" || args[i + 1] == "false");
      f.values[name] = next_is_bool ? args[++i] : "true";
      continue;
    }
    if (!has_next) return Status::InvalidArgument("--" + name + " needs a value");
    f.values[name] = args[++i];
  }
  if (f.help) return f;  // the usage answers it, whatever else is wrong
  RETURN_IF_ERROR(Validate(f));
  return f;
}

std::string OperatorUsage() {
  std::string out =
      "usage: kubicle-operator [--flag=value | --flag value ...]; flags and defaults:\n";
  for (const auto& [k, v] : DefaultOperatorFlags().values) out += "  --" + k + "=" + v + "\n";
  out +=
      "  --check-flags  (validate the flags, print \"kubicle-operator: flags ok\", exit 0)\n"
      "  --help\n";
  return out;
}

}  // namespace kubicle::op
