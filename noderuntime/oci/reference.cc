#include "noderuntime/oci/reference.h"

#include <string>

namespace kubicle::noderuntime::oci {
namespace {

constexpr size_t kMaxNameLength = 255;
constexpr size_t kMaxTagLength = 128;

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool IsAlnum(char c) { return IsLowerAlnum(c) || (c >= 'A' && c <= 'Z'); }
bool IsWord(char c) { return IsAlnum(c) || c == '_'; }

// domain-component: [A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?
bool IsDomainComponent(std::string_view s) {
  if (s.empty() || !IsAlnum(s.front()) || !IsAlnum(s.back())) return false;
  for (char c : s) {
    if (!IsAlnum(c) && c != '-') return false;
  }
  return true;
}

// host[:port], host being dot-separated domain components; the port is 1-5
// digits. (Bracketed IPv6 literals are not accepted.)
bool IsDomain(std::string_view s) {
  size_t colon = s.find(':');
  std::string_view host = s.substr(0, colon);
  if (colon != std::string_view::npos) {
    std::string_view port = s.substr(colon + 1);
    if (port.empty() || port.size() > 5) return false;
    for (char c : port) {
      if (c < '0' || c > '9') return false;
    }
  }
  size_t start = 0;
  while (true) {
    size_t dot = host.find('.', start);
    if (!IsDomainComponent(host.substr(start, dot - start))) return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

// path-component: [a-z0-9]+ (separator [a-z0-9]+)*, separator being '.',
// '_', '__' or one or more '-'.
bool IsPathComponent(std::string_view s) {
  if (s.empty() || !IsLowerAlnum(s.front()) || !IsLowerAlnum(s.back())) return false;
  for (size_t i = 0; i < s.size();) {
    if (IsLowerAlnum(s[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < s.size() && !IsLowerAlnum(s[j])) ++j;
    std::string_view sep = s.substr(i, j - i);
    bool dashes = sep.find_first_not_of('-') == std::string_view::npos;
    if (!(sep == "." || sep == "_" || sep == "__" || dashes)) return false;
    i = j;
  }
  return true;
}

bool IsTag(std::string_view s) {
  if (s.empty() || s.size() > kMaxTagLength || !IsWord(s.front())) return false;
  for (char c : s) {
    if (!IsWord(c) && c != '.' && c != '-') return false;
  }
  return true;
}

Status Bad(std::string_view text, std::string why) {
  return Status::InvalidArgument("image reference \"" + std::string(text.substr(0, 300)) +
                                 "\": " + why);
}

}  // namespace

bool IsSha256Digest(std::string_view d) {
  constexpr std::string_view kPrefix = "sha256:";
  if (d.size() != kPrefix.size() + 64 || d.substr(0, kPrefix.size()) != kPrefix) return false;
  for (char c : d.substr(kPrefix.size())) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string ImageReference::ToString() const {
  std::string s = registry + "/" + repository;
  if (!tag.empty()) s += ":" + tag;
  if (!digest.empty()) s += "@" + digest;
  return s;
}

Result<ImageReference> ParseImageReference(std::string_view text) {
  if (text.empty()) return Bad(text, "empty");
  if (text.size() > kMaxNameLength + 1 + kMaxTagLength + 1 + 71) return Bad(text, "too long");
  ImageReference ref;
  std::string_view rest = text;
  if (size_t at = rest.find('@'); at != std::string_view::npos) {
    ref.digest = std::string(rest.substr(at + 1));
    if (!IsSha256Digest(ref.digest))
      return Bad(text, "the digest is not sha256:<64 lowercase hex>");
    rest = rest.substr(0, at);
  }
  // A ':' after the last '/' starts the tag; one before it is the host's port.
  size_t slash = rest.find('/');
  if (slash == std::string_view::npos) {
    return Bad(text, "no registry host: name it, as in \"registry.example:5000/" +
                         std::string(rest.substr(0, 100)) + "\"");
  }
  if (size_t colon = rest.rfind(':'); colon != std::string_view::npos && colon > rest.rfind('/')) {
    ref.tag = std::string(rest.substr(colon + 1));
    if (!IsTag(ref.tag)) return Bad(text, "the tag is not [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}");
    rest = rest.substr(0, colon);
  }
  if (rest.size() > kMaxNameLength) return Bad(text, "the name is over 255 characters");
  std::string_view host = rest.substr(0, slash);
  bool is_host = host.find_first_of(".:") != std::string_view::npos || host == "localhost";
  if (!is_host) {
    return Bad(text, "no registry host (\"" + std::string(host.substr(0, 100)) +
                         "\" is a path): name it, as in \"registry.example:5000/" +
                         std::string(rest.substr(0, 100)) + "\"");
  }
  if (!IsDomain(host)) return Bad(text, "the registry host is not host[:port]");
  ref.registry = std::string(host);
  std::string_view path = rest.substr(slash + 1);
  size_t start = 0;
  while (true) {
    size_t next = path.find('/', start);
    if (!IsPathComponent(path.substr(start, next - start))) {
      return Bad(text,
                 "a path component is not lowercase [a-z0-9] joined by '.', '_', '__' or '-'");
    }
    if (next == std::string_view::npos) break;
    start = next + 1;
  }
  ref.repository = std::string(path);
  if (ref.tag.empty() && ref.digest.empty()) ref.tag = "latest";
  return ref;
}

}  // namespace kubicle::noderuntime::oci
