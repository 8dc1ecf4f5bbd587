#include "snapshot/meta.h"

#include <nlohmann/json.hpp>

namespace kubicle::snapshot {
namespace {

using nlohmann::json;

constexpr char kFormatName[] = "kubicle-snapshot";

json DigestJson(const FileDigest& d) { return {{"size", d.size}, {"sha256", d.sha256}}; }

FileDigest DigestFrom(const json& j) {
  return {j.at("size").get<uint64_t>(), j.at("sha256").get<std::string>()};
}

}  // namespace

std::string MetaToJson(const SnapshotMeta& m) {
  json j = {
      {"format", kFormatName},
      {"version", std::to_string(kMetaFormatMajor) + "." + std::to_string(kMetaFormatMinor)},
      {"state_format", std::to_string(kStateFormatMajor) + "." + std::to_string(kStateFormatMinor)},
      {"template", m.template_name},
      {"kernel", m.kernel},
      {"created_at", m.created_at},
      {"mem_bytes", m.mem_bytes},
      {"vcpus", m.vcpus},
      {"files",
       {{"state", DigestJson(m.state)},
        {"memory", {{"size", m.memory.size},
                    {"sha256_1m_chunks", m.memory.sha256},
                    {"data_bytes", m.memory_data_bytes}}},
        {"disk", DigestJson(m.disk)}}},
  };
  return j.dump(2) + "\n";
}

Result<SnapshotMeta> ParseMeta(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::DataLoss("meta.json is not a JSON object");
  try {
    if (j.at("format").get<std::string>() != kFormatName) {
      return Status::DataLoss("meta.json format is not \"kubicle-snapshot\"");
    }
    std::string version = j.at("version").get<std::string>();
    if (version.substr(0, version.find('.')) != std::to_string(kMetaFormatMajor)) {
      return Status::FailedPrecondition("meta.json version " + version +
                                        " is not supported (this build reads " +
                                        std::to_string(kMetaFormatMajor) + ".x)");
    }
    SnapshotMeta m;
    m.template_name = j.at("template").get<std::string>();
    m.kernel = j.at("kernel").get<std::string>();
    m.created_at = j.at("created_at").get<std::string>();
    m.mem_bytes = j.at("mem_bytes").get<uint64_t>();
    m.vcpus = j.at("vcpus").get<uint32_t>();
    const json& files = j.at("files");
    m.state = DigestFrom(files.at("state"));
    m.disk = DigestFrom(files.at("disk"));
    const json& mem = files.at("memory");
    m.memory.size = mem.at("size").get<uint64_t>();
    m.memory.sha256 = mem.at("sha256_1m_chunks").get<std::string>();
    m.memory_data_bytes = mem.at("data_bytes").get<uint64_t>();
    return m;
  } catch (const json::exception& e) {
    return Status::DataLoss(std::string("meta.json: ") + e.what());
  }
}

std::string DiskIndexToJson(const MachineState& state) {
  json disks = json::array();
  for (const VirtioDeviceState& d : state.virtio) {
    if (d.kind != DeviceKind::kVirtioBlock) continue;
    json layers = json::array();
    for (const LayerRef& l : d.block.chain.layers) {
      layers.push_back({{"path", l.path}, {"id", LayerIdHex(l.id)}});
    }
    disks.push_back({{"slot", d.slot},
                     {"serial", d.block.serial},
                     {"read_only", d.block.read_only},
                     {"base", d.block.chain.base_path},
                     {"size", d.block.chain.size},
                     {"layers", layers}});
  }
  return json{{"version", 1}, {"disks", disks}}.dump(2) + "\n";
}

Status CheckDiskIndex(const std::string& text, const MachineState& state) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return Status::DataLoss("disk index is not valid JSON");
  if (j != json::parse(DiskIndexToJson(state))) {
    return Status::DataLoss("disk index does not match the block devices in state");
  }
  return Status::Ok();
}

}  // namespace kubicle::snapshot
