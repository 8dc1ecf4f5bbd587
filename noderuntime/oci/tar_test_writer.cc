#include "noderuntime/oci/tar_test_writer.h"

#include <zlib.h>
#include <zstd.h>

#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace kubicle::noderuntime::oci {

namespace {

// len-1 octal digits, zero-padded, and a NUL.
void Octal(char* field, size_t len, uint64_t v) {
  for (size_t i = len - 1; i-- > 0; v >>= 3) field[i] = static_cast<char>('0' + (v & 7));
  field[len - 1] = '\0';
}

// The header's checksum field: six digits, NUL, space.
void Checksum(std::string& h) {
  std::memset(h.data() + 148, ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  Octal(h.data() + 148, 7, sum);
  h[155] = ' ';
}

std::string PaxRecord(const std::string& key, const std::string& value) {
  const std::string body = " " + key + "=" + value + "\n";
  size_t len = body.size() + 1;
  while (std::to_string(len).size() + body.size() != len) ++len;
  return std::to_string(len) + body;
}

}  // namespace

std::string TarHeader(const std::string& name, char flag, uint32_t mode, uint64_t size,
                      const std::string& link) {
  std::string h(512, '\0');
  std::memcpy(h.data(), name.data(), std::min<size_t>(name.size(), 100));
  Octal(h.data() + 100, 8, mode);
  Octal(h.data() + 108, 8, 0);
  Octal(h.data() + 116, 8, 0);
  Octal(h.data() + 124, 12, size);
  Octal(h.data() + 136, 12, 1700000000);
  h[156] = flag;
  std::memcpy(h.data() + 157, link.data(), std::min<size_t>(link.size(), 100));
  std::memcpy(h.data() + 257,
              "ustar\0"
              "00",
              8);
  Checksum(h);
  return h;
}

void TarTestWriter::Pad() { out_.append((512 - out_.size() % 512) % 512, '\0'); }

void TarTestWriter::Header(const std::string& name, char flag, const TestEntry& e, uint64_t size) {
  std::string h = TarHeader(name, flag, e.mode, size, e.link.size() <= 100 ? e.link : "");
  // Owner and mtime as the entry says, then the checksum again.
  Octal(h.data() + 108, 8, e.uid);
  Octal(h.data() + 116, 8, e.gid);
  Octal(h.data() + 136, 12, static_cast<uint64_t>(e.mtime));
  Checksum(h);
  out_ += h;
}

TarTestWriter& TarTestWriter::Add(const TestEntry& e) {
  std::string pax;
  std::string name = e.path;
  if (e.path.size() > 100) {
    if (e.gnu_long_name) {
      TestEntry meta;
      Header("././@LongLink", 'L', meta, e.path.size() + 1);
      out_ += e.path + '\0';
      Pad();
      name = e.path.substr(0, 100);
    } else {
      pax += PaxRecord("path", e.path);
      name = "PaxHeaders/" + e.path.substr(e.path.size() - 60);
    }
  }
  if (e.link.size() > 100) pax += PaxRecord("linkpath", e.link);
  if (!e.mtime_pax.empty()) pax += PaxRecord("mtime", e.mtime_pax);
  for (const auto& [k, v] : e.xattrs) pax += PaxRecord("SCHILY.xattr." + k, v);
  if (!pax.empty()) {
    TestEntry meta;
    Header("PaxHeaders/x", 'x', meta, pax.size());
    out_ += pax;
    Pad();
  }
  Header(name, e.flag, e, e.flag == '0' ? e.content.size() : 0);
  if (e.flag == '0') {
    out_ += e.content;
    Pad();
  }
  return *this;
}

TarTestWriter& TarTestWriter::File(const std::string& path, const std::string& content,
                                   uint32_t mode) {
  TestEntry e;
  e.path = path;
  e.content = content;
  e.mode = mode;
  return Add(e);
}

TarTestWriter& TarTestWriter::Dir(const std::string& path, uint32_t mode) {
  TestEntry e;
  e.path = path;
  e.flag = '5';
  e.mode = mode;
  return Add(e);
}

TarTestWriter& TarTestWriter::Symlink(const std::string& path, const std::string& target) {
  TestEntry e;
  e.path = path;
  e.flag = '2';
  e.mode = 0777;
  e.link = target;
  return Add(e);
}

TarTestWriter& TarTestWriter::HardLink(const std::string& path, const std::string& target) {
  TestEntry e;
  e.path = path;
  e.flag = '1';
  e.link = target;
  return Add(e);
}

TarTestWriter& TarTestWriter::Raw(const std::string& bytes) {
  out_ += bytes;
  return *this;
}

std::string TarTestWriter::Finish() const { return out_ + std::string(1024, '\0'); }

void SetTarChecksum(std::string& header) { Checksum(header); }

std::string Gzip(const std::string& data) {
  z_stream zs{};
  if (deflateInit2(&zs, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("deflateInit2");
  std::string out(deflateBound(&zs, data.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) throw std::runtime_error("deflate");
  return out;
}

std::string Zstd(const std::string& data) {
  ZSTD_CCtx* cx = ZSTD_createCCtx();
  if (!cx) throw std::runtime_error("ZSTD_createCCtx");
  ZSTD_CCtx_setParameter(cx, ZSTD_c_checksumFlag, 1);
  std::string out(ZSTD_compressBound(data.size()), '\0');
  const size_t n = ZSTD_compress2(cx, out.data(), out.size(), data.data(), data.size());
  ZSTD_freeCCtx(cx);
  if (ZSTD_isError(n)) throw std::runtime_error("ZSTD_compress2");
  out.resize(n);
  return out;
}

}  // namespace kubicle::noderuntime::oci
