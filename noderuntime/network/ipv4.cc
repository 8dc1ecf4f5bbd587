#include "noderuntime/network/ipv4.h"

#include <algorithm>

namespace kubicle::noderuntime::network {
namespace {

// A decimal number of 1..`max_digits` digits without a leading zero, <= max.
bool ParseDecimal(std::string_view s, size_t max_digits, uint32_t max, uint32_t* out) {
  if (s.empty() || s.size() > max_digits || (s.size() > 1 && s[0] == '0')) return false;
  uint32_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + uint32_t(c - '0');
  }
  if (v > max) return false;
  *out = v;
  return true;
}

std::string Quoted(std::string_view text) {
  return "'" + std::string(text.substr(0, 64)) + (text.size() > 64 ? "...'" : "'");
}

}  // namespace

std::string Ipv4::ToString() const {
  return std::to_string(value >> 24) + "." + std::to_string((value >> 16) & 255) + "." +
         std::to_string((value >> 8) & 255) + "." + std::to_string(value & 255);
}

std::string Cidr::ToString() const { return base.ToString() + "/" + std::to_string(prefix); }

bool Cidr::Overlaps(const Cidr& o) const {
  const int p = std::min(prefix, o.prefix);  // the wider block decides
  const uint32_t m = p == 0 ? 0 : ~uint32_t{0} << (32 - p);
  return (base.value & m) == (o.base.value & m);
}

Result<Ipv4> ParseIpv4(std::string_view text) {
  Ipv4 a;
  std::string_view rest = text;
  for (int i = 0; i < 4; ++i) {
    const size_t dot = i < 3 ? rest.find('.') : rest.size();
    uint32_t octet;
    if (dot == std::string_view::npos || !ParseDecimal(rest.substr(0, dot), 3, 255, &octet))
      return Status::InvalidArgument(Quoted(text) + " is not an IPv4 address (a.b.c.d)");
    a.value = (a.value << 8) | octet;
    rest = i < 3 ? rest.substr(dot + 1) : std::string_view();
  }
  return a;
}

Result<Cidr> ParseCidr(std::string_view text, bool allow_bare) {
  const size_t slash = text.find('/');
  if (slash == std::string_view::npos && !allow_bare)
    return Status::InvalidArgument(Quoted(text) + " is not a CIDR block (a.b.c.d/len)");
  Cidr c;
  ASSIGN_OR_RETURN(c.base, ParseIpv4(text.substr(0, slash)));
  if (slash != std::string_view::npos) {
    uint32_t len;
    if (!ParseDecimal(text.substr(slash + 1), 2, 32, &len))
      return Status::InvalidArgument(Quoted(text) + ": the prefix length must be 0..32");
    c.prefix = int(len);
  }
  if ((c.base.value & ~c.mask()) != 0)
    return Status::InvalidArgument(Quoted(text) + " has host bits set (did you mean " +
                                   Cidr{Ipv4{c.base.value & c.mask()}, c.prefix}.ToString() + "?)");
  return c;
}

}  // namespace kubicle::noderuntime::network
