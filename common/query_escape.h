// Percent-encoding of one URL query value, for every client here that builds
// a request target by hand (the Kubernetes API client, the node API client).
#pragma once

#include <string>
#include <string_view>

namespace kubicle {

// RFC 3986's unreserved characters (ALPHA, DIGIT, "-", ".", "_", "~") stay as
// they are, and so does every character of `keep` (a query may hold "/" as
// it is); every other byte becomes "%XX" in upper-case hex. Character classes
// are ASCII's whatever the locale.
std::string QueryEscape(std::string_view s, std::string_view keep = {});

}  // namespace kubicle
