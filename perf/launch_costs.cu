// Host cost of each CUDA runtime / driver call a CUTLASS SM90 GEMM launch makes (perf/NOTES.md, "Host time per
// call"): the device switch, the driver entry-point lookup and the TMA descriptor encode CUTLASS repeats on every
// launch, the two kernel attributes, and kernel launches with small and large parameter blocks. No scalemm code.
//   nvcc -arch=sm_90a -O2 -std=c++17 -o /tmp/launch_costs perf/launch_costs.cu && /tmp/launch_costs
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <chrono>
#include <cstdio>
__global__ void k(int* p) { if (p) *p = 1; }
struct Big { char bytes[1024]; };
__global__ void kbig(Big b) { if (b.bytes[0] == 7) asm volatile("trap;"); }
template <class F> void t(const char* name, F f, int n = 20000) {
  for (int i = 0; i < 200; i++) f();
  cudaDeviceSynchronize();
  double best = 1e30;
  for (int r = 0; r < 5; r++) {
    auto a = std::chrono::steady_clock::now();
    for (int i = 0; i < n; i++) f();
    auto b = std::chrono::steady_clock::now();
    cudaDeviceSynchronize();
    double us = std::chrono::duration<double, std::micro>(b - a).count() / n;
    best = us < best ? us : best;
  }
  printf("%-44s %.3f us\n", name, best);
}
int main() {
  cudaSetDevice(0);
  cudaFree(0);
  void* buf; cudaMalloc(&buf, 1 << 26);
  void* pfn = nullptr; cudaDriverEntryPointQueryResult q;
  cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &pfn, 12000, cudaEnableDefault, &q);
  auto encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(pfn);
  t("cudaSetDevice", [] { cudaSetDevice(0); });
  t("cudaGetDriverEntryPointByVersion", [] {
    void* p; cudaDriverEntryPointQueryResult r;
    cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &r);
  });
  t("cuTensorMapEncodeTiled (2-D, 128B swizzle)", [&] {
    CUtensorMap m; cuuint64_t dims[2] = {4096, 4096}; cuuint64_t strides[1] = {4096};
    cuuint32_t box[2] = {128, 64}; cuuint32_t es[2] = {1, 1};
    encode(&m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, buf, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
           CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  });
  t("cudaFuncSetAttribute max dynamic smem", [] {
    cudaFuncSetAttribute(kbig, cudaFuncAttributeMaxDynamicSharedMemorySize, 200000);
  });
  t("cudaFuncSetAttribute non-portable cluster", [] {
    cudaFuncSetAttribute(kbig, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  });
  t("cudaGetLastError", [] { cudaGetLastError(); });
  t("launch <<<1, 32>>> (8-byte params)", [] { k<<<1, 32>>>(nullptr); }, 5000);
  t("launch <<<132, 384, 200 KB>>> (1 KB params)", [] { Big b{}; kbig<<<132, 384, 200000>>>(b); }, 5000);
  t("cudaLaunchKernelEx cluster 2x1 (1 KB params)", [] {
    Big b{}; cudaLaunchConfig_t c{}; cudaLaunchAttribute at[1];
    c.gridDim = dim3(132, 1, 1); c.blockDim = dim3(384, 1, 1); c.dynamicSmemBytes = 200000;
    at[0].id = cudaLaunchAttributeClusterDimension; at[0].val.clusterDim.x = 2; at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1; c.attrs = at; c.numAttrs = 1;
    cudaLaunchKernelEx(&c, kbig, b);
  }, 5000);
  printf("last error: %s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
