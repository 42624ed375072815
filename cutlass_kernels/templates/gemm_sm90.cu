// One SM90 GEMM with one epilogue tree, rendered by scalemm.cutlass_kernels.configs.
#include "scalemm/sm90_gemm.cuh"

using TileShape = cute::Shape<cute::_{{TILE_M}}, cute::_{{TILE_N}}, cute::_{{TILE_K}}>;
using ClusterShape = cute::Shape<cute::_{{CLUSTER_M}}, cute::_{{CLUSTER_N}}, cute::_1>;
using Evt = {{EVT_TYPE}};
using Gemm = scalemm::Sm90Gemm<{{ELEMENT_A}}, {{ELEMENT_B}}, {{ELEMENT_D}}, {{LAYOUT_D}}, TileShape,
                               ClusterShape, {{MAINLOOP_SCHEDULE}}, {{EPILOGUE_SCHEDULE}}, Evt,
                               {{ELEMENT_C}}, {{TILE_SCHEDULER}}>;

// ptrs[i]: device pointer of the i-th epilogue leaf; vec[i]: 1 = vector, 0 = one value.
extern "C" int scalemm_gemm(void const* a, void const* b, void const* c, void* d, int64_t M,
                            int64_t N, int64_t K, void const* const* ptrs, int64_t const* vec,
                            void* workspace, int64_t workspace_bytes, int64_t device,
                            int64_t raster_along_n, int64_t swizzle, int64_t splits, void* stream) {
  typename Evt::Arguments evt_args = {{EVT_ARGS}};
  return Gemm::run(a, b, c, d, int(M), int(N), int(K), evt_args, workspace, workspace_bytes,
                   int(device), int(raster_along_n), int(swizzle), int(splits),
                   static_cast<cudaStream_t>(stream));
}
