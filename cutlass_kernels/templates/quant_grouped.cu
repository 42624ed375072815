// scalemm grouped (MoE) quantizers for one input dtype ({{IN_T}}): thin extern "C" launchers over
// scalemm/quant_grouped.cuh, each taking its parameter struct of scalemm/abi.h. Each returns 0 or
// a cudaError_t; none allocates, reads the offsets on the host or synchronises (CUDA-graph
// capturable). `table` is the int32 group table of abi.h (written by the launch).
#include "scalemm/abi.h"
#include "scalemm/quant_grouped.cuh"

using InT = {{IN_T}};
namespace qg = scalemm::quant::grouped;

// FP8 e4m3: rowwise [T, K] (q_row, scale_inv [G] or [T]) and/or the wgrad-layout columnwise copy
// [K, W] (q_col, scale_inv [G] or [G, K]). Amax scratch: g_amax [G] (token = 0), row_amax [T] and
// gcol_amax [G, K] (token = 1). The rowwise copy alone with token = 1 is one kernel that reads neither the
// table nor row_amax: both may be null there. col_group_rows = n > 0 (stacked weights, n rows per group): the
// columnwise copy is stacked W^T [G * K, n] instead of the wgrad layout. amax_given (token = 0, delayed scaling):
// g_amax is the per-group amax to scale from, no stats pass, and amax_out [G] (or null) receives max|x| per group.
extern "C" int scalemm_quantize_fp8_grouped(scalemm::QuantizeFp8GroupedArgs const* a) {
  return qg::launch_fp8_grouped<InT>(a->x, a->tokens, a->k, a->offsets, int(a->groups), a->table, int(a->token),
                                     a->g_amax, a->row_amax, a->gcol_amax, a->q_row, a->sinv_row, a->q_col, a->w,
                                     a->sinv_col, a->col_group_rows, static_cast<cudaStream_t>(a->stream),
                                     int(a->amax_given), a->amax_out);
}

// Zero the rows of a grouped GEMM's output [rows, row_bytes] past the groups (see abi.h); any dtype.
extern "C" int scalemm_zero_rows_past_groups(scalemm::ZeroRowsPastGroupsArgs const* a) {
  return qg::launch_zero_rows_past_groups(a->out, a->rows, a->row_bytes, a->offsets, int(a->groups),
                                          static_cast<cudaStream_t>(a->stream));
}

// NVFP4: rowwise [T, K/2] with swizzled scales of scale_rows x Cp bytes grouped along M, alpha
// [G] or [T]; and/or the wgrad-layout columnwise copy [K, W/2] with scales grouped along K
// (Rp x cb_total bytes), alpha [G] or [G, K], RHT-transformed if rht. Amax scratch: g_amax [G]
// (token = 0), row_amax [T] (token, rowwise), col_amax ([G, K] for token, [G] for tensor with rht).
// sr: stochastic rounding of both copies from Philox (seed, offset).
extern "C" int scalemm_quantize_nvfp4_grouped(scalemm::QuantizeNvfp4GroupedArgs const* a) {
  return qg::launch_nvfp4_grouped<InT>(a->x, a->tokens, a->k, a->offsets, int(a->groups), a->table, int(a->token),
                                       a->g_amax, a->row_amax, a->col_amax, a->q_row, a->s_row, a->scale_rows,
                                       a->exact_row, a->alpha_row, a->q_col, a->w, a->s_col, a->cb_total, a->alpha_col,
                                       int(a->rht), int(a->sr), a->seed, a->offset, a->seed_device,
                                       static_cast<cudaStream_t>(a->stream));
}

// MXFP8 rowwise [T, K] with e8m0 scales (scale_rows x Cp bytes) grouped along M.
extern "C" int scalemm_quantize_mxfp8_grouped(scalemm::QuantizeMxfp8GroupedArgs const* a) {
  return qg::launch_mxfp8_grouped<InT>(a->x, a->tokens, a->k, a->offsets, int(a->groups), a->table, a->q_row,
                                       a->s_row, a->scale_rows, static_cast<cudaStream_t>(a->stream));
}
