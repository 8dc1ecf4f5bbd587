// The node agent reads Kubernetes objects with kube/json_fields.h's
// never-throwing readers, by their short names.
#pragma once

#include "kube/json_fields.h"

namespace kubicle::noderuntime::nodeagent {

using kube::At;
using kube::Bounded;
using kube::IntAt;
using kube::Json;
using kube::NumAt;
using kube::StrAt;

}  // namespace kubicle::noderuntime::nodeagent
