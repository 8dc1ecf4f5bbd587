#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs every test tier that
# this machine supports (see docs/testing.md). CI runs exactly this.
#   scripts/test.sh            all tiers
#   scripts/test.sh unit kvm   only these CTest labels
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
labels=("$@")
[ ${#labels[@]} -eq 0 ] && labels=(unit kvm)
regex=$(IFS='|'; echo "^(${labels[*]})\$")
if [ ! -e /dev/kvm ]; then
  echo "test: /dev/kvm is absent: kvm-labelled tests will report themselves skipped"
fi
echo "test: running CTest labels ${labels[*]}"
ctest --test-dir "${BUILD_DIR:-build}" -L "$regex" --output-on-failure -j 2 --timeout 600
