// A tiny translation unit for testing the JIT itself: one device kernel (so nvcc really
// compiles for sm_90a) and a host function that needs no GPU.
#include <cstdint>
#include <cuda_runtime.h>

__global__ void scalemm_selftest_kernel(int64_t* out) { *out = {{VALUE}}; }

extern "C" int scalemm_selftest_value(int64_t* out) {
  *out = {{VALUE}};
  return 0;
}

extern "C" int scalemm_selftest_fail(int64_t code) { return static_cast<int>(code); }
