// One SM90 grouped (ptr-array) GEMM with one epilogue tree, rendered by scalemm.grouped.
{{PRELUDE}}#include "scalemm/sm90/grouped_gemm.cuh"

using TileShape = cute::Shape<cute::_{{TILE_M}}, cute::_{{TILE_N}}, cute::_{{TILE_K}}>;
using ClusterShape = cute::Shape<cute::_{{CLUSTER_M}}, cute::_{{CLUSTER_N}}, cute::_1>;
using Evt = {{EVT_TYPE}};
using Gemm = scalemm::Sm90GroupedGemm<{{ELEMENT_A}}, {{ELEMENT_B}}, {{ELEMENT_D}}, {{LAYOUT_D}}, TileShape,
                                      ClusterShape, {{MAINLOOP_SCHEDULE}}, {{EPILOGUE_SCHEDULE}}, Evt,
                                      {{WGRAD}}, {{ELEMENT_C}}>;

// ptrs[i]: device array of per-group pointers of the i-th leaf; vec[i]: 1 = vector, 0 = one value.
static Evt::Arguments make_evt_args(void const* const* ptrs, int64_t const* vec) {
  return {{EVT_ARGS}};
}

// fprop: a [T,K], b [G,N,K], d [T,N]. wgrad: a = dy_t [N,T], b = x_t [K,T] (T = padded columns),
// d [G,N,K], zeros: >= 16 * max(N, K) zero bytes (empty groups reduce over it). See GroupedGemmArgs.
// A tree with a Source leaf reads d itself (ELEMENT_C = ELEMENT_D): the GEMM accumulates into d.
extern "C" int scalemm_grouped_gemm(scalemm::GroupedGemmArgs const* a) {
  if (a->leaf_count > scalemm::kMaxLeaves) return scalemm::kCannotImplement;
  return Gemm::run(*a, &make_evt_args);
}
