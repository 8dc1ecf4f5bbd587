#include "guest/protocol/tlv.h"

#include <cstdio>
#include <cstring>

namespace kubicle::guest::protocol {

std::string TagName(Tag tag) {
  switch (tag) {
    case Tag::kMinVersion: return "min_version";
    case Tag::kMaxVersion: return "max_version";
    case Tag::kVersion: return "version";
    case Tag::kName: return "name";
    case Tag::kSoftwareVersion: return "software_version";
    case Tag::kCapability: return "capability";
    case Tag::kMaxPayload: return "max_payload";
    case Tag::kErrorCode: return "error_code";
    case Tag::kErrorMessage: return "error_message";
    case Tag::kData: return "data";
    case Tag::kArgv: return "argv";
    case Tag::kEnv: return "env";
    case Tag::kPath: return "path";
    case Tag::kOffset: return "offset";
    case Tag::kExecId: return "exec_id";
    case Tag::kSignal: return "signal";
    case Tag::kSeed: return "seed";
    case Tag::kSize: return "size";
    case Tag::kChecksum: return "checksum";
    case Tag::kLength: return "length";
    case Tag::kStream: return "stream";
    case Tag::kEntry: return "entry";
    case Tag::kEntryName: return "entry_name";
    case Tag::kFileType: return "file_type";
    case Tag::kMode: return "mode";
    case Tag::kHostname: return "hostname";
    case Tag::kEntropySeed: return "entropy_seed";
    case Tag::kDisk: return "disk";
    case Tag::kDiskIndex: return "disk_index";
    case Tag::kSector: return "sector";
    case Tag::kSectorCount: return "sector_count";
    case Tag::kCapacitySectors: return "capacity_sectors";
    case Tag::kReadOnly: return "read_only";
    case Tag::kDiskId: return "disk_id";
    case Tag::kFlush: return "flush";
    default: break;
  }
  char buf[16];
  std::snprintf(buf, sizeof(buf), "tag 0x%04x", unsigned(tag));
  return buf;
}

namespace {
void AppendRaw(std::vector<uint8_t>& buf, Tag tag, const void* data, size_t len) {
  const size_t at = buf.size();
  buf.resize(at + kTlvHeaderSize + len);
  StoreLe16(buf.data() + at, uint16_t(tag));
  StoreLe32(buf.data() + at + 2, uint32_t(len));
  if (len > 0) std::memcpy(buf.data() + at + kTlvHeaderSize, data, len);
}
}  // namespace

TlvBuilder& TlvBuilder::U8(Tag tag, uint8_t v) {
  AppendRaw(buf_, tag, &v, 1);
  return *this;
}
TlvBuilder& TlvBuilder::U16(Tag tag, uint16_t v) {
  uint8_t b[2];
  StoreLe16(b, v);
  AppendRaw(buf_, tag, b, 2);
  return *this;
}
TlvBuilder& TlvBuilder::U32(Tag tag, uint32_t v) {
  uint8_t b[4];
  StoreLe32(b, v);
  AppendRaw(buf_, tag, b, 4);
  return *this;
}
TlvBuilder& TlvBuilder::U64(Tag tag, uint64_t v) {
  uint8_t b[8];
  StoreLe64(b, v);
  AppendRaw(buf_, tag, b, 8);
  return *this;
}
TlvBuilder& TlvBuilder::Str(Tag tag, std::string_view s) {
  AppendRaw(buf_, tag, s.data(), s.size());
  return *this;
}
TlvBuilder& TlvBuilder::Bytes(Tag tag, std::span<const uint8_t> b) {
  AppendRaw(buf_, tag, b.data(), b.size());
  return *this;
}
size_t TlvBuilder::BeginNested(Tag tag) {
  const size_t mark = buf_.size();
  AppendRaw(buf_, tag, nullptr, 0);
  return mark;
}
void TlvBuilder::EndNested(size_t mark) {
  StoreLe32(buf_.data() + mark + 2, uint32_t(buf_.size() - mark - kTlvHeaderSize));
}

FieldReader::FieldReader(std::span<const uint8_t> payload) {
  TlvReader r(payload.data(), payload.size());
  Tlv t;
  while (r.Next(&t)) fields_.push_back(t);
  if (r.error() != WireError::kOk) {
    status_ = Status::InvalidArgument(std::string("malformed payload: ") + WireErrorName(r.error()));
    fields_.clear();
  }
}

const Tlv* FieldReader::Find(Tag tag) {
  if (!status_.ok()) return nullptr;
  const Tlv* found = nullptr;
  for (const Tlv& t : fields_) {
    if (t.tag != uint16_t(tag)) continue;
    if (found != nullptr) {
      Fail(Status::InvalidArgument("duplicate field " + TagName(tag)));
      return nullptr;
    }
    found = &t;
  }
  return found;
}

std::optional<std::span<const uint8_t>> FieldReader::Fixed(Tag tag, size_t width) {
  const Tlv* t = Find(tag);
  if (t == nullptr) return std::nullopt;
  if (t->length != width) {
    Fail(Status::InvalidArgument("field " + TagName(tag) + " must be " + std::to_string(width) +
                                 " bytes, got " + std::to_string(t->length)));
    return std::nullopt;
  }
  return std::span<const uint8_t>(t->value, t->length);
}

std::optional<uint8_t> FieldReader::U8(Tag tag) {
  auto v = Fixed(tag, 1);
  if (!v) return std::nullopt;
  return (*v)[0];
}
std::optional<uint16_t> FieldReader::U16(Tag tag) {
  auto v = Fixed(tag, 2);
  if (!v) return std::nullopt;
  return LoadLe16(v->data());
}
std::optional<uint32_t> FieldReader::U32(Tag tag) {
  auto v = Fixed(tag, 4);
  if (!v) return std::nullopt;
  return LoadLe32(v->data());
}
std::optional<uint64_t> FieldReader::U64(Tag tag) {
  auto v = Fixed(tag, 8);
  if (!v) return std::nullopt;
  return LoadLe64(v->data());
}

bool FieldReader::Bool(Tag tag, bool def) {
  auto v = U8(tag);
  if (!v) return def;
  if (*v > 1) {
    Fail(Status::InvalidArgument("field " + TagName(tag) + " must be 0 or 1"));
    return def;
  }
  return *v == 1;
}

namespace {
Status CheckString(Tag tag, const Tlv& t, size_t max_len) {
  if (t.length > max_len) {
    return Status::InvalidArgument("field " + TagName(tag) + " longer than " +
                                   std::to_string(max_len) + " bytes");
  }
  if (std::memchr(t.value, 0, t.length) != nullptr) {
    return Status::InvalidArgument("field " + TagName(tag) + " contains NUL");
  }
  return Status::Ok();
}
}  // namespace

std::optional<std::string> FieldReader::Str(Tag tag, size_t max_len) {
  const Tlv* t = Find(tag);
  if (t == nullptr) return std::nullopt;
  Status s = CheckString(tag, *t, max_len);
  if (!s.ok()) {
    Fail(std::move(s));
    return std::nullopt;
  }
  return std::string(reinterpret_cast<const char*>(t->value), t->length);
}

std::optional<std::vector<uint8_t>> FieldReader::Bytes(Tag tag, size_t max_len) {
  const Tlv* t = Find(tag);
  if (t == nullptr) return std::nullopt;
  if (t->length > max_len) {
    Fail(Status::InvalidArgument("field " + TagName(tag) + " longer than " +
                                 std::to_string(max_len) + " bytes"));
    return std::nullopt;
  }
  return std::vector<uint8_t>(t->value, t->value + t->length);
}

std::vector<std::string> FieldReader::StrList(Tag tag, size_t max_len, size_t max_count) {
  std::vector<std::string> out;
  if (!status_.ok()) return out;
  for (const Tlv& t : fields_) {
    if (t.tag != uint16_t(tag)) continue;
    if (out.size() == max_count) {
      Fail(Status::InvalidArgument("more than " + std::to_string(max_count) + " " + TagName(tag) +
                                   " fields"));
      return {};
    }
    Status s = CheckString(tag, t, max_len);
    if (!s.ok()) {
      Fail(std::move(s));
      return {};
    }
    out.emplace_back(reinterpret_cast<const char*>(t.value), t.length);
  }
  return out;
}

std::vector<std::span<const uint8_t>> FieldReader::NestedList(Tag tag, size_t max_count) {
  std::vector<std::span<const uint8_t>> out;
  if (!status_.ok()) return out;
  for (const Tlv& t : fields_) {
    if (t.tag != uint16_t(tag)) continue;
    if (out.size() == max_count) {
      Fail(Status::InvalidArgument("too many " + TagName(tag) + " fields"));
      return {};
    }
    out.emplace_back(t.value, t.length);
  }
  return out;
}

}  // namespace kubicle::guest::protocol
