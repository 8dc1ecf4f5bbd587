// main() of every e2e test binary: see RunE2E in e2e_env.h.
#include "e2e/e2e_env.h"

int main(int argc, char** argv) { return kubicle::e2e::RunE2E(argc, argv); }
