// Fuzzes the parsers the node runs on what a registry (or a config file on
// the node) sends before any blob is trusted (noderuntime/oci/):
// ParseImageReference, ParseManifest with a Content-Type, ChoosePlatform,
// ParseImageConfig, ParseChallenge (WWW-Authenticate) and ParseDockerConfig.
//
// Input: the first byte picks the parser (mod 5); the rest is its text.
// For manifests, the text up to the first '\n' is the Content-Type.
//
// Checked: nothing crashes or throws; a reference that parses prints to a
// string that parses back to the same reference; a parsed manifest has at
// most kMaxLayers layers or kMaxIndexEntries entries, every digest is
// sha256:<64 hex>, and ChoosePlatform's pick is a linux/amd64 entry of the
// index; a challenge that parses as Bearer has a realm.
#include <string>
#include <string_view>

#include "fuzz/common/fuzz_input.h"
#include "noderuntime/oci/manifest.h"
#include "noderuntime/oci/reference.h"
#include "noderuntime/oci/registry_auth.h"

namespace kubicle::fuzz {
namespace {

namespace oci = noderuntime::oci;

void Reference(std::string_view text) {
  Result<oci::ImageReference> r = oci::ParseImageReference(text);
  if (!r.ok()) return;
  Result<oci::ImageReference> again = oci::ParseImageReference(r->ToString());
  FUZZ_CHECK(again.ok() && *again == *r);
  FUZZ_CHECK(!r->registry.empty() && !r->repository.empty() &&
             (!r->tag.empty() || !r->digest.empty()));
}

void Manifest(std::string_view text) {
  size_t nl = text.find('\n');
  std::string_view type = nl == std::string_view::npos ? std::string_view() : text.substr(0, nl);
  std::string_view body = nl == std::string_view::npos ? text : text.substr(nl + 1);
  Result<oci::ParsedManifest> m = oci::ParseManifest(body, type);
  if (!m.ok()) return;
  FUZZ_CHECK(m->layers.size() <= oci::kMaxLayers && m->entries.size() <= oci::kMaxIndexEntries);
  for (const auto& d : m->layers) FUZZ_CHECK(oci::IsSha256Digest(d.digest));
  for (const auto& d : m->entries) FUZZ_CHECK(oci::IsSha256Digest(d.digest));
  if (m->is_index) {
    Result<oci::Descriptor> d = oci::ChoosePlatform(*m);
    if (d.ok()) FUZZ_CHECK(d->os == "linux" && d->architecture == "amd64");
  } else {
    FUZZ_CHECK(oci::IsSha256Digest(m->config.digest));
  }
}

}  // namespace
}  // namespace kubicle::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace oci = kubicle::noderuntime::oci;
  if (size == 0) return 0;
  std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 5) {
    case 0:
      kubicle::fuzz::Reference(text);
      break;
    case 1:
      kubicle::fuzz::Manifest(text);
      break;
    case 2:
      (void)oci::ParseImageConfig(text);
      break;
    case 3: {
      auto c = oci::ParseChallenge(text);
      if (c.ok() && c->scheme == oci::Challenge::Scheme::kBearer) FUZZ_CHECK(!c->realm.empty());
      break;
    }
    default:
      (void)oci::ParseDockerConfig(text);
  }
  return 0;
}
