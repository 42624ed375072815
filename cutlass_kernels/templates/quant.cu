// scalemm quantizers for one input dtype ({{IN_T}}): thin extern "C" launchers over
// scalemm/quant.cuh. Each returns 0 or a cudaError_t; none allocates or synchronises.
#include "scalemm/quant.cuh"

using InT = {{IN_T}};
namespace q = scalemm::quant;

// Zeroes the non-null outputs and fills them from one read of x: tensor amax, tensor amax of
// the RHT'd columnwise data (rht != 0), per-row amax [M], per-column amax [K] (RHT'd if rht).
extern "C" int scalemm_amax_stats(const void* x, int64_t M, int64_t K, float* amax, float* amax_rht,
                                  float* row_amax, float* col_amax, int rht, cudaStream_t stream) {
  return q::launch_amax_stats<InT>(x, M, K, amax, amax_rht, row_amax, col_amax, rht, stream);
}

// NVFP4 rowwise copy (q_row non-null) and/or columnwise copy of x.T (q_col non-null). amax_*:
// 0-d (token = 0) or per row of that copy (token = 1). alpha_*: S_dec, same shape.
extern "C" int scalemm_quantize_nvfp4(const void* x, int64_t M, int64_t K, uint8_t* q_row, uint8_t* s_row,
                                      float* alpha_row, const float* amax_row, int row_token, uint8_t* q_col,
                                      uint8_t* s_col, float* alpha_col, const float* amax_col, int col_token,
                                      int rht, int sr, uint64_t seed, uint64_t offset, cudaStream_t stream) {
  return q::launch_nvfp4<InT>(x, M, K, q_row, s_row, alpha_row, amax_row, row_token, q_col, s_col, alpha_col,
                              amax_col, col_token, rht, sr, seed, offset, stream);
}

extern "C" int scalemm_quantize_fp8(const void* x, int64_t M, int64_t K, uint8_t* q_row, float* scale_inv_row,
                                    const float* amax_row, int row_token, uint8_t* q_col, float* scale_inv_col,
                                    const float* amax_col, int col_token, cudaStream_t stream) {
  return q::launch_fp8<InT>(x, M, K, q_row, scale_inv_row, amax_row, row_token, q_col, scale_inv_col, amax_col,
                            col_token, stream);
}

extern "C" int scalemm_quantize_mxfp8(const void* x, int64_t M, int64_t K, uint8_t* q_row, uint8_t* s_row,
                                      uint8_t* q_col, uint8_t* s_col, cudaStream_t stream) {
  return q::launch_mxfp8<InT>(x, M, K, q_row, s_row, q_col, s_col, stream);
}
