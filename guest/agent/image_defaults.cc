#include "guest/agent/image_defaults.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/unique_fd.h"
#include "guest/agent/agent_log.h"

namespace kubicle::guest::agent {

namespace {

constexpr size_t kMaxBytes = 1 << 20;         // image.json
constexpr size_t kMaxAccountBytes = 4 << 20;  // /etc/passwd, /etc/group
constexpr int kMaxDepth = 32;
constexpr size_t kMaxEnv = 4096;
constexpr size_t kMaxGroups = 64;

// A strict, bounded reader of just enough JSON: strings (all escapes),
// arrays of strings, and skipping any other value.
class JsonReader {
 public:
  explicit JsonReader(std::string_view s) : s_(s) {}

  void Ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t'))
      ++i_;
  }
  bool Eat(char c) {
    Ws();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool AtEnd() {
    Ws();
    return i_ == s_.size();
  }
  bool Literal(std::string_view word) {
    Ws();
    if (s_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    return true;
  }

  Result<std::string> String() {
    if (!Eat('"')) return Bad("a string");
    std::string out;
    while (i_ < s_.size()) {
      const char c = s_[i_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) return Bad("no control characters in strings");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) break;
      const char e = s_[i_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out += e;
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          ASSIGN_OR_RETURN(uint32_t cp, Hex4());
          if (cp >= 0xd800 && cp < 0xdc00) {
            if (s_.substr(i_, 2) != "\\u") return Bad("a low surrogate");
            i_ += 2;
            ASSIGN_OR_RETURN(uint32_t lo, Hex4());
            if (lo < 0xdc00 || lo >= 0xe000) return Bad("a low surrogate");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          } else if (cp >= 0xdc00 && cp < 0xe000) {
            return Bad("no lone low surrogate");
          }
          Utf8(cp, &out);
          break;
        }
        default:
          return Bad("a valid escape");
      }
    }
    return Bad("a closing quote");
  }

  // An array of strings; null is an empty one.
  Result<std::vector<std::string>> StringArray(size_t max) {
    std::vector<std::string> out;
    if (Literal("null")) return out;
    if (!Eat('[')) return Bad("an array");
    if (Eat(']')) return out;
    do {
      if (out.size() >= max) return Bad("at most " + std::to_string(max) + " entries");
      ASSIGN_OR_RETURN(std::string v, String());
      out.push_back(std::move(v));
    } while (Eat(','));
    if (!Eat(']')) return Bad("']'");
    return out;
  }

  // A string; null is empty.
  Result<std::string> StringOrNull() {
    if (Literal("null")) return std::string();
    return String();
  }

  Status Skip(int depth = 0) {
    if (depth > kMaxDepth) return Bad("less nesting");
    Ws();
    if (i_ >= s_.size()) return Bad("a value");
    const char c = s_[i_];
    if (c == '"') return String().status();
    if (c == '{' || c == '[') {
      const char close = c == '{' ? '}' : ']';
      ++i_;
      if (Eat(close)) return Status::Ok();
      do {
        if (c == '{') {
          RETURN_IF_ERROR(String().status());
          if (!Eat(':')) return Bad("':'");
        }
        RETURN_IF_ERROR(Skip(depth + 1));
      } while (Eat(','));
      if (!Eat(close)) return Bad(std::string("'") + close + "'");
      return Status::Ok();
    }
    if (Literal("true") || Literal("false") || Literal("null")) return Status::Ok();
    const size_t start = i_;
    while (i_ < s_.size() && std::strchr("+-.eE0123456789", s_[i_]) != nullptr) ++i_;
    if (i_ == start) return Bad("a value");
    return Status::Ok();
  }

  Status Bad(const std::string& wanted) const {
    return Status::InvalidArgument("expected " + wanted + " at byte " + std::to_string(i_));
  }

 private:
  Result<uint32_t> Hex4() {
    if (i_ + 4 > s_.size()) return Bad("4 hex digits");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char h = s_[i_++];
      v <<= 4;
      if (h >= '0' && h <= '9')
        v |= static_cast<uint32_t>(h - '0');
      else if (h >= 'a' && h <= 'f')
        v |= static_cast<uint32_t>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F')
        v |= static_cast<uint32_t>(h - 'A' + 10);
      else
        return Bad("4 hex digits");
    }
    return v;
  }
  static void Utf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      *out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      *out += static_cast<char>(0xc0 | (cp >> 6));
      *out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      *out += static_cast<char>(0xe0 | (cp >> 12));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      *out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      *out += static_cast<char>(0xf0 | (cp >> 18));
      *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      *out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  std::string_view s_;
  size_t i_ = 0;
};

// A whole small file; NotFound when absent, ResourceExhausted over `max`.
Result<std::string> ReadSmallFile(const std::string& path, size_t max) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return Status::FromErrno("open " + path);
  std::string out;
  char buf[16384];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno("read " + path);
    if (n == 0) return out;
    if (out.size() + static_cast<size_t>(n) > max)
      return Status::ResourceExhausted(path + " is larger than " + std::to_string(max) + " bytes");
    out.append(buf, static_cast<size_t>(n));
  }
}

bool ParseId(const std::string& s, uint32_t* out) {
  if (s.empty() || s.size() > 10) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v >= 0xffffffffu) return false;  // (uid_t)-1 means "unchanged" to setuid
  *out = static_cast<uint32_t>(v);
  return true;
}

std::vector<std::string> Split(const std::string& line, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t at = line.find(sep, start);
    out.push_back(line.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return out;
    start = at + 1;
  }
}

// The lines of an /etc/passwd-like file, split at ':'; comments skipped.
std::vector<std::vector<std::string>> Records(const std::string& text, size_t min_fields) {
  std::vector<std::vector<std::string>> out;
  for (const std::string& line : Split(text, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    auto f = Split(line, ':');
    if (f.size() >= min_fields) out.push_back(std::move(f));
  }
  return out;
}

}  // namespace

Result<ImageDefaults> ParseImageDefaults(std::string_view json) {
  if (json.size() > kMaxBytes) return Status::ResourceExhausted("image.json is over 1 MiB");
  JsonReader r(json);
  ImageDefaults d;
  if (!r.Eat('{')) return r.Bad("an object");
  if (!r.Eat('}')) {
    do {
      ASSIGN_OR_RETURN(std::string key, r.String());
      if (!r.Eat(':')) return r.Bad("':'");
      if (key == "Env") {
        ASSIGN_OR_RETURN(d.env, r.StringArray(kMaxEnv));
        for (const std::string& e : d.env)
          if (e.find('=') == std::string::npos || e[0] == '=' || e.find('\0') != std::string::npos)
            return Status::InvalidArgument("Env entry '" + e.substr(0, 64) + "' is not KEY=value");
      } else if (key == "WorkingDir") {
        ASSIGN_OR_RETURN(d.working_dir, r.StringOrNull());
        if (!d.working_dir.empty() && d.working_dir[0] != '/')
          return Status::InvalidArgument("WorkingDir is not absolute");
      } else if (key == "User") {
        ASSIGN_OR_RETURN(d.user, r.StringOrNull());
      } else {
        RETURN_IF_ERROR(r.Skip());
      }
    } while (r.Eat(','));
    if (!r.Eat('}')) return r.Bad("'}'");
  }
  if (!r.AtEnd()) return r.Bad("the end");
  for (const std::string* s : {&d.working_dir, &d.user})
    if (s->find('\0') != std::string::npos)
      return Status::InvalidArgument("NUL in WorkingDir or User");
  return d;
}

ImageDefaults LoadImageDefaults(const std::string& path) {
  auto text = ReadSmallFile(path, kMaxBytes);
  if (!text.ok()) {
    if (text.status().code() != StatusCode::kNotFound)
      LogWarn("image config ignored",
              "path=" + path + " error=\"" + text.status().ToString() + "\"");
    return {};
  }
  auto d = ParseImageDefaults(*text);
  if (!d.ok()) {
    LogWarn("image config ignored", "path=" + path + " error=\"" + d.status().ToString() + "\"");
    return {};
  }
  LogInfo("image config", "path=" + path + " env=" + std::to_string(d->env.size()) + " cwd=\"" +
                              d->working_dir + "\" user=\"" + d->user + "\"");
  return *std::move(d);
}

Result<Credentials> ResolveUser(const std::string& user, const std::string& passwd,
                                const std::string& group) {
  const size_t colon = user.find(':');
  const std::string u = user.substr(0, colon);
  const std::string g = colon == std::string::npos ? "" : user.substr(colon + 1);
  if (u.empty()) return Status::InvalidArgument("image user '" + user + "' has no user part");
  // Absent files are empty: numeric ids still work in an image without them.
  auto pw_text = ReadSmallFile(passwd, kMaxAccountBytes);
  if (!pw_text.ok() && pw_text.status().code() != StatusCode::kNotFound) return pw_text.status();
  auto gr_text = ReadSmallFile(group, kMaxAccountBytes);
  if (!gr_text.ok() && gr_text.status().code() != StatusCode::kNotFound) return gr_text.status();
  const auto pw = Records(pw_text.ok() ? *pw_text : "", 7);
  const auto gr = Records(gr_text.ok() ? *gr_text : "", 4);

  Credentials c;
  const std::vector<std::string>* entry = nullptr;
  uint32_t id = 0;
  const bool numeric = ParseId(u, &id);
  for (const auto& f : pw) {
    uint32_t fid = 0;
    if (numeric ? (ParseId(f[2], &fid) && fid == id) : f[0] == u) {
      entry = &f;
      break;
    }
  }
  if (!numeric && entry == nullptr)
    return Status::NotFound("image user '" + u + "' is not in " + passwd);
  if (entry != nullptr) {
    uint32_t pid = 0, pgid = 0;
    if (!ParseId((*entry)[2], &pid) || !ParseId((*entry)[3], &pgid))
      return Status::InvalidArgument(passwd + " has a malformed entry for '" + u + "'");
    c.uid = pid;
    c.gid = pgid;
    c.home = (*entry)[5];
  } else {
    c.uid = id;  // a uid with no entry: group root, as docker does
  }
  if (!g.empty()) {
    if (ParseId(g, &id)) {
      c.gid = id;
    } else {
      bool found = false;
      for (const auto& f : gr) {
        if (f[0] == g && ParseId(f[2], &id)) {
          c.gid = id;
          found = true;
          break;
        }
      }
      if (!found) return Status::NotFound("image group '" + g + "' is not in " + group);
    }
  }
  if (entry != nullptr) {
    for (const auto& f : gr) {
      for (const std::string& member : Split(f[3], ',')) {
        uint32_t gid = 0;
        if (member == (*entry)[0] && ParseId(f[2], &gid) && c.groups.size() < kMaxGroups)
          c.groups.push_back(gid);
      }
    }
  }
  return c;
}

}  // namespace kubicle::guest::agent
