-- Argo CD health check for kubicle.dev Workspace: the argocd-cm key
-- resource.customizations.health.kubicle.dev_Workspace (docs/helm.md, "Argo CD
-- health"). It reads the conditions the operator writes for kstatus too
-- (docs/api.md, "Health"): Stalled True is Degraded, Ready True is Healthy, and
-- anything else, a status for an older generation included, is Progressing.
-- Argo CD runs it without the string library: plain Lua and tables only.
local hs = {}

local function condition(kind)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function say(status, c, fallback)
  hs.status = status
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    hs.message = c.message
  else
    hs.message = fallback
  end
  return hs
end

if obj.status == nil or obj.status.observedGeneration == nil then
  return say("Progressing", nil, "Waiting for the operator")
end
local generation = obj.metadata.generation
if generation ~= nil and obj.status.observedGeneration < generation then
  return say("Progressing", nil,
             "Waiting for the operator to observe generation " .. generation)
end
if obj.metadata.deletionTimestamp ~= nil then
  return say("Progressing", nil, "Pending deletion")
end

local stalled = condition("Stalled")
if stalled ~= nil and stalled.status == "True" then
  return say("Degraded", stalled, "Workspace failed")
end
local reconciling = condition("Reconciling")
if reconciling ~= nil and reconciling.status == "True" then
  return say("Progressing", reconciling, "Workspace is progressing")
end
local ready = condition("Ready")
if ready ~= nil and ready.status == "True" then
  return say("Healthy", ready, "Workspace is ready")
end
return say("Progressing", ready, "Waiting for Workspace to be ready")
