#include "noderuntime/api/types.h"

namespace kubicle::noderuntime {

const char* TemplateStateName(TemplateState s) {
  switch (s) {
    case TemplateState::kBaking: return "Baking";
    case TemplateState::kReady: return "Ready";
    case TemplateState::kFailed: return "Failed";
  }
  return "Unknown";
}

const char* SandboxStateName(SandboxState s) {
  switch (s) {
    case SandboxState::kCreating: return "Creating";
    case SandboxState::kRunning: return "Running";
    case SandboxState::kFailed: return "Failed";
    case SandboxState::kDeleting: return "Deleting";
    case SandboxState::kSuspended: return "Suspended";
  }
  return "Unknown";
}

const char* WorkspaceStateName(WorkspaceState s) {
  switch (s) {
    case WorkspaceState::kReady: return "Ready";
    case WorkspaceState::kFailed: return "Failed";
  }
  return "Unknown";
}

}  // namespace kubicle::noderuntime
