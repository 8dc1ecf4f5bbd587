#include "noderuntime/server/serving_cert.h"

#include <arpa/inet.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <memory>

#include "noderuntime/node_util.h"

namespace kubicle::noderuntime::server {
namespace {

struct SslFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(BIGNUM* p) const { BN_free(p); }
  void operator()(X509_NAME* p) const { X509_NAME_free(p); }
  void operator()(GENERAL_NAMES* p) const { GENERAL_NAMES_free(p); }
};
template <class T>
using Ptr = std::unique_ptr<T, SslFree>;

Status SslError(const std::string& what) {
  unsigned long e = ERR_get_error();
  char buf[256] = "unknown error";
  if (e != 0) ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return Status::Internal(what + ": " + buf);
}

Ptr<BIO> MemIn(const std::string& s) {
  return Ptr<BIO>(BIO_new_mem_buf(s.data(), static_cast<int>(s.size())));
}

std::string Drain(BIO* b) {
  BUF_MEM* m = nullptr;
  BIO_get_mem_ptr(b, &m);
  return m ? std::string(m->data, m->length) : std::string();
}

Result<std::string> CertPem(X509* x) {
  Ptr<BIO> b(BIO_new(BIO_s_mem()));
  if (!b || PEM_write_bio_X509(b.get(), x) != 1) return SslError("writing a certificate");
  return Drain(b.get());
}

Result<std::string> KeyPem(EVP_PKEY* k) {
  Ptr<BIO> b(BIO_new(BIO_s_mem()));
  if (!b || PEM_write_bio_PrivateKey(b.get(), k, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return SslError("writing a private key");
  }
  return Drain(b.get());
}

Result<Ptr<X509>> ParseCert(const std::string& pem) {
  auto b = MemIn(pem);
  Ptr<X509> x(PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr));
  if (!x) return SslError("reading a PEM certificate");
  return x;
}

Result<Ptr<EVP_PKEY>> ParseKey(const std::string& pem) {
  auto b = MemIn(pem);
  Ptr<EVP_PKEY> k(PEM_read_bio_PrivateKey(b.get(), nullptr, nullptr, nullptr));
  if (!k) return SslError("reading a PEM private key");
  return k;
}

bool IsIp(const std::string& h) {
  unsigned char buf[16];
  return inet_pton(AF_INET, h.c_str(), buf) == 1 || inet_pton(AF_INET6, h.c_str(), buf) == 1;
}

// "::0001" and "::1" are one address: compare addresses in canonical form.
std::string Canonical(const std::string& h) {
  unsigned char buf[16];
  char out[INET6_ADDRSTRLEN];
  if (inet_pton(AF_INET, h.c_str(), buf) == 1) return inet_ntop(AF_INET, buf, out, sizeof out);
  if (inet_pton(AF_INET6, h.c_str(), buf) == 1) return inet_ntop(AF_INET6, buf, out, sizeof out);
  std::string lower = h;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  return lower;
}

struct Extension {
  int nid;
  std::string value;
};

// A certificate for `key` named `label`, signed by `issuer` (itself when
// null). The common name is only a label (clients check the SANs), cut to
// RFC 5280's 64 characters: node names and host names may be longer.
Result<Ptr<X509>> Sign(EVP_PKEY* key, const std::string& label, X509* issuer, EVP_PKEY* issuer_key,
                       std::chrono::hours validity, const std::vector<Extension>& exts) {
  constexpr size_t kMaxCommonName = 64;  // ub-common-name
  const std::string cn = label.substr(0, kMaxCommonName);
  Ptr<X509> x(X509_new());
  Ptr<BIGNUM> serial(BN_new());
  Ptr<X509_NAME> name(X509_NAME_new());
  if (!x || !serial || !name) return SslError("allocating a certificate");
  if (X509_set_version(x.get(), 2) != 1 ||
      BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      !BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(x.get())) ||
      // An hour back: clocks of client and node need not agree to the second.
      !X509_gmtime_adj(X509_getm_notBefore(x.get()), -3600) ||
      !X509_gmtime_adj(X509_getm_notAfter(x.get()),
                       static_cast<long>(std::chrono::seconds(validity).count())) ||
      X509_set_pubkey(x.get(), key) != 1 ||
      X509_NAME_add_entry_by_txt(name.get(), "O", MBSTRING_ASC,
                                 reinterpret_cast<const unsigned char*>("kubicle"), -1, -1, 0) != 1 ||
      X509_NAME_add_entry_by_txt(name.get(), "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1,
                                 0) != 1 ||
      X509_set_subject_name(x.get(), name.get()) != 1 ||
      X509_set_issuer_name(x.get(), issuer ? X509_get_subject_name(issuer) : name.get()) != 1) {
    return SslError("filling a certificate");
  }
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer ? issuer : x.get(), x.get(), nullptr, nullptr, 0);
  for (const Extension& e : exts) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, e.nid, e.value.c_str());
    if (!ext) return SslError("certificate extension " + e.value);
    int ok = X509_add_ext(x.get(), ext, -1);
    X509_EXTENSION_free(ext);
    if (ok != 1) return SslError("adding extension " + e.value);
  }
  if (X509_sign(x.get(), issuer_key ? issuer_key : key, EVP_sha256()) <= 0) {
    return SslError("signing a certificate");
  }
  return x;
}

Result<CertAndKey> Pems(X509* x, EVP_PKEY* k) {
  CertAndKey out;
  ASSIGN_OR_RETURN(out.cert_pem, CertPem(x));
  ASSIGN_OR_RETURN(out.key_pem, KeyPem(k));
  return out;
}

Result<Ptr<EVP_PKEY>> NewKey() {
  Ptr<EVP_PKEY> k(EVP_EC_gen("P-256"));
  if (!k) return SslError("generating an EC P-256 key");
  return k;
}

Status KeyMatches(const std::string& cert_pem, const std::string& key_pem) {
  ASSIGN_OR_RETURN(auto x, ParseCert(cert_pem));
  ASSIGN_OR_RETURN(auto k, ParseKey(key_pem));
  if (X509_check_private_key(x.get(), k.get()) != 1) {
    ERR_clear_error();
    return Status::InvalidArgument("the private key does not match the certificate");
  }
  return Status::Ok();
}

bool SignedBy(const std::string& cert_pem, const std::string& ca_pem) {
  auto x = ParseCert(cert_pem);
  auto ca = ParseCert(ca_pem);
  if (!x.ok() || !ca.ok()) return false;
  EVP_PKEY* pub = X509_get0_pubkey(ca->get());
  bool ok = pub && X509_verify(x->get(), pub) == 1;
  ERR_clear_error();
  return ok;
}

}  // namespace

Result<CertAndKey> MakeCa(const std::string& common_name, std::chrono::hours validity) {
  ASSIGN_OR_RETURN(auto key, NewKey());
  ASSIGN_OR_RETURN(auto x, Sign(key.get(), common_name, nullptr, nullptr, validity,
                                {{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
                                 {NID_key_usage, "critical,keyCertSign,cRLSign"},
                                 {NID_subject_key_identifier, "hash"}}));
  return Pems(x.get(), key.get());
}

Result<CertAndKey> MakeServingCert(const CertAndKey& ca, const std::vector<std::string>& hosts,
                                   std::chrono::hours validity) {
  if (hosts.empty()) return Status::InvalidArgument("a serving certificate needs a host");
  ASSIGN_OR_RETURN(auto ca_cert, ParseCert(ca.cert_pem));
  ASSIGN_OR_RETURN(auto ca_key, ParseKey(ca.key_pem));
  std::string san;
  for (const std::string& h : hosts) {
    if (h.empty() || h.find_first_of(",\n") != std::string::npos) {
      return Status::InvalidArgument("bad host name for a certificate: \"" + h + "\"");
    }
    san += (san.empty() ? "" : ",") + std::string(IsIp(h) ? "IP:" : "DNS:") + h;
  }
  ASSIGN_OR_RETURN(auto key, NewKey());
  ASSIGN_OR_RETURN(auto x, Sign(key.get(), hosts.front(), ca_cert.get(), ca_key.get(), validity,
                                {{NID_basic_constraints, "critical,CA:FALSE"},
                                 {NID_key_usage, "critical,digitalSignature"},
                                 {NID_ext_key_usage, "serverAuth"},
                                 {NID_subject_alt_name, san},
                                 {NID_subject_key_identifier, "hash"},
                                 {NID_authority_key_identifier, "keyid:always"}}));
  return Pems(x.get(), key.get());
}

Result<CertInfo> InspectCert(const std::string& pem) {
  ASSIGN_OR_RETURN(auto x, ParseCert(pem));
  CertInfo info;
  info.is_ca = X509_check_ca(x.get()) > 0;
  std::tm tm{};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(x.get()), &tm) != 1) return SslError("notAfter");
  info.not_after = WallClock::from_time_t(timegm(&tm));
  Ptr<GENERAL_NAMES> names(static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(x.get(), NID_subject_alt_name, nullptr, nullptr)));
  for (int i = 0; names && i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* g = sk_GENERAL_NAME_value(names.get(), i);
    if (g->type == GEN_DNS) {
      const ASN1_STRING* s = g->d.dNSName;
      info.hosts.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                              static_cast<size_t>(ASN1_STRING_length(s)));
    } else if (g->type == GEN_IPADD) {
      const ASN1_OCTET_STRING* s = g->d.iPAddress;
      char out[INET6_ADDRSTRLEN] = {};
      int len = ASN1_STRING_length(s);
      if (len == 4 || len == 16) {
        inet_ntop(len == 4 ? AF_INET : AF_INET6, ASN1_STRING_get0_data(s), out, sizeof out);
        info.hosts.emplace_back(out);
      }
    }
  }
  ERR_clear_error();
  return info;
}

Result<std::vector<std::string>> SplitPemCerts(const std::string& pem) {
  static const std::string kBegin = "-----BEGIN CERTIFICATE-----";
  static const std::string kEnd = "-----END CERTIFICATE-----";
  std::vector<std::string> out;
  size_t at = 0;
  while ((at = pem.find(kBegin, at)) != std::string::npos) {
    size_t end = pem.find(kEnd, at);
    if (end == std::string::npos) return Status::InvalidArgument("a PEM certificate is cut short");
    end += kEnd.size();
    out.push_back(pem.substr(at, end - at) + "\n");
    RETURN_IF_ERROR(ParseCert(out.back()).status());
    at = end;
  }
  if (out.empty()) return Status::InvalidArgument("no PEM certificate found");
  return out;
}

Result<ServingTls> EnsureNodeTls(const std::string& dir, const std::vector<std::string>& hosts,
                                 const std::string& node_name, WallClock::time_point now) {
  using namespace std::chrono_literals;
  RETURN_IF_ERROR(MakePrivateDir(dir, 0700));
  const std::string ca_crt = dir + "/ca.crt", ca_key = dir + "/ca.key";
  const std::string tls_crt = dir + "/tls.crt", tls_key = dir + "/tls.key";
  CertAndKey ca;
  if (std::filesystem::exists(ca_crt) || std::filesystem::exists(ca_key)) {
    // Clients trust this CA: never replace it behind their back.
    ASSIGN_OR_RETURN(ca.cert_pem, ReadFileToString(ca_crt));
    ASSIGN_OR_RETURN(ca.key_pem, ReadFileToString(ca_key));
    Status ok = KeyMatches(ca.cert_pem, ca.key_pem);
    auto info = InspectCert(ca.cert_pem);
    if (!ok.ok() || !info.ok() || !info->is_ca) {
      return Status::FailedPrecondition(
          "the node's TLS CA in " + dir + " is unusable (" +
          (!ok.ok() ? ok.message() : !info.ok() ? info.status().message() : "not a CA") +
          "); remove the directory to make a new one (clients must then fetch the new CA)");
    }
  } else {
    ASSIGN_OR_RETURN(ca, MakeCa("kubicle-node " + node_name + " serving CA", 24h * 3653));
    RETURN_IF_ERROR(AtomicWriteFile(ca_key, ca.key_pem));
    RETURN_IF_ERROR(AtomicWriteFile(ca_crt, ca.cert_pem));
  }
  CertAndKey leaf;
  bool reuse = false;
  auto crt = ReadFileToString(tls_crt);
  auto key = ReadFileToString(tls_key);
  if (crt.ok() && key.ok() && KeyMatches(*crt, *key).ok() && SignedBy(*crt, ca.cert_pem)) {
    auto info = InspectCert(*crt);
    reuse = info.ok() && info->not_after > now + 24h * 30;
    for (const std::string& h : hosts) {
      reuse = reuse && std::any_of(info->hosts.begin(), info->hosts.end(), [&](const auto& have) {
                return Canonical(have) == Canonical(h);
              });
    }
    if (reuse) leaf = {*crt, *key};
  }
  if (!reuse) {
    ASSIGN_OR_RETURN(leaf, MakeServingCert(ca, hosts, 24h * 365));
    RETURN_IF_ERROR(AtomicWriteFile(tls_key, leaf.key_pem));
    RETURN_IF_ERROR(AtomicWriteFile(tls_crt, leaf.cert_pem));
  }
  return ServingTls{leaf.cert_pem + ca.cert_pem, leaf.key_pem, ca.cert_pem};
}

Result<ServingTls> LoadTlsFiles(const std::string& cert_file, const std::string& key_file) {
  ASSIGN_OR_RETURN(std::string chain, ReadFileToString(cert_file));
  ASSIGN_OR_RETURN(std::string key, ReadFileToString(key_file));
  auto certs = SplitPemCerts(chain);
  if (!certs.ok()) return certs.status().WithContext(cert_file);
  Status ok = KeyMatches(certs->front(), key);
  if (!ok.ok()) return ok.WithContext(key_file + " and " + cert_file);
  return ServingTls{chain, key, certs->back()};
}

}  // namespace kubicle::noderuntime::server
