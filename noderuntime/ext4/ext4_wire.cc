#include "noderuntime/ext4/ext4_wire.h"

#include <nlohmann/json.hpp>

namespace kubicle::noderuntime::ext4 {

using json = nlohmann::json;

const char* OpName(Op op) {
  switch (op) {
    case Op::kRead: return "read";
    case Op::kWrite: return "write";
    case Op::kStat: return "stat";
    case Op::kList: return "list";
    case Op::kRemove: return "remove";
  }
  return "?";
}

Status CheckPath(const std::string& path) {
  if (path.empty() || path[0] != '/')
    return Status::InvalidArgument("workspace path must be absolute");
  if (path.size() > kMaxPathBytes)
    return Status::InvalidArgument("workspace path is longer than 4096 bytes");
  if (path.find('\0') != std::string::npos)
    return Status::InvalidArgument("workspace path contains a NUL byte");
  if (path == "/") return Status::Ok();
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    const std::string_view c(path.data() + start, end - start);
    if (c.empty() || c == "." || c == "..")
      return Status::InvalidArgument("workspace path '" + path +
                                     "' has an empty, '.' or '..' component");
    if (c.size() > 255) return Status::InvalidArgument("a workspace path component is over 255 bytes");
    start = end + 1;
  }
  return Status::Ok();
}

std::vector<std::string> Components(const std::string& path) {
  std::vector<std::string> out;
  size_t start = 1;
  while (start < path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    out.emplace_back(path.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

Result<std::string> EncodeRequest(const Request& r) {
  RETURN_IF_ERROR(CheckPath(r.path));
  if (r.size > kMaxWriteBytes) return Status::InvalidArgument("write is larger than 64 MiB");
  json j = {{"op", OpName(r.op)}, {"path", r.path}, {"mode", r.mode},
            {"recursive", r.recursive}, {"size", r.size}};
  std::string body;
  try {
    body = j.dump();
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("workspace path is not UTF-8: ") + e.what());
  }
  if (body.size() > kMaxRequestHeader) return Status::InvalidArgument("request header too large");
  std::string out(4, '\0');
  const auto n = static_cast<uint32_t>(body.size());
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + body;
}

Result<Request> DecodeRequest(std::string_view text) {
  if (text.size() > kMaxRequestHeader) return Status::InvalidArgument("request header too large");
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Status::InvalidArgument("request is not a JSON object");
  Request r;
  auto op = j.find("op");
  if (op == j.end() || !op->is_string()) return Status::InvalidArgument("request has no op");
  const std::string o = op->get<std::string>();
  if (o == "read") r.op = Op::kRead;
  else if (o == "write") r.op = Op::kWrite;
  else if (o == "stat") r.op = Op::kStat;
  else if (o == "list") r.op = Op::kList;
  else if (o == "remove") r.op = Op::kRemove;
  else return Status::InvalidArgument("unknown op " + o);
  auto path = j.find("path");
  if (path == j.end() || !path->is_string()) return Status::InvalidArgument("request has no path");
  r.path = path->get<std::string>();
  RETURN_IF_ERROR(CheckPath(r.path));
  if (auto m = j.find("mode"); m != j.end()) {
    if (!m->is_number_unsigned() || m->get<uint64_t>() > 07777)
      return Status::InvalidArgument("mode must be 0..07777");
    r.mode = m->get<uint32_t>();
  }
  if (auto rec = j.find("recursive"); rec != j.end()) {
    if (!rec->is_boolean()) return Status::InvalidArgument("recursive must be a boolean");
    r.recursive = rec->get<bool>();
  }
  if (auto s = j.find("size"); s != j.end()) {
    if (!s->is_number_unsigned() || s->get<uint64_t>() > kMaxWriteBytes)
      return Status::InvalidArgument("size must be 0..64 MiB");
    r.size = s->get<uint64_t>();
  }
  return r;
}

std::string EncodeError(const Status& s) {
  json j = {{"error", {{"code", static_cast<int>(s.code())}, {"message", s.message()}}}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string EncodeFrameHeader(char type, uint32_t length) {
  std::string h(5, '\0');
  h[0] = type;
  for (int i = 0; i < 4; ++i) h[1 + i] = static_cast<char>((length >> (8 * i)) & 0xff);
  return h;
}

}  // namespace kubicle::noderuntime::ext4
