#!/usr/bin/env bash
# Installs everything Kubicle builds and tests with, from Debian's packages.
# Idempotent: skips apt when every package is already present.
set -euo pipefail

PACKAGES=(
  # C++ toolchain and build
  g++ cmake ninja-build make pkg-config
  # the fuzzers (fuzz/): clang with libFuzzer and the sanitizer runtimes
  clang libclang-rt-14-dev
  # libraries
  libcpprest-dev libyaml-cpp-dev libspdlog-dev libssl-dev nlohmann-json3-dev
  libboost-dev  # Boost.Beast/Asio (header-only): the node's HTTP server
  libgtest-dev libgmock-dev
  # guest images and the nested test host
  busybox-static e2fsprogs cpio qemu-system-x86
  # workspaces: the confined ext4 helper kubicle-ext4 (noderuntime/ext4);
  # image layers to ext4 (noderuntime/oci/rootfs_*: libext2fs, zlib, libzstd)
  libext2fs-dev zlib1g-dev libzstd-dev
  # the Linux guest kernel, rootfs and test host (guest/linux, e2e/nested)
  linux-source-6.1 bc bison flex libelf-dev debootstrap fakeroot xz-utils
  # tools used by tests and benchmarks
  python3 curl
  # the node's per-sandbox network namespaces (docs/network.md): `ip` and
  # `nft`, run by kubicle-node --sandbox-network=on and node_network_root_test
  iproute2 nftables
  # a real kubelet node in the e2e tier (e2e/harness/kubelet_node.h): the
  # container runtime, its OCI runtime and the CNI plugins (/usr/lib/cni)
  containerd runc containernetworking-plugins
  # a real OCI registry on loopback for image pulls (e2e/registry/): the
  # CNCF distribution server, htpasswd for its basic auth, openssl for its CA
  docker-registry apache2-utils openssl
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Python packages the tests use (a real Prometheus text parser for /metrics;
# PyYAML for crds/crd_descriptions_test.py).
if ! python3 -c "import prometheus_client" 2>/dev/null; then
  echo "install-deps: installing prometheus_client from PyPI"
  python3 -m pip install --quiet prometheus_client
fi
if ! python3 -c "import yaml" 2>/dev/null; then
  echo "install-deps: installing pyyaml from PyPI"
  python3 -m pip install --quiet pyyaml
fi
# The chart's strict validation against the Kubernetes schemas
# (helm/chart_render_test.py, kubernetes-validate -k 1.36.0 --strict).
if ! python3 -c "import kubernetes_validate" 2>/dev/null; then
  echo "install-deps: installing kubernetes-validate from PyPI"
  python3 -m pip install --quiet kubernetes-validate
fi
# The Python SDK (sdk/python) and what its tests need: kubernetes,
# kubernetes-asyncio and httpx, pytest and pytest-asyncio, from the index pip
# is configured with. The SDK is installed for `import kubicle` anywhere; its
# tests and the examples in this tree use the tree's copy.
if ! python3 -c "import kubicle, kubernetes, kubernetes_asyncio, httpx, pytest, pytest_asyncio" \
    2>/dev/null; then
  echo "install-deps: installing the Python SDK (sdk/python) and its test dependencies from PyPI"
  python3 -m pip install --quiet "$(dirname "$0")/../sdk/python[test]"
fi
echo "install-deps: all packages present"
