#include "noderuntime/oci/registry_auth.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "common/base64.h"
#include "common/file_io.h"

namespace kubicle::noderuntime::oci {
namespace {

constexpr size_t kMaxConfigFileBytes = 1 << 20;

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return out;
}

void SkipSpace(std::string_view s, size_t& i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
}

// "https://reg.example:5000/v1/" or "reg.example:5000" -> "reg.example:5000".
std::string HostOf(std::string_view key) {
  if (size_t p = key.find("://"); p != std::string_view::npos) key.remove_prefix(p + 3);
  return std::string(key.substr(0, key.find('/')));
}

}  // namespace

Result<Challenge> ParseChallenge(std::string_view h) {
  size_t i = 0;
  SkipSpace(h, i);
  size_t start = i;
  while (i < h.size() && h[i] != ' ') ++i;
  std::string scheme = Lower(h.substr(start, i - start));
  Challenge c;
  if (scheme == "basic") {
    c.scheme = Challenge::Scheme::kBasic;
  } else if (scheme == "bearer") {
    c.scheme = Challenge::Scheme::kBearer;
  } else {
    return Status::InvalidArgument("WWW-Authenticate: unsupported scheme \"" +
                                   scheme.substr(0, 50) + "\"");
  }
  std::map<std::string, std::string> params;
  while (true) {
    SkipSpace(h, i);
    if (i == h.size()) break;
    size_t eq = h.find('=', i);
    if (eq == std::string_view::npos)
      return Status::InvalidArgument("WWW-Authenticate: a parameter without '='");
    std::string key = Lower(h.substr(i, eq - i));
    while (!key.empty() && key.back() == ' ') key.pop_back();
    i = eq + 1;
    SkipSpace(h, i);
    std::string value;
    if (i < h.size() && h[i] == '"') {
      for (++i;; ++i) {
        if (i == h.size())
          return Status::InvalidArgument("WWW-Authenticate: an unterminated quoted value");
        if (h[i] == '"') break;
        if (h[i] == '\\' && i + 1 < h.size()) ++i;
        value += h[i];
      }
      ++i;
    } else {
      while (i < h.size() && h[i] != ',' && h[i] != ' ') value += h[i++];
    }
    if (key.empty()) return Status::InvalidArgument("WWW-Authenticate: an empty parameter name");
    params[key] = value;
    SkipSpace(h, i);
    if (i < h.size() && h[i] != ',')
      return Status::InvalidArgument("WWW-Authenticate: parameters not separated by ','");
    if (i < h.size()) ++i;
  }
  c.realm = params["realm"];
  c.service = params["service"];
  c.scope = params["scope"];
  if (c.scheme == Challenge::Scheme::kBearer && c.realm.empty())
    return Status::InvalidArgument("WWW-Authenticate: Bearer without a realm");
  return c;
}

Result<CredentialMap> ParseDockerConfig(std::string_view text) {
  using Json = nlohmann::json;
  if (text.size() > kMaxConfigFileBytes) return Status::InvalidArgument("docker config over 1 MiB");
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Status::InvalidArgument("docker config is not a JSON object");
  CredentialMap out;
  auto auths = j.find("auths");
  if (auths == j.end()) return out;
  if (!auths->is_object()) return Status::InvalidArgument("docker config: auths is not an object");
  for (const auto& [key, entry] : auths->items()) {
    const std::string host = HostOf(key);
    if (!entry.is_object())
      return Status::InvalidArgument("docker config: auths[\"" + host + "\"] is not an object");
    Credentials c;
    auto auth = entry.find("auth");
    if (auth != entry.end() && auth->is_string() && !auth->get_ref<const std::string&>().empty()) {
      Result<std::vector<uint8_t>> raw = Base64Decode(auth->get<std::string>());
      std::string plain = raw.ok() ? std::string(raw->begin(), raw->end()) : "";
      size_t colon = plain.find(':');
      if (!raw.ok() || colon == std::string::npos || colon == 0)
        return Status::InvalidArgument("docker config: auths[\"" + host +
                                       "\"].auth is not base64 of user:password");
      c.username = plain.substr(0, colon);
      c.password = plain.substr(colon + 1);
    } else {
      auto u = entry.find("username");
      auto p = entry.find("password");
      if (u == entry.end() || !u->is_string() || p == entry.end() || !p->is_string()) continue;
      c.username = u->get<std::string>();
      c.password = p->get<std::string>();
    }
    out[host] = std::move(c);
  }
  return out;
}

Result<CredentialMap> LoadDockerConfig(const std::string& path) {
  if (path.empty()) return CredentialMap{};
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, kMaxConfigFileBytes));
  Result<CredentialMap> m = ParseDockerConfig(text);
  if (!m.ok()) return m.status().WithContext(path);
  return m;
}

std::string BasicAuthorization(const Credentials& c) {
  return "Basic " + Base64Encode(c.username + ":" + c.password);
}

}  // namespace kubicle::noderuntime::oci
