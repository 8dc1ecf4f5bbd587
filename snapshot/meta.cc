#include "snapshot/meta.h"

#include <nlohmann/json.hpp>

#include "common/hex.h"
#include "common/json_number.h"

namespace kubicle::snapshot {
namespace {

using nlohmann::json;

constexpr char kFormatName[] = "kubicle-snapshot";

json DigestJson(const FileDigest& d) { return {{"size", d.size}, {"sha256", d.sha256}}; }

FileDigest DigestFrom(const json& j) {
  return {IntegerFromJson<uint64_t>(j.at("size")), j.at("sha256").get<std::string>()};
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
    m.mem_bytes = IntegerFromJson<uint64_t>(j.at("mem_bytes"));
    m.vcpus = IntegerFromJson<uint32_t>(j.at("vcpus"));
    const json& files = j.at("files");
    m.state = DigestFrom(files.at("state"));
    m.disk = DigestFrom(files.at("disk"));
    const json& mem = files.at("memory");
    m.memory.size = IntegerFromJson<uint64_t>(mem.at("size"));
    m.memory.sha256 = mem.at("sha256_1m_chunks").get<std::string>();
    m.memory_data_bytes = IntegerFromJson<uint64_t>(mem.at("data_bytes"));
    return m;
  } catch (const json::exception& e) {
    return Status::DataLoss(std::string("meta.json: ") + e.what());
  }
}

std::string DiskIndexToJson(const std::vector<DiskIndexEntry>& disks) {
  json out = json::array();
  for (const DiskIndexEntry& d : disks) {
    json layers = json::array();
    for (const LayerRef& l : d.chain.layers)
      layers.push_back({{"path", l.path}, {"id", LayerIdHex(l.id)}});
    out.push_back({{"slot", d.slot},
                   {"serial", d.serial},
                   {"read_only", d.read_only},
                   {"base", d.chain.base_path},
                   {"size", d.chain.size},
                   {"layers", layers}});
  }
  return json{{"version", 1}, {"disks", out}}.dump(2) + "\n";
}

Result<std::vector<DiskIndexEntry>> ParseDiskIndex(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Status::DataLoss("disk index is not a JSON object");
  try {
    if (IntegerFromJson<int>(j.at("version")) != 1)
      return Status::FailedPrecondition("disk index version " + j.at("version").dump() +
                                        " is not supported (this build reads 1)");
    std::vector<DiskIndexEntry> out;
    for (const json& d : j.at("disks")) {
      DiskIndexEntry e;
      e.slot = IntegerFromJson<uint32_t>(d.at("slot"));
      e.serial = d.at("serial").get<std::string>();
      e.read_only = d.at("read_only").get<bool>();
      e.chain.base_path = d.at("base").get<std::string>();
      e.chain.size = IntegerFromJson<uint64_t>(d.at("size"));
      for (const json& l : d.at("layers")) {
        LayerRef ref;
        ref.path = l.at("path").get<std::string>();
        if (!HexDecode(l.at("id").get<std::string>(), ref.id))
          return Status::DataLoss("disk index: layer id is not 32 lower-case hex digits");
        e.chain.layers.push_back(std::move(ref));
      }
      for (const DiskIndexEntry& other : out)
        if (other.slot == e.slot)
          return Status::DataLoss("disk index: two disks in slot " + std::to_string(e.slot));
      out.push_back(std::move(e));
    }
    return out;
  } catch (const json::exception& e) {
    return Status::DataLoss(std::string("disk index: ") + e.what());
  }
}

}  // namespace kubicle::snapshot
