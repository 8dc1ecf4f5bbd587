#include "noderuntime/oci/tar_reader.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>

namespace kubicle::noderuntime::oci {

namespace {

constexpr size_t kBlock = 512;
// Metadata headers ('x', 'L', 'K', 'g') that may precede one entry: real
// archives use at most three; more is a stream spinning us in place.
constexpr int kMaxMetaHeaders = 8;

std::string Field(const char* h, size_t off, size_t len) {
  const char* p = h + off;
  return std::string(p, strnlen(p, len));
}

// An octal or GNU base-256 number field.
Result<uint64_t> Number(const char* h, size_t off, size_t len, const char* what) {
  const auto* p = reinterpret_cast<const unsigned char*>(h + off);
  if (p[0] & 0x80) {
    if (p[0] == 0xff) return Status::InvalidArgument(std::string("negative ") + what);
    uint64_t v = p[0] & 0x7f;
    for (size_t i = 1; i < len; ++i) {
      if (v >> 56) return Status::InvalidArgument(std::string(what) + " overflows");
      v = (v << 8) | p[i];
    }
    return v;
  }
  size_t i = 0;
  while (i < len && (p[i] == ' ' || p[i] == 0)) ++i;
  uint64_t v = 0;
  for (; i < len && p[i] != ' ' && p[i] != 0; ++i) {
    if (p[i] < '0' || p[i] > '7')
      return Status::InvalidArgument(std::string("malformed ") + what + " field");
    if (v >> 60) return Status::InvalidArgument(std::string(what) + " overflows");
    v = v * 8 + (p[i] - '0');
  }
  for (; i < len; ++i)
    if (p[i] != ' ' && p[i] != 0)
      return Status::InvalidArgument(std::string("malformed ") + what + " field");
  return v;
}

bool ChecksumOk(const char* h) {
  auto stored = Number(h, 148, 8, "checksum");
  if (!stored.ok()) return false;
  uint64_t u = 0;
  int64_t s = 0;
  for (size_t i = 0; i < kBlock; ++i) {
    const bool in_field = i >= 148 && i < 156;
    u += in_field ? ' ' : static_cast<unsigned char>(h[i]);
    s += in_field ? ' ' : static_cast<signed char>(h[i]);
  }
  // Some old writers summed signed chars; both are accepted, as GNU tar does.
  return *stored == u || static_cast<int64_t>(*stored) == s;
}

bool AllZero(const char* h) {
  return std::all_of(h, h + kBlock, [](char c) { return c == 0; });
}

uint64_t PadOf(uint64_t size) { return (kBlock - size % kBlock) % kBlock; }

Result<uint64_t> ParseDecimal(const std::string& s, const char* what) {
  if (s.empty() || s.size() > 19)
    return Status::InvalidArgument(std::string("malformed PAX ") + what);
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return Status::InvalidArgument(std::string("malformed PAX ") + what);
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

// "<sec>[.<fraction>]", possibly negative.
Status ParsePaxTime(const std::string& s, TarEntry* e) {
  std::string body = s;
  const bool neg = !body.empty() && body[0] == '-';
  if (neg) body.erase(0, 1);
  const size_t dot = body.find('.');
  ASSIGN_OR_RETURN(uint64_t sec, ParseDecimal(body.substr(0, dot), "mtime"));
  if (sec > static_cast<uint64_t>(std::numeric_limits<int64_t>::max() / 2))
    return Status::InvalidArgument("PAX mtime out of range");
  uint32_t nsec = 0;
  if (dot != std::string::npos) {
    const std::string frac = body.substr(dot + 1);
    for (size_t i = 0; i < frac.size(); ++i) {
      if (frac[i] < '0' || frac[i] > '9') return Status::InvalidArgument("malformed PAX mtime");
      if (i < 9) nsec = nsec * 10 + static_cast<uint32_t>(frac[i] - '0');
    }
    for (size_t i = frac.size(); i < 9; ++i) nsec *= 10;
  }
  if (neg) {
    // -1.5 s is -2 s + 0.5 s: nanoseconds are always forward of the second.
    e->mtime_sec = -static_cast<int64_t>(sec) - (nsec ? 1 : 0);
    e->mtime_nsec = nsec ? 1000000000u - nsec : 0;
  } else {
    e->mtime_sec = static_cast<int64_t>(sec);
    e->mtime_nsec = nsec;
  }
  return Status::Ok();
}

Result<TarType> TypeOf(char flag, const std::string& name) {
  switch (flag) {
    case '0':
    case '\0':
    case '7':
      // A pre-POSIX archive marks a directory only by its trailing slash.
      return !name.empty() && name.back() == '/' ? TarType::kDirectory : TarType::kFile;
    case '1':
      return TarType::kHardLink;
    case '2':
      return TarType::kSymlink;
    case '3':
      return TarType::kCharDevice;
    case '4':
      return TarType::kBlockDevice;
    case '5':
      return TarType::kDirectory;
    case '6':
      return TarType::kFifo;
    default: {
      const unsigned c = static_cast<unsigned char>(flag);
      return Status::Unimplemented(
          "entry type " +
          (c >= 0x20 && c < 0x7f ? "'" + std::string(1, flag) + "'" : std::to_string(c)) +
          " is not supported (" + name + ")");
    }
  }
}

}  // namespace

Status ApplyPaxRecords(const std::string& records, const TarLimits& limits, TarEntry* e,
                       PaxSeen* seen) {
  size_t pos = 0;
  uint64_t xattr_bytes = 0;
  while (pos < records.size()) {
    const size_t sp = records.find(' ', pos);
    if (sp == std::string::npos || sp == pos || sp - pos > 8)
      return Status::InvalidArgument("malformed PAX record length");
    ASSIGN_OR_RETURN(uint64_t len, ParseDecimal(records.substr(pos, sp - pos), "record length"));
    if (len < sp - pos + 3 || len > records.size() - pos || records[pos + len - 1] != '\n')
      return Status::InvalidArgument("malformed PAX record");
    const std::string kv = records.substr(sp + 1, pos + len - 1 - (sp + 1));
    pos += len;
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) return Status::InvalidArgument("malformed PAX record");
    const std::string key = kv.substr(0, eq);
    std::string value = kv.substr(eq + 1);
    if (key == "path" || key == "linkpath") {
      if (value.size() > limits.max_path_bytes || value.find('\0') != std::string::npos)
        return Status::InvalidArgument("PAX " + key + " is longer than " +
                                       std::to_string(limits.max_path_bytes) +
                                       " bytes or holds NUL");
      (key == "path" ? e->path : e->link_target) = std::move(value);
    } else if (key == "size") {
      ASSIGN_OR_RETURN(e->size, ParseDecimal(value, "size"));
      seen->size = true;
    } else if (key == "uid" || key == "gid") {
      ASSIGN_OR_RETURN(uint64_t id, ParseDecimal(value, key.c_str()));
      if (id > std::numeric_limits<uint32_t>::max())
        return Status::InvalidArgument("PAX " + key + " out of range");
      (key == "uid" ? e->uid : e->gid) = static_cast<uint32_t>(id);
      (key == "uid" ? seen->uid : seen->gid) = true;
    } else if (key == "mtime") {
      RETURN_IF_ERROR(ParsePaxTime(value, e));
      seen->mtime = true;
    } else if (key.rfind("SCHILY.xattr.", 0) == 0) {
      std::string name = key.substr(13);
      if (name.empty()) return Status::InvalidArgument("PAX xattr without a name");
      xattr_bytes += name.size() + value.size();
      if (e->xattrs.size() >= limits.max_xattr_count || xattr_bytes > limits.max_xattr_bytes)
        return Status::ResourceExhausted("more xattrs than " +
                                         std::to_string(limits.max_xattr_count) + " or " +
                                         std::to_string(limits.max_xattr_bytes) + " bytes");
      e->xattrs.emplace_back(std::move(name), std::move(value));
    }
    // Others (atime, ctime, uname, gname, comment, LIBARCHIVE.*) do not
    // reach the image.
  }
  return Status::Ok();
}

Status TarReader::ReadFull(char* buf, size_t n, const std::string& what) {
  size_t got = 0;
  while (got < n) {
    ASSIGN_OR_RETURN(size_t k, src_->Read(buf + got, n - got));
    if (k == 0) return Status::DataLoss("truncated tar stream: it ends inside " + what);
    got += k;
  }
  offset_ += n;
  return Status::Ok();
}

Status TarReader::Skip(uint64_t n, const std::string& what) {
  std::array<char, 64 << 10> scratch;
  while (n > 0) {
    const size_t k = static_cast<size_t>(std::min<uint64_t>(n, scratch.size()));
    RETURN_IF_ERROR(ReadFull(scratch.data(), k, what));
    n -= k;
  }
  return Status::Ok();
}

Result<std::string> TarReader::ReadBlob(uint64_t size, uint64_t limit, const std::string& what) {
  if (size > limit)
    return Status::ResourceExhausted(what + " of " + std::to_string(size) +
                                     " bytes is over the limit of " + std::to_string(limit));
  std::string out(static_cast<size_t>(size), '\0');
  RETURN_IF_ERROR(ReadFull(out.data(), out.size(), what));
  RETURN_IF_ERROR(Skip(PadOf(size), what));
  return out;
}

Result<bool> TarReader::ReadHeader(char* h, PendingMeta* meta) {
  for (int n = 0;; ++n) {
    if (n > kMaxMetaHeaders)
      return Status::InvalidArgument("too many metadata headers before one entry");
    // The stream may end cleanly only where an entry could start.
    ASSIGN_OR_RETURN(size_t first, src_->Read(h, kBlock));
    if (first == 0) {
      if (n > 0) return Status::DataLoss("truncated tar stream: it ends after a metadata header");
      return false;
    }
    offset_ += first;
    if (first < kBlock) RETURN_IF_ERROR(ReadFull(h + first, kBlock - first, "a header"));
    if (AllZero(h)) return false;  // the second zero block and any record padding are not read
    if (!ChecksumOk(h))
      return Status::DataLoss("corrupt tar header at offset " + std::to_string(offset_ - kBlock) +
                              " (bad checksum)");
    const char flag = h[156];
    ASSIGN_OR_RETURN(uint64_t size, Number(h, 124, 12, "size"));
    if (flag == 'x' || flag == 'g') {
      ASSIGN_OR_RETURN(std::string recs, ReadBlob(size, limits_.max_pax_bytes, "a PAX header"));
      if (flag == 'x') {
        RETURN_IF_ERROR(ApplyPaxRecords(recs, limits_, &meta->pax, &meta->seen));
        meta->have_pax = true;
      }
    } else if (flag == 'L' || flag == 'K') {
      ASSIGN_OR_RETURN(std::string s,
                       ReadBlob(size, limits_.max_path_bytes + 1, "a GNU long name"));
      s.resize(strnlen(s.data(), s.size()));
      (flag == 'L' ? meta->long_name : meta->long_link) = std::move(s);
    } else {
      return true;  // an entry's own header
    }
  }
}

Status TarReader::FillEntry(const char* h, PendingMeta& meta, TarEntry* e) {
  const bool ustar = memcmp(h + 257, "ustar\0", 6) == 0;
  std::string name = Field(h, 0, 100);
  if (ustar) {
    const std::string prefix = Field(h, 345, 155);
    if (!prefix.empty()) name = prefix + "/" + name;
  }
  if (!meta.long_name.empty()) name = meta.long_name;
  if (meta.have_pax && !meta.pax.path.empty()) name = meta.pax.path;
  current_ = name;
  if (name.empty()) return Status::InvalidArgument("a tar entry without a name");
  if (name.size() > limits_.max_path_bytes)
    return Status::InvalidArgument("path longer than " + std::to_string(limits_.max_path_bytes) +
                                   " bytes: " + name.substr(0, 64) + "...");
  ASSIGN_OR_RETURN(e->type, TypeOf(h[156], name));
  e->path = name;
  ASSIGN_OR_RETURN(uint64_t mode, Number(h, 100, 8, "mode"));
  ASSIGN_OR_RETURN(uint64_t uid, Number(h, 108, 8, "uid"));
  ASSIGN_OR_RETURN(uint64_t gid, Number(h, 116, 8, "gid"));
  ASSIGN_OR_RETURN(e->size, Number(h, 124, 12, "size"));
  ASSIGN_OR_RETURN(uint64_t mtime, Number(h, 136, 12, "mtime"));
  if (uid > std::numeric_limits<uint32_t>::max() || gid > std::numeric_limits<uint32_t>::max())
    return Status::InvalidArgument("uid or gid out of range");
  if (mtime > static_cast<uint64_t>(std::numeric_limits<int64_t>::max() / 2))
    return Status::InvalidArgument("mtime out of range");
  e->mode = static_cast<uint32_t>(mode & 07777);
  e->uid = static_cast<uint32_t>(uid);
  e->gid = static_cast<uint32_t>(gid);
  e->mtime_sec = static_cast<int64_t>(mtime);
  e->link_target = Field(h, 157, 100);
  if (!meta.long_link.empty()) e->link_target = meta.long_link;
  if (meta.have_pax) {
    if (!meta.pax.link_target.empty()) e->link_target = meta.pax.link_target;
    if (meta.seen.size) e->size = meta.pax.size;
    if (meta.seen.uid) e->uid = meta.pax.uid;
    if (meta.seen.gid) e->gid = meta.pax.gid;
    if (meta.seen.mtime) {
      e->mtime_sec = meta.pax.mtime_sec;
      e->mtime_nsec = meta.pax.mtime_nsec;
    }
    e->xattrs = std::move(meta.pax.xattrs);
  }
  if (e->link_target.size() > limits_.max_path_bytes)
    return Status::InvalidArgument("link target longer than " +
                                   std::to_string(limits_.max_path_bytes) + " bytes");
  // As Go's archive/tar (what image builders use): only regular files carry
  // data; a size on any other type is not data.
  if (e->type != TarType::kFile) e->size = 0;
  return Status::Ok();
}

Result<bool> TarReader::Next(TarEntry* e) {
  if (done_) return false;
  RETURN_IF_ERROR(Skip(data_left_ + pad_left_, "the data of " + current_));
  data_left_ = pad_left_ = 0;
  *e = TarEntry{};
  PendingMeta meta;
  std::array<char, kBlock> h;
  ASSIGN_OR_RETURN(bool more, ReadHeader(h.data(), &meta));
  if (!more) {
    done_ = true;
    return false;
  }
  if (Status st = FillEntry(h.data(), meta, e); !st.ok())
    return current_.empty() ? st : Status(st.code(), st.message() + " (entry " + current_ + ")");
  data_left_ = e->size;
  pad_left_ = PadOf(e->size);
  return true;
}

Result<size_t> TarReader::ReadData(char* buf, size_t max) {
  const size_t n = static_cast<size_t>(std::min<uint64_t>(max, data_left_));
  if (n == 0) return size_t{0};
  RETURN_IF_ERROR(ReadFull(buf, n, "the data of " + current_));
  data_left_ -= n;
  return n;
}

}  // namespace kubicle::noderuntime::oci
