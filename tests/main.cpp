// Test runner: doctest with a banner naming the backend; without a GPU the CUDA build skips the
// cases that run kernels and says so.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "q35/arch/memory.hpp"
#include "q35/core/config.hpp"

int main(int argc, char** argv) {
  std::printf("q35 tests, backend: %s\n", Q35_BACKEND_NAME);
  if (!q35::device_available())
    std::printf("no CUDA device visible: the cases that run kernels are skipped (host-only cases still run)\n");
  doctest::Context ctx;
  ctx.applyCommandLine(argc, argv);
  return ctx.run();
}
