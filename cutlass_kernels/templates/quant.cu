// scalemm quantizers for one input dtype ({{IN_T}}): thin extern "C" launchers over
// scalemm/quant.cuh, each taking its parameter struct of scalemm/abi.h. Each returns 0 or a
// cudaError_t; none allocates or synchronises.
#include "scalemm/abi.h"
#include "scalemm/quant.cuh"

using InT = {{IN_T}};
namespace q = scalemm::quant;

// Every entry point with an amax first zeroes the non-null amax outputs and fills them from one
// read of x (launch_amax_stats: tensor amax, tensor amax of the RHT'd columns when rht, per-row
// amax [M], per-column amax [K], RHT'd if rht), then quantizes: one call from Python, the
// launches in stream order. Pass all four stats_* null when the amaxes are given. Exception: the
// rowwise copy alone with per-token amaxes to compute is one kernel (quantize_rows_kernel), which
// writes the amaxes itself.

// NVFP4 rowwise copy (q_row non-null) and/or columnwise copy of x.T (q_col non-null). amax_*:
// 0-d (token = 0) or per row of that copy (token = 1). alpha_*: S_dec, same shape.
extern "C" int scalemm_quantize_nvfp4(scalemm::QuantizeNvfp4Args const* a) {
  cudaStream_t stream = static_cast<cudaStream_t>(a->stream);
  if (a->stats_row_amax && a->q_row && !a->q_col && !a->rht && a->row_token)  // per-token rows: one kernel
    return q::launch_nvfp4_token_rows<InT>(a->x, a->m, a->k, a->q_row, a->s_row, a->exact_row, a->alpha_row,
                                           a->stats_row_amax,
                                           (a->m + 127) / 128 * 128, q::DenseRows{a->m, nullptr, 0}, int(a->sr),
                                           a->seed, a->offset, a->seed_device, stream);
  if (a->stats_amax || a->stats_amax_rht || a->stats_row_amax || a->stats_col_amax) {
    const int err = q::launch_amax_stats<InT>(a->x, a->m, a->k, a->stats_amax, a->stats_amax_rht,
                                              a->stats_row_amax, a->stats_col_amax, int(a->rht), stream);
    if (err) return err;
  }
  return q::launch_nvfp4<InT>(a->x, a->m, a->k, a->q_row, a->s_row, a->exact_row, a->alpha_row, a->amax_row,
                              int(a->row_token),
                              a->q_col, a->s_col, a->alpha_col, a->amax_col, int(a->col_token), int(a->rht),
                              int(a->sr), a->seed, a->offset, a->seed_device, stream);
}

// FP8 e4m3: amax pass into amax_row / amax_col (per row / per column for token, else 0-d; the
// two may be the same buffer), then the rowwise and/or columnwise copies.
extern "C" int scalemm_quantize_fp8(scalemm::QuantizeFp8Args const* a) {
  cudaStream_t stream = static_cast<cudaStream_t>(a->stream);
  if (a->amax_given) {  // delayed scaling: the given amax, no amax pass; the copies' pass writes amax_out
    if (a->row_token || a->col_token || a->amax_row != a->amax_col) return static_cast<int>(cudaErrorInvalidValue);
    return q::launch_fp8<InT>(a->x, a->m, a->k, a->q_row, a->scale_inv_row, a->amax_row, 0, a->q_col,
                              a->scale_inv_col, a->amax_col, 0, stream, a->amax_out);
  }
  if (a->amax_out) return static_cast<int>(cudaErrorInvalidValue);  // current scaling: amax_row is the amax
  if (a->row_token && a->q_row && !a->q_col)  // per-token rows: one kernel, amax included
    return q::launch_fp8_token_rows<InT>(a->x, a->m, a->k, a->q_row, a->scale_inv_row, a->amax_row, stream);
  const int err = a->row_token
                      ? q::launch_amax_stats<InT>(a->x, a->m, a->k, nullptr, nullptr, a->q_row ? a->amax_row : nullptr,
                                                  a->q_col ? a->amax_col : nullptr, 0, stream)
                      : q::launch_amax_stats<InT>(a->x, a->m, a->k, a->amax_row, nullptr, nullptr, nullptr, 0, stream);
  if (err) return err;
  return q::launch_fp8<InT>(a->x, a->m, a->k, a->q_row, a->scale_inv_row, a->amax_row, int(a->row_token), a->q_col,
                            a->scale_inv_col, a->amax_col, int(a->col_token), stream);
}

extern "C" int scalemm_quantize_mxfp8(scalemm::QuantizeMxfp8Args const* a) {
  return q::launch_mxfp8<InT>(a->x, a->m, a->k, a->q_row, a->s_row, a->q_col, a->s_col,
                              static_cast<cudaStream_t>(a->stream));
}
