# Included by the root CMakeLists.txt when KUBICLE_FUZZ=ON: instruments all
# host code for libFuzzer (coverage) with ASan and UBSan, so the libraries the
# fuzzers in fuzz/ link are guided and checked too. clang only; use a build
# directory of its own (build-fuzz/, see docs/testing.md, "Fuzzing").
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "KUBICLE_FUZZ=ON needs clang (libFuzzer): configure with "
                      "CC=clang CXX=clang++ in a separate build directory")
endif()
# UBSan findings abort (no recovery), so libFuzzer sees them as crashes.
add_compile_options(-fsanitize=fuzzer-no-link,address,undefined
                    -fno-sanitize-recover=all -fno-omit-frame-pointer)
add_link_options(-fsanitize=address,undefined)
