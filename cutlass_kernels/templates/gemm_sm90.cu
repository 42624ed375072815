// One SM90 GEMM with one epilogue tree, rendered by scalemm.cutlass_kernels.configs.
{{PRELUDE}}#include "scalemm/sm90/gemm.cuh"

using TileShape = cute::Shape<cute::_{{TILE_M}}, cute::_{{TILE_N}}, cute::_{{TILE_K}}>;
using ClusterShape = cute::Shape<cute::_{{CLUSTER_M}}, cute::_{{CLUSTER_N}}, cute::_1>;
using Evt = {{EVT_TYPE}};
using Gemm = scalemm::Sm90Gemm<{{ELEMENT_A}}, {{ELEMENT_B}}, {{ELEMENT_D}}, {{LAYOUT_D}}, TileShape,
                               ClusterShape, {{MAINLOOP_SCHEDULE}}, {{EPILOGUE_SCHEDULE}}, Evt,
                               {{ELEMENT_C}}, {{TILE_SCHEDULER}}>;

// ptrs[i]: device pointer of the i-th epilogue leaf; vec[i]: 1 = vector, 0 = one value.
static typename Evt::Arguments evt_arguments(scalemm::GemmArgs const* a) {
  void const* const* ptrs = a->leaf_ptrs;
  int64_t const* vec = a->leaf_is_vector;
  return {{EVT_ARGS}};
}

extern "C" int scalemm_gemm(scalemm::GemmArgs const* a) { return Gemm::run(*a, evt_arguments(a)); }

extern "C" int scalemm_gemm_workspace(scalemm::GemmWorkspaceArgs const* a) {
  auto const* call = static_cast<scalemm::GemmArgs const*>(a->call);
  return Gemm::workspace_bytes(*call, evt_arguments(call), static_cast<int64_t*>(a->bytes));
}
