#include "noderuntime/network/address_plan.h"

namespace kubicle::noderuntime::network {

Result<AddressPlan> AddressPlan::For(Cidr cidr) {
  if (cidr.prefix < 8 || cidr.prefix > 28)
    return Status::InvalidArgument("sandbox network " + cidr.ToString() +
                                   ": the prefix length must be 8..28 (4 or more /30 slots)");
  return AddressPlan(cidr);
}

}  // namespace kubicle::noderuntime::network
