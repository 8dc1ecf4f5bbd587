// Registry authentication's pure parts: the WWW-Authenticate challenge a
// registry answers 401 with, and the credentials file docker and kubelet
// write (config.json). Both inputs are hostile or hand-written; nothing here
// throws.
//
// Contracts:
// - ParseChallenge takes one WWW-Authenticate header value: a scheme
//   ("Bearer" or "Basic", any case) and auth-params key=value or
//   key="quoted" separated by commas; an unknown scheme or a malformed
//   parameter list is InvalidArgument. Bearer needs a realm.
// - ParseDockerConfig reads {"auths": {"<host>": {"auth": base64("user:pass")}
//   or {"username": ..., "password": ...}}}; keys may be bare hosts or
//   URLs ("https://host/v1/"), matched by host[:port]. A file over 1 MiB or
//   an entry whose auth does not decode to "user:pass" is InvalidArgument.
//   Other fields (credsStore, credHelpers) are ignored: helpers are
//   programs, and the node runs none.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace kubicle::noderuntime::oci {

struct Challenge {
  enum class Scheme { kBasic, kBearer } scheme = Scheme::kBasic;
  std::string realm, service, scope;
};

[[nodiscard]] Result<Challenge> ParseChallenge(std::string_view header);

struct Credentials {
  std::string username, password;
  bool operator==(const Credentials&) const = default;
};

// Registry host[:port] -> its credentials.
using CredentialMap = std::map<std::string, Credentials>;

[[nodiscard]] Result<CredentialMap> ParseDockerConfig(std::string_view json);
// Reads the file (at most 1 MiB) and parses it; an empty path is no
// credentials at all.
[[nodiscard]] Result<CredentialMap> LoadDockerConfig(const std::string& path);

// "Basic <base64(user:pass)>"
std::string BasicAuthorization(const Credentials& c);

}  // namespace kubicle::noderuntime::oci
