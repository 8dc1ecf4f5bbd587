#!/usr/bin/env bash
# Configures and builds everything C++ into build/ (override with BUILD_DIR).
# Extra arguments go to cmake, e.g. scripts/build.sh -DKUBICLE_SANITIZE=ON.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
if [ ! -f "$BUILD_DIR/build.ninja" ] || [ $# -gt 0 ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
fi
echo "build: compiling with $JOBS jobs into $BUILD_DIR"
ninja -C "$BUILD_DIR" -j "$JOBS"
