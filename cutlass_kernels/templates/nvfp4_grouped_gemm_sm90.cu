// One SM90 grouped NVFP4-weight GEMM with one epilogue tree, rendered by scalemm.grouped_gemm.
{{PRELUDE}}#include "scalemm/sm90/nvfp4_grouped_gemm.cuh"

using TileShape = cute::Shape<cute::_{{TILE_M}}, cute::_{{TILE_N}}, cute::_{{TILE_K}}>;
using ClusterShape = cute::Shape<cute::_{{CLUSTER_M}}, cute::_{{CLUSTER_N}}, cute::_1>;
using Evt = {{EVT_TYPE}};
using Gemm = scalemm::sm90::Nvfp4GroupedGemm<{{ELEMENT_B}}, {{ELEMENT_D}}, TileShape, ClusterShape,
                                             {{MAINLOOP_SCHEDULE}}, {{EPILOGUE_SCHEDULE}}, Evt>;

// ptrs[i]: device array of per-group pointers of the i-th leaf; vec[i]: 1 = vector, 0 = one value.
static Evt::Arguments make_evt_args(void const* const* ptrs, int64_t const* vec) {
  return {{EVT_ARGS}};
}

extern "C" int scalemm_nvfp4_grouped_gemm(scalemm::Nvfp4GroupedGemmArgs const* a) {
  return Gemm::run(*a, &make_evt_args);
}
