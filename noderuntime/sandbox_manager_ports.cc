// Where a sandbox's network namespace is. Sandboxes get no namespace of
// their own on this branch yet (per-sandbox namespaces land separately and
// replace this file), so every sandbox reads as having no network and its
// port streams are refused with FailedPrecondition.
#include "noderuntime/sandbox_manager.h"
#include "noderuntime/sandbox_manager_internal.h"

namespace kubicle::noderuntime {

std::string SandboxManager::NetnsPathOf(const Sandbox&) const { return ""; }

}  // namespace kubicle::noderuntime
