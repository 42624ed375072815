// One SM90 grouped (ptr-array) GEMM with one epilogue tree, rendered by scalemm.grouped.
#include "scalemm/sm90_grouped_gemm.cuh"

using TileShape = cute::Shape<cute::_{{TILE_M}}, cute::_{{TILE_N}}, cute::_{{TILE_K}}>;
using ClusterShape = cute::Shape<cute::_{{CLUSTER_M}}, cute::_{{CLUSTER_N}}, cute::_1>;
using Evt = {{EVT_TYPE}};
using Gemm = scalemm::Sm90GroupedGemm<{{ELEMENT_A}}, {{ELEMENT_B}}, {{ELEMENT_D}}, {{LAYOUT_D}}, TileShape,
                                      ClusterShape, {{MAINLOOP_SCHEDULE}}, {{EPILOGUE_SCHEDULE}}, Evt,
                                      {{WGRAD}}>;

// ptrs[i]: device array of per-group pointers of the i-th leaf; vec[i]: 1 = vector, 0 = one value.
static Evt::Arguments make_evt_args(void const* const* ptrs, int64_t const* vec) {
  return {{EVT_ARGS}};
}

// fprop: a [T,K], b [G,N,K], d [T,N]. wgrad: a = dy_t [N,T], b = x_t [K,T] (T = padded columns),
// d [G,N,K], zeros: >= 16 * max(N, K) zero bytes (empty groups reduce over it).
extern "C" int scalemm_grouped_gemm(void const* a, void const* b, void* d, void const* offsets, int64_t G,
                                    int64_t T, int64_t N, int64_t K, void const* zeros,
                                    void const* const* leaf_base, int64_t const* leaf_mode,
                                    int64_t const* leaf_bytes, int64_t const* leaf_group_stride,
                                    int64_t n_leaves, void* workspace, int64_t workspace_bytes,
                                    int64_t device, void* stream) {
  if (n_leaves > scalemm::kMaxLeaves) return scalemm::kCannotImplement;
  scalemm::GroupedLeaves leaves{};
  leaves.count = int(n_leaves);
  for (int i = 0; i < leaves.count; ++i) {
    leaves.base[i] = leaf_base[i];
    leaves.mode[i] = int(leaf_mode[i]);
    leaves.elem_bytes[i] = int(leaf_bytes[i]);
    leaves.group_stride[i] = leaf_group_stride[i];
  }
  return Gemm::run(a, b, d, static_cast<int const*>(offsets), int(G), T, int(N), int(K), zeros, leaves,
                   &make_evt_args, workspace, workspace_bytes, int(device), static_cast<cudaStream_t>(stream));
}
