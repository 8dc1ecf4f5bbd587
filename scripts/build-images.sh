#!/usr/bin/env bash
# Builds Kubicle's two container images from the CMake build, without a
# container engine and offline, as OCI archives (docs/helm.md, "Images"):
#
#   <build>/images/kubicle-operator-<appVersion>.oci.tar
#   <build>/images/kubicle-node-<appVersion>.oci.tar
#
#   scripts/build-images.sh [--linux] [BUILD_DIR [OUT_DIR]]
#
# BUILD_DIR defaults to build/ (scripts/build.sh), OUT_DIR to BUILD_DIR/images.
# The tag is helm/kubicle/Chart.yaml's appVersion and the repositories are
# helm/kubicle/values.yaml's image.operator.repository and
# image.node.repository, so the archives carry exactly the names the chart
# pulls (`ctr -n k8s.io images import` reads io.containerd.image.name).
#
# The node image carries the Linux guest kernel and initramfs when the
# kernel is in the cache (guest/linux/cached-kernel.sh), or given in
# KUBICLE_LINUX_KERNEL and KUBICLE_LINUX_INITRAMFS; --linux builds them first
# (long: a kernel build). Without them it carries the test guest and the
# guest agent only, and says so.
#
# Reproducible: SOURCE_DATE_EPOCH (default 0) is every timestamp; the same
# inputs give the same digests. An image whose inputs did not change is not
# rewritten (images/oci_image.py keeps a hash of them beside each archive).
# Prints each image's name, manifest digest and sizes.
set -euo pipefail
cd "$(dirname "$0")/.."

linux=0
if [ "${1:-}" = "--linux" ]; then
  linux=1
  shift
fi
build=$(realpath "${1:-${BUILD_DIR:-build}}")
out=${2:-$build/images}

# The tag and repositories, from the chart (PyYAML: scripts/install-deps.sh).
read -r tag operator_repo node_repo < <(python3 - <<'EOF'
import yaml
chart = yaml.safe_load(open("helm/kubicle/Chart.yaml"))
image = yaml.safe_load(open("helm/kubicle/values.yaml"))["image"]
print(chart["appVersion"], image["operator"]["repository"], image["node"]["repository"])
EOF
)
[ -n "$node_repo" ] || { echo "build-images: cannot read the chart's image names" >&2; exit 1; }

kernel=${KUBICLE_LINUX_KERNEL:-}
initramfs=${KUBICLE_LINUX_INITRAMFS:-}
if [ -z "$kernel" ]; then
  if [ $linux -eq 1 ]; then
    kernel=$(guest/linux/build-kernel.sh | tail -n1)
  else
    kernel=$(guest/linux/cached-kernel.sh || true)
  fi
fi
if [ -n "$kernel" ] && [ -z "$initramfs" ]; then
  # Seconds, and cached by the agent's content.
  initramfs=$(guest/linux/build-initramfs.sh "$build/guest/agent/kubicle-agent" | tail -n1)
fi
linux_args=()
if [ -n "$kernel" ]; then
  echo "build-images: the node image carries the Linux guest: $kernel, $initramfs"
  linux_args=(--linux-kernel "$kernel" --initramfs "$initramfs")
else
  echo "build-images: no Linux guest kernel cached (--linux builds it): the node" \
       "image carries the test guest and the guest agent only"
fi

names=$(mktemp)
trap 'rm -f "$names"' EXIT
printf 'kubicle-operator %s\nkubicle-node %s\n' "$operator_repo" "$node_repo" >"$names"
exec python3 images/oci_image.py build --build-dir "$build" --out "$out" --tag "$tag" \
  --names "$names" "${linux_args[@]}"
