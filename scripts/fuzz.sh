#!/usr/bin/env bash
# The libFuzzer fuzzers (fuzz/, docs/testing.md "Fuzzing"), built with clang
# into their own directory (FUZZ_BUILD_DIR, default build-fuzz/).
#   scripts/fuzz.sh build             configure (once) and build every fuzzer
#   scripts/fuzz.sh list              the fuzzers' names
#   scripts/fuzz.sh NAME [SECONDS]    fuzz NAME for SECONDS (default 600)
# A long run keeps what it finds in ~/.cache/kubicle/fuzz/NAME (outside the
# tree, reused by the next run) and starts from the seeds in
# fuzz/<area>/corpus/NAME; a crash leaves its input in
# $FUZZ_BUILD_DIR/fuzz/artifacts/ and the run exits non-zero. Extra
# libFuzzer flags go in FUZZ_FLAGS, e.g. FUZZ_FLAGS=-jobs=2.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
JOBS=${JOBS:-$(nproc)}

configure() {
  if [ ! -f "$FUZZ_BUILD_DIR/build.ninja" ]; then
    # Warnings are policed by the gcc build; clang's extra ones in code the
    # fuzz build merely compiles must not break it.
    CC=clang CXX=clang++ cmake -S . -B "$FUZZ_BUILD_DIR" -G Ninja \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKUBICLE_FUZZ=ON -DKUBICLE_WERROR=OFF >/dev/null
  fi
}

fuzzers() { find fuzz -name '*_fuzzer.cc' -printf '%f\n' | sed 's/_fuzzer\.cc$//' | sort; }

case "${1:-}" in
  build)
    configure
    echo "fuzz: building the fuzzers with $JOBS jobs into $FUZZ_BUILD_DIR"
    ninja -C "$FUZZ_BUILD_DIR" -j "$JOBS" kubicle_fuzzers
    ;;
  list) fuzzers ;;
  "" | -h | --help)
    sed -n '2,12p' "$0"
    exit 2
    ;;
  *)
    name=$1
    seconds=${2:-600}
    seeds=$(ls -d fuzz/*/corpus/"$name" 2>/dev/null || true)
    if [ -z "$seeds" ]; then
      echo "fuzz: no fuzzer named $name; one of: $(fuzzers | tr '\n' ' ')" >&2
      exit 2
    fi
    configure
    ninja -C "$FUZZ_BUILD_DIR" -j "$JOBS" "${name}_fuzzer"
    work=${XDG_CACHE_HOME:-$HOME/.cache}/kubicle/fuzz/$name
    artifacts=$FUZZ_BUILD_DIR/fuzz/artifacts
    mkdir -p "$work" "$artifacts"
    echo "fuzz: $name for ${seconds}s; corpus $work, seeds $seeds"
    # shellcheck disable=SC2086
    exec "$FUZZ_BUILD_DIR/fuzz/${name}_fuzzer" -max_total_time="$seconds" -rss_limit_mb=2048 \
      -timeout=10 -print_final_stats=1 -artifact_prefix="$artifacts/$name-" ${FUZZ_FLAGS:-} \
      "$work" "$seeds"
    ;;
esac
