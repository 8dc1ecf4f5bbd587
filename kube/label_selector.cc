#include "kube/label_selector.h"

#include <algorithm>
#include <cctype>

namespace kubicle::kube {
namespace {

std::string Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

// Splits on commas outside parentheses.
std::vector<std::string> SplitTerms(std::string_view text) {
  std::vector<std::string> out;
  int depth = 0;
  std::string cur;
  for (char c : text) {
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == ',' && depth == 0) {
      out.push_back(Trim(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(Trim(cur));
  return out;
}

bool ValidKey(const std::string& k) {
  if (k.empty() || k.size() > 317) return false;
  return std::all_of(k.begin(), k.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
           c == '/';
  });
}

}  // namespace

Result<LabelSelector> LabelSelector::Parse(std::string_view text) {
  LabelSelector sel;
  if (Trim(text).empty()) return sel;
  for (const std::string& term : SplitTerms(text)) {
    if (term.empty()) return Status::InvalidArgument("empty term in selector");
    Requirement r;
    size_t pos;
    if (term[0] == '!') {
      r = {Trim(term.substr(1)), Op::kNotExists, {}};
    } else if ((pos = term.find("!=")) != std::string::npos) {
      r = {Trim(term.substr(0, pos)), Op::kNotEq, {Trim(term.substr(pos + 2))}};
    } else if ((pos = term.find("==")) != std::string::npos) {
      r = {Trim(term.substr(0, pos)), Op::kEq, {Trim(term.substr(pos + 2))}};
    } else if ((pos = term.find('=')) != std::string::npos) {
      r = {Trim(term.substr(0, pos)), Op::kEq, {Trim(term.substr(pos + 1))}};
    } else if (size_t open = term.find('('); open != std::string::npos) {
      if (term.back() != ')') return Status::InvalidArgument("unclosed set in selector: " + term);
      std::string head = Trim(term.substr(0, open));
      size_t sp = head.find_last_of(" \t");
      if (sp == std::string::npos) return Status::InvalidArgument("bad set term: " + term);
      std::string op = Trim(head.substr(sp + 1));
      r.key = Trim(head.substr(0, sp));
      if (op == "in") {
        r.op = Op::kIn;
      } else if (op == "notin") {
        r.op = Op::kNotIn;
      } else {
        return Status::InvalidArgument("unknown set operator: " + op);
      }
      std::string inner = term.substr(open + 1, term.size() - open - 2);
      for (const std::string& v : SplitTerms(inner)) r.values.push_back(v);
    } else {
      r = {term, Op::kExists, {}};
    }
    if (!ValidKey(r.key)) return Status::InvalidArgument("bad label key in selector: " + term);
    sel.reqs_.push_back(std::move(r));
  }
  return sel;
}

bool LabelSelector::Matches(const std::map<std::string, std::string>& labels) const {
  for (const Requirement& r : reqs_) {
    auto it = labels.find(r.key);
    bool has = it != labels.end();
    auto in = [&] {
      return has && std::find(r.values.begin(), r.values.end(), it->second) != r.values.end();
    };
    switch (r.op) {
      case Op::kEq:
      case Op::kIn:
        if (!in()) return false;
        break;
      case Op::kNotEq:
      case Op::kNotIn:
        if (in()) return false;
        break;
      case Op::kExists:
        if (!has) return false;
        break;
      case Op::kNotExists:
        if (has) return false;
        break;
    }
  }
  return true;
}

bool LabelSelector::MatchesObject(const nlohmann::json& object) const {
  std::map<std::string, std::string> labels;
  const auto& md = object.value("metadata", nlohmann::json::object());
  if (md.contains("labels") && md["labels"].is_object()) {
    for (const auto& [k, v] : md["labels"].items()) {
      if (v.is_string()) labels[k] = v.get<std::string>();
    }
  }
  return Matches(labels);
}

std::string FormatEqualitySelector(const std::map<std::string, std::string>& labels) {
  std::string out;
  for (const auto& [k, v] : labels) {
    if (!out.empty()) out += ',';
    out += k + "=" + v;
  }
  return out;
}

}  // namespace kubicle::kube
