#include "operator/context.h"

#include "kube/json_fields.h"

namespace kubicle::op {

std::optional<Json> ClientLister::Get(const kube::Resource& r, const std::string& key) {
  std::string ns, name;
  kube::SplitKey(key, &ns, &name);
  auto got = client_->Get(r, ns, name);
  if (!got.ok()) return std::nullopt;
  return *got;
}

std::vector<Json> ClientLister::List(const kube::Resource& r) {
  std::string ns = r.plural == kube::LeaseResource().plural ? lease_ns_ : "";
  auto list = client_->List(r, ns, {});
  std::vector<Json> out;
  if (list.ok()) {
    for (const Json& item : (*list)["items"]) out.push_back(item);
  }
  return out;
}

Result<bool> WriteStatusIfChanged(Context& ctx, const kube::Resource& r, const Json& obj,
                                  const Json& desired) {
  const Json& current = kube::At(obj, {"status"});
  Json patch = Json::object();
  for (const auto& [k, v] : desired.items()) {
    if (kube::At(current, {k}) != v) patch[k] = v;
  }
  if (patch.empty()) return false;
  Json body = {{"status", patch}};
  // Status computed from a stale copy (the informer behind our own last
  // write) must not land: with the copy's resourceVersion as precondition
  // the apiserver answers 409 and the key is reconciled again from the
  // newer copy, instead of e.g. keeping a condition's old transition time.
  const std::string rv = kube::At(obj, {"metadata", "resourceVersion"}).is_string()
                             ? kube::At(obj, {"metadata", "resourceVersion"}).get<std::string>()
                             : "";
  if (!rv.empty()) body["metadata"]["resourceVersion"] = rv;
  auto r2 = ctx.client->Patch(r, Namespace(obj), Name(obj), kube::PatchType::kMerge, body,
                              "status");
  if (!r2.ok()) return r2.status();
  return true;
}

Json GuardedMetaPatch(const ObjectMeta& meta, Json metadata) {
  metadata["resourceVersion"] = meta.resource_version;
  return Json{{"metadata", metadata}};
}

Json FinalizersWith(const ObjectMeta& meta, std::string_view finalizer) {
  Json finalizers = meta.finalizers;
  finalizers.push_back(std::string(finalizer));
  return finalizers;
}

Result<Json> AddFinalizer(const Context& ctx, const kube::Resource& r, const ObjectMeta& meta,
                          std::string_view finalizer) {
  return ctx.client->Patch(
      r, meta.ns, meta.name, kube::PatchType::kMerge,
      GuardedMetaPatch(meta, {{"finalizers", FinalizersWith(meta, finalizer)}}));
}

Status RemoveFinalizer(const Context& ctx, const kube::Resource& r, const ObjectMeta& meta,
                       std::string_view finalizer) {
  Json finalizers = Json::array();
  for (const std::string& f : meta.finalizers) {
    if (f != finalizer) finalizers.push_back(f);
  }
  auto patched = ctx.client->Patch(r, meta.ns, meta.name, kube::PatchType::kMerge,
                                   GuardedMetaPatch(meta, {{"finalizers", finalizers}}));
  if (!patched.ok() && !kube::IsNotFound(patched.status())) return patched.status();
  return Status::Ok();
}

}  // namespace kubicle::op
