#!/usr/bin/env bash
# Configures and builds everything C++ into build/ (override with BUILD_DIR).
# Extra arguments go to cmake, e.g. scripts/build.sh -DKUBICLE_SANITIZE=ON.
# BUILD_TARGETS limits the build to those ninja targets (the main job builds
# only its binaries, not the ~550 targets with every test).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
if [ ! -f "$BUILD_DIR/build.ninja" ] || [ $# -gt 0 ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
fi
echo "build: compiling ${BUILD_TARGETS:-everything} with $JOBS jobs into $BUILD_DIR"
# shellcheck disable=SC2086  # a list of target names
ninja -C "$BUILD_DIR" -j "$JOBS" ${BUILD_TARGETS:-}
