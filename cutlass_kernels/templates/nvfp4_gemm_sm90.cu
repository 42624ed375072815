// One SM90 NVFP4-weight GEMM with one epilogue tree, rendered by scalemm.gemm.
#include "scalemm/sm90/nvfp4_gemm.cuh"

using TileShape = cute::Shape<cute::_{{TILE_M}}, cute::_{{TILE_N}}, cute::_{{TILE_K}}>;
using ClusterShape = cute::Shape<cute::_{{CLUSTER_M}}, cute::_{{CLUSTER_N}}, cute::_1>;
using Evt = {{EVT_TYPE}};
using Gemm = scalemm::sm90::Nvfp4Gemm<{{ELEMENT_B}}, {{ELEMENT_D}}, TileShape, ClusterShape, {{MAINLOOP_SCHEDULE}},
                                      {{EPILOGUE_SCHEDULE}}, Evt, {{TILE_SCHEDULER}}>;

extern "C" int scalemm_nvfp4_gemm(scalemm::Nvfp4GemmArgs const* a) {
  void const* const* ptrs = a->leaf_ptrs;
  int64_t const* vec = a->leaf_is_vector;
  typename Evt::Arguments evt_args = {{EVT_ARGS}};
  return Gemm::run(*a, evt_args);
}
