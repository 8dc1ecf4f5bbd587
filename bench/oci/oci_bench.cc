// kubicle-bench-oci: what turning a container image into a template costs
// on the node, against a real registry on loopback (Debian's
// docker-registry, e2e/registry/). Pushes a ~100 MiB image (4 layers of
// incompressible bytes, so the figures are the transfer's and the hash's,
// not gzip's), then prints:
//   pull, cold          a fresh store: manifest, config, every layer
//                       fetched, hashed and fsynced (HTTP, and TLS + basic
//                       auth)
//   pull, cached        the same store again: the tag re-resolved, nothing
//                       fetched
//   rootfs build        BuildRootfs from the cached pull: every layer
//                       inflated and read twice (tree, then file bytes),
//                       mke2fs, the ext4 written; with the image's size
//                       (and its blocks on disk: it is sparse) and the
//                       totals pull + build, cold and with every layer
//                       cached
// Prints figures; never asserts on timing.
//
//   kubicle-bench-oci [--mib 100] [--runs 3]
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "bench/stats.h"
#include "e2e/registry/registry_fixture.h"
#include "noderuntime/oci/image_store.h"
#include "noderuntime/oci/rootfs_builder.h"

namespace kubicle::bench {
namespace {

namespace fs = std::filesystem;
using noderuntime::oci::ImageStore;
using noderuntime::oci::ImageStoreOptions;
using noderuntime::oci::PulledImage;

// `layers` directories of incompressible files, `mib` MiB in all.
std::vector<std::string> MakeLayers(const std::string& dir, int layers, int mib) {
  std::mt19937_64 rng(42);
  std::vector<std::string> out;
  std::vector<uint64_t> buf((1 << 20) / sizeof(uint64_t));
  for (int l = 0; l < layers; ++l) {
    std::string d = dir + "/layer" + std::to_string(l);
    fs::create_directories(d + "/data");
    std::ofstream f(d + "/data/blob" + std::to_string(l), std::ios::binary);
    for (int m = 0; m < mib / layers; ++m) {
      for (uint64_t& w : buf) w = rng();
      f.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(buf.size() * 8));
    }
    out.push_back(d);
  }
  return out;
}

struct Figures {
  std::vector<double> cold_ms, cached_ms, build_ms;
  uint64_t bytes = 0;
  uint64_t image_bytes = 0, image_disk_bytes = 0, file_bytes = 0;
};

// BuildRootfs from a pulled image into `out` (then removed), timed.
bool MeasureBuild(const PulledImage& image, const std::string& out, Figures& fig) {
  const auto t0 = Clock::now();
  auto built = noderuntime::oci::BuildRootfs(image.layers, image.config, out, {}, nullptr);
  fig.build_ms.push_back(MillisSince(t0));
  if (!built.ok()) {
    std::fprintf(stderr, "rootfs: %s\n", built.status().ToString().c_str());
    return false;
  }
  struct stat st {};
  if (::stat(out.c_str(), &st) == 0)
    fig.image_disk_bytes = static_cast<uint64_t>(st.st_blocks) * 512;
  fig.image_bytes = built->image_bytes;
  fig.file_bytes = built->file_bytes;
  fs::remove(out);
  return true;
}

bool Measure(const e2e::LoopbackRegistry& reg, const std::string& ref, const ImageStoreOptions& base,
             const std::string& scratch, int runs, Figures& fig) {
  for (int r = 0; r < runs; ++r) {
    ImageStoreOptions o = base;
    o.dir = scratch + "/store" + std::to_string(r);
    auto store = ImageStore::Open(o);
    if (!store.ok()) {
      std::fprintf(stderr, "open: %s\n", store.status().ToString().c_str());
      return false;
    }
    auto t0 = Clock::now();
    Result<PulledImage> cold = (*store)->Pull(ref, nullptr);
    fig.cold_ms.push_back(MillisSince(t0));
    if (!cold.ok()) {
      std::fprintf(stderr, "pull: %s\n", cold.status().ToString().c_str());
      return false;
    }
    fig.bytes = (*store)->fetch_stats().bytes;
    t0 = Clock::now();
    Result<PulledImage> cached = (*store)->Pull(ref, nullptr);
    fig.cached_ms.push_back(MillisSince(t0));
    if (!cached.ok() || (*store)->fetch_stats().bytes != fig.bytes) {
      std::fprintf(stderr, "cached pull fetched again or failed\n");
      return false;
    }
    const std::string rootfs = scratch + "/rootfs" + std::to_string(r) + ".ext4";
    if (!MeasureBuild(*cached, rootfs, fig)) return false;
    fs::remove_all(o.dir);
  }
  return true;
}

void Print(const char* name, const Figures& f) {
  const double mib = static_cast<double>(f.bytes) / (1 << 20);
  PrintPercentiles(std::string(name) + ", cold", f.cold_ms, "ms");
  std::printf("%-44s %.1f MiB fetched, %.0f MiB/s at p50\n", "", mib,
              mib / (Percentile(f.cold_ms, 50) / 1000.0));
  PrintPercentiles(std::string(name) + ", cached", f.cached_ms, "ms");
  PrintPercentiles("rootfs build (unpack + ext4)", f.build_ms, "ms");
  constexpr double kMiB = 1 << 20;
  std::printf("%-44s %.1f MiB of files -> %.1f MiB image, %.1f MiB on disk\n", "",
              f.file_bytes / kMiB, f.image_bytes / kMiB, f.image_disk_bytes / kMiB);
  std::printf("%-44s pull + build p50: cold %.0f ms, every layer cached %.0f ms\n", "",
              Percentile(f.cold_ms, 50) + Percentile(f.build_ms, 50),
              Percentile(f.cached_ms, 50) + Percentile(f.build_ms, 50));
}

int Main(int argc, char** argv) {
  int mib = 100, runs = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--mib")) mib = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--runs")) runs = std::atoi(argv[i + 1]);
  }
  std::string scratch = (fs::temp_directory_path() / "kubicle-bench-oci-XXXXXX").string();
  if (!::mkdtemp(scratch.data())) return 1;
  int rc = 0;
  {
    std::vector<std::string> layers = MakeLayers(scratch, 4, mib);
    std::vector<std::string> push = {"--repo", "bench/img", "--tag", "1"};
    for (const std::string& l : layers) push.insert(push.end(), {"--layer-dir", l});

    std::printf("kubicle-bench-oci: a %d MiB image in 4 layers, %d runs\n", mib, runs);
    e2e::LoopbackRegistry http({});
    if (!http.ok()) {
      std::fprintf(stderr, "registry: %s\n", http.error().c_str());
      rc = http.missing_package() ? 77 : 1;
    } else if (PushImage(http, push).is_discarded()) {
      std::fprintf(stderr, "push failed\n");
      rc = 1;
    } else {
      Figures f;
      if (Measure(http, http.address() + "/bench/img:1", {.insecure_registries = {http.address()}}, scratch,
                  runs, f)) {
        Print("pull over HTTP", f);
      } else {
        rc = 1;
      }
    }
    e2e::LoopbackRegistry tls({.tls = true, .user = "bench", .password = "bench"});
    if (rc == 0 && tls.ok() && !PushImage(tls, push).is_discarded()) {
      std::string config = scratch + "/config.json";
      std::ofstream(config) << tls.docker_config();
      Figures f;
      if (Measure(tls, tls.address() + "/bench/img:1",
                  {.docker_config_path = config, .ca_file = tls.ca_file()}, scratch, runs, f)) {
        Print("pull over TLS + basic auth", f);
      } else {
        rc = 1;
      }
    }
  }
  fs::remove_all(scratch);
  return rc;
}

}  // namespace
}  // namespace kubicle::bench

int main(int argc, char** argv) { return kubicle::bench::Main(argc, argv); }
