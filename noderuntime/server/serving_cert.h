// The data plane's serving certificate (docs/node.md, "TLS"): each node is
// its own certificate authority. At first start it makes a CA (ECDSA P-256,
// ten years) in its state directory and, signed by it, a serving
// certificate for the names and addresses clients use; the CA's
// certificate is what the node publishes in the cluster (its Lease) for
// clients to verify against. Or the operator gives a certificate and key.
//
// Contracts: no function here turns verification off or accepts a key that
// does not match its certificate. Keys are written 0600 (AtomicWriteFile).
// OpenSSL errors come back as Status with OpenSSL's reason.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"

namespace kubicle::noderuntime::server {

using WallClock = std::chrono::system_clock;

struct CertAndKey {
  std::string cert_pem;
  std::string key_pem;
};

// What a server needs (chain: leaf, then CA) and what it publishes (the CA).
struct ServingTls {
  std::string cert_chain_pem;
  std::string key_pem;
  std::string ca_pem;
};

struct CertInfo {
  std::vector<std::string> hosts;  // subjectAltName DNS names and IP addresses
  WallClock::time_point not_after;
  bool is_ca = false;
};

Result<CertAndKey> MakeCa(const std::string& common_name, std::chrono::hours validity);
// `hosts`: DNS names and IPv4/IPv6 addresses (written as IP SANs).
Result<CertAndKey> MakeServingCert(const CertAndKey& ca, const std::vector<std::string>& hosts,
                                   std::chrono::hours validity);
// The first certificate of `pem`.
Result<CertInfo> InspectCert(const std::string& pem);
// The certificates of a PEM bundle, in order.
Result<std::vector<std::string>> SplitPemCerts(const std::string& pem);

// The node's own TLS in `dir` (created 0700): ca.crt/ca.key are made once
// and kept (clients trust them); tls.crt/tls.key are (re)made when absent,
// when they do not cover `hosts`, or when they expire within 30 days.
Result<ServingTls> EnsureNodeTls(const std::string& dir, const std::vector<std::string>& hosts,
                                 const std::string& node_name,
                                 WallClock::time_point now = WallClock::now());
// A given pair (--tls-cert/--tls-key): the chain file's last certificate is
// the CA that is published (the certificate itself when it is alone).
Result<ServingTls> LoadTlsFiles(const std::string& cert_file, const std::string& key_file);

}  // namespace kubicle::noderuntime::server
