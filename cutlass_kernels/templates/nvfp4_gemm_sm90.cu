// One SM90 NVFP4-weight GEMM with one epilogue tree, rendered by scalemm.gemm.
{{PRELUDE}}#include "scalemm/sm90/nvfp4_gemm.cuh"

using TileShape = cute::Shape<cute::_{{TILE_M}}, cute::_{{TILE_N}}, cute::_{{TILE_K}}>;
using ClusterShape = cute::Shape<cute::_{{CLUSTER_M}}, cute::_{{CLUSTER_N}}, cute::_1>;
using Evt = {{EVT_TYPE}};
using Gemm = scalemm::sm90::Nvfp4Gemm<{{ELEMENT_B}}, {{ELEMENT_D}}, TileShape, ClusterShape, {{MAINLOOP_SCHEDULE}},
                                      {{EPILOGUE_SCHEDULE}}, Evt, {{TILE_SCHEDULER}}, {{TOKENS_ON_A}}>;

static typename Evt::Arguments evt_arguments(scalemm::Nvfp4GemmArgs const* a) {
  void const* const* ptrs = a->leaf_ptrs;
  int64_t const* vec = a->leaf_is_vector;
  return {{EVT_ARGS}};
}

extern "C" int scalemm_nvfp4_gemm(scalemm::Nvfp4GemmArgs const* a) { return Gemm::run(*a, evt_arguments(a)); }

extern "C" int scalemm_nvfp4_gemm_workspace(scalemm::GemmWorkspaceArgs const* a) {
  auto const* call = static_cast<scalemm::Nvfp4GemmArgs const*>(a->call);
  return Gemm::workspace_bytes(*call, evt_arguments(call), static_cast<int64_t*>(a->bytes));
}
