// Test runner: doctest with a banner naming the backend; without a GPU the CUDA build skips the
// cases that run kernels and says so.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "q35/arch/memory.hpp"
#include "q35/core/config.hpp"

int main(int argc, char** argv) {
  std::printf("q35 tests, backend: %s\n", Q35_BACKEND_NAME);
  if (const q35::status s = q35::device_status(); !s.ok())
    std::printf("%s: the cases that run kernels are skipped (host-only cases still run)\n", s.message().c_str());
  doctest::Context ctx;
  ctx.applyCommandLine(argc, argv);
  return ctx.run();
}
