// scalemm's C ABI: every constant and parameter struct that the extern "C" launchers and Python
// both use is defined here, once. Python reads this file (scalemm/abi.py parses the enums,
// constexprs and structs below) instead of repeating them, so the two cannot drift apart.
//
// Rules that keep the file parseable: one declaration per line; struct fields are int64_t,
// int32_t, uint64_t, float, or pointers (`T*` / `T const*`), optionally arrays `name[N]` with N
// a constant defined above; enums are `enum Name : int { kA = 1, kB = 2 };` on one line each entry.
#pragma once

#include <stdint.h>

namespace scalemm {

// Launcher return codes: 0 = success, 1..999 a cudaError_t, 1000 + cutlass::Status, or these.
enum LaunchCode : int {
  kOk = 0,
  kWorkspaceTooSmall = 2001,
  kCannotImplement = 2002,
  kBadArgument = 2003,
};
constexpr int kCutlassStatusBase = 1000;

// Epilogue leaves a kernel can take (pointer-taking leaves of an epilogue tree).
constexpr int kMaxLeaves = 8;

// Grouped GEMMs: how the i-th epilogue leaf's base pointer becomes one pointer per group.
enum GroupedLeafMode : int {
  kLeafNull = 0,         // absent (nullable leaf): CUTLASS reads its null default
  kLeafPerRow = 1,       // [T] per token: base + row_start(g)            (vector)
  kLeafPerGroupVec = 2,  // [G, L] per expert channel: base + g * L       (vector; L = its length)
  kLeafPerGroup = 3,     // [G] one value per group: base + g             (scalar broadcast)
  kLeafShared = 4,       // [N] the same vector for every group: base     (vector)
  kLeafOne = 5,          // one value for everything: base                (scalar broadcast)
};

// The int32 group table of the grouped quantizers (scalemm/quant_grouped.cuh) and of the grouped
// NVFP4 dequant, in caller scratch, written by a setup kernel from the offsets:
//   ends [G] | kGroupTablePositionTables position tables of G + 1 ints each (in GroupTablePosition
//   order) | from the next multiple of kGroupTileInts ints (16 bytes): kGroupTileInts ints per
//   128-row tile of the rowwise scale space (NVFP4 / MXFP8 rowwise only).
// Position table A holds the groups' exclusive starts in positions padded to A per group:
// pos_A[g] = sum_{j<g} ceil(m_j / A) * A, pos_A[G] the total.
enum GroupTablePosition : int {
  kGroupTablePos16 = 0,   // wgrad columns (16-aligned group starts)
  kGroupTablePos64 = 1,   // NVFP4 wgrad scale columns x 16 (64-aligned group starts)
  kGroupTablePos128 = 2,  // rowwise scale rows (sf_offsets, 128-aligned group starts)
};
constexpr int kGroupTablePositionTables = 3;
constexpr int kGroupTileInts = 4;  // one tile entry: {first row, rows of x in the tile, group, unused}

// FP8 e4m3 GEMM on SM90 (scalemm/sm90/gemm.cuh), in the kernel's problem coordinates:
// D [m, n] = epilogue(A [m, k] @ B [n, k]^T), A and B K-major. scalemm.gemm passes A = a, B = b
// (m = tokens, n = out channels) or, for a swap-AB kernel, A = b, B = a (m = out channels,
// n = tokens; the kernel writes D column-major, the same memory as row-major [tokens, out]).
struct GemmArgs {
  void const* a;              // e4m3 [m, k], K-major
  void const* b;              // e4m3 [n, k], K-major
  void const* c;              // the epilogue's Source operand [m, n] in D's layout, or null when the tree has none
  void* d;                    // output [m, n]
  int64_t m;
  int64_t n;
  int64_t k;
  void const* leaf_ptrs[kMaxLeaves];   // device pointer of the i-th epilogue leaf (null: absent)
  int64_t leaf_is_vector[kMaxLeaves];  // 1 = a vector, 0 = one value broadcast
  void* workspace;            // stream-K partials, or null (only stream-K kernels take one)
  int64_t workspace_bytes;
  int64_t device;             // CUDA device index
  int64_t raster;             // 0 along M, 1 along N, 2 CUTLASS's heuristic
  int64_t swizzle;            // the tile scheduler's max swizzle size
  int64_t splits;             // stream-K splits (1 = the heuristic decides)
  void* stream;               // cudaStream_t
};

// Grouped (MoE) FP8 GEMM on SM90 (scalemm/sm90/grouped_gemm.cuh), fprop or wgrad as compiled.
// fprop: out[rows of g] = epilogue(a[rows of g] @ b[g]^T), a [tokens, k] rows sorted by group,
//   b [groups, n, k], d [tokens, n]; rows past the last group are not written.
// wgrad: d[g] [n, k] = epilogue(dY_g^T X_g) with a = dy_t [n, tokens], b = x_t [k, tokens] in the
//   wgrad layout (tokens = W, its padded column count; group g from the 16-aligned column p_g).
struct GroupedGemmArgs {
  void const* a;              // fprop: e4m3 [tokens, k]; wgrad: dy_t e4m3 [n, tokens]
  void const* b;              // fprop: e4m3 [groups, n, k]; wgrad: x_t e4m3 [k, tokens]
  void* d;                    // fprop: [tokens, n]; wgrad: [groups, n, k]
  void const* offsets;        // int32 [groups] cumulative row ends (device)
  int64_t groups;
  int64_t tokens;             // fprop: rows of a; wgrad: W, the columns of dy_t / x_t
  int64_t n;
  int64_t k;
  void const* zeros;          // wgrad: >= 16 * max(n, k) zero bytes (empty groups reduce over them), or null: the
                              // launcher carves them from the workspace and zeroes them in its setup kernel; fprop: null
  int64_t zero_rows_past_groups;  // fprop: nonzero also sets d's rows past the last group to zero (in the setup kernel)
  void const* leaf_base[kMaxLeaves];      // the i-th epilogue leaf's base pointer (null: absent)
  int64_t leaf_mode[kMaxLeaves];          // GroupedLeafMode
  int64_t leaf_elem_bytes[kMaxLeaves];
  int64_t leaf_group_stride[kMaxLeaves];  // elements per group for kLeafPerGroupVec
  int64_t leaf_count;         // entries used of the leaf arrays (<= kMaxLeaves)
  void* workspace;            // the setup arrays, then CUTLASS's own workspace
  int64_t workspace_bytes;
  int64_t device;             // CUDA device index
  void* stream;               // cudaStream_t
};

// NVFP4 weights x bf16/fp16 activations on SM90 (scalemm/sm90/nvfp4_gemm.cuh).
// D [tokens, n] = epilogue(X [tokens, k] @ dequant(W [n, k])^T).
struct Nvfp4GemmArgs {
  void const* weight;         // prepared NVFP4 weights, uint8 [n, k_pad / 2]
  void const* weight_scales;  // e4m3 block scales of W, 128x4 swizzled, ceil(n/128)*128 x scale_cols bytes
  void const* x;              // activations [tokens, k], bf16 or fp16 as compiled, or (W4A4 kernels) their
                              // NVFP4 codes uint8 [tokens, k / 2]
  void const* x_scales;       // W4A4: the activations' e4m3 block scales, 128x4 swizzled, row pitch scale_cols; else null
  void* d;                    // output [tokens, n]
  int64_t n;
  int64_t tokens;
  int64_t k;
  int64_t k_pad;              // k rounded up to 64
  int64_t scale_cols;         // Cp: ceil(k / 16) rounded up to 4
  void const* leaf_ptrs[kMaxLeaves];  // device pointer of the i-th epilogue leaf
  int64_t leaf_is_vector[kMaxLeaves];  // 1 = a vector, 0 = one value broadcast
  void* workspace;
  int64_t workspace_bytes;
  int64_t device;
  int64_t raster;             // 0 along M, 1 along N, 2 CUTLASS's heuristic
  int64_t swizzle;
  int64_t splits;             // stream-K splits (1 = the heuristic decides)
  void* stream;
};

// The workspace a GEMM call needs, without launching it (scalemm_gemm_workspace, scalemm_nvfp4_gemm_workspace):
// CUTLASS's stream-K partial sums and locks for that shape on that GPU, 0 for kernels without stream-K.
struct GemmWorkspaceArgs {
  void const* call;  // GemmArgs const* (FP8) or Nvfp4GemmArgs const* (NVFP4): the call (its pointers are not read)
  void* bytes;       // int64_t*: receives the workspace size in bytes
};

// NVFP4-weight GEMM for few tokens on SM90 (scalemm/sm90/nvfp4_skinny.cuh), dense or grouped:
// out[rows of g] = act(scale_a * scale_b * (x[rows of g] @ dequant(W_g)^T) + bias) for each group g
// (dense: one group of all `tokens` rows, tokens <= 8 x the kernel's token tiles; grouped: any rows
// per group, in blocks of that many), K split over `splits` CTAs of one cluster.
constexpr int kSkinnyMaxSplits = 8;  // CTAs along K: one portable cluster
// The "resident" main loop's shared memory for a CTA's tokens (bytes, with 16 of alignment): token rows of
// (K chunks of the split x 128 + 8) elements of 2 bytes; the launcher refuses a split whose rows exceed it. 48 KB
// keeps 4 CTAs per SM.
constexpr int kSkinnyResidentTokenBytes = 49152;
struct Nvfp4SkinnyGemmArgs {
  void const* weight;         // packed e2m1 codes uint8 [groups * n, k / 2] exactly as the quantizer wrote them
  void const* weight_scales;  // e4m3 block scales of W, 128x4 swizzled, row pitch scale_cols; group g's block at
                              // g * ceil(n / 128) * 128 * scale_cols bytes (quantize_nvfp4_stacked's batched layout)
  void const* x;              // activations [tokens, k] contiguous, bf16 or fp16 as compiled, or (W4A4 kernels)
                              // their NVFP4 codes uint8 [tokens, k / 2]; 16-byte aligned
  void const* x_scales;       // W4A4: the activations' e4m3 block scales, 128x4 swizzled, row pitch scale_cols; else null
  void const* x_sf_offsets;   // W4A4 grouped: int32 [groups], the scale row of each group's first row; else null
  void* d;                    // output [tokens, n] contiguous; rows outside every group are not written
  void const* offsets;        // grouped: int32 [groups] cumulative row ends (device); dense: null
  int64_t groups;             // 1 when dense
  void const* scale_a;        // fp32, as scale_a_mode (GroupedLeafMode): kLeafOne, kLeafPerRow [tokens], kLeafPerGroup
  int64_t scale_a_mode;
  void const* scale_b;        // fp32, as scale_b_mode: kLeafOne, kLeafPerGroup [groups], kLeafPerGroupVec [groups, n]
  int64_t scale_b_mode;
  void const* bias;           // the output type, as bias_mode: kLeafNull, kLeafShared [n], kLeafPerGroupVec [groups, n]
  int64_t bias_mode;
  int64_t n;
  int64_t tokens;
  int64_t k;                  // a multiple of 32
  int64_t scale_cols;         // Cp: ceil(k / 16) rounded up to 4
  int64_t splits;             // CTAs along K per cluster, 1..kSkinnyMaxSplits, or 0: the launcher fits them to the GPU
  int64_t device;
  void* stream;
};

// The split count a skinny-kernel call would run, without launching it (scalemm_nvfp4_skinny_splits).
struct Nvfp4SkinnySplitsArgs {
  void const* call;  // Nvfp4SkinnyGemmArgs const*: the call (its splits = 0: the launcher's choice for this GPU)
  void* splits;      // int64_t*: receives the split count, 1..kSkinnyMaxSplits, or 0 when there is nothing to do
};

// Grouped (MoE) NVFP4-weight GEMM on SM90 (scalemm/sm90/nvfp4_grouped_gemm.cuh).
// out[rows of g] = epilogue(x[rows of g] @ dequant(W_g)^T) for each group g of the offsets.
struct Nvfp4GroupedGemmArgs {
  void const* weight;         // prepared NVFP4 expert weights, uint8 [groups, n, k_pad / 2]
  void const* weight_scales;  // e4m3 128x4 swizzled, batched: expert g at g * ceil(n/128)*128 * scale_cols
  void const* x;              // activations [tokens, k], rows sorted by group, or (W4A4) their NVFP4 codes [tokens, k / 2]
  void const* x_scales;       // W4A4: the activations' e4m3 scales, 128x4 swizzled, grouped along M; else null
  void const* x_sf_offsets;   // W4A4: int32 [groups], the scale row of each group's first row; else null
  void* d;                    // output [tokens, n]; rows past the last group are not written
  void const* offsets;        // int32 [groups] cumulative row ends (device)
  int64_t groups;
  int64_t n;
  int64_t tokens;
  int64_t k;
  int64_t k_pad;
  int64_t scale_cols;
  void const* leaf_base[kMaxLeaves];      // the i-th epilogue leaf's base pointer (null: absent)
  int64_t leaf_mode[kMaxLeaves];          // GroupedLeafMode
  int64_t leaf_elem_bytes[kMaxLeaves];
  int64_t leaf_group_stride[kMaxLeaves];  // elements per group for kLeafPerGroupVec
  int64_t leaf_count;
  void* workspace;
  int64_t workspace_bytes;
  int64_t device;
  void* stream;
};

// NVFP4 rows -> bf16 GEMM operand rows, value(code) * block scale, no global scale
// (scalemm/nvfp4_dequant.cuh). Grouped rows when offsets is non-null.
struct Nvfp4DequantArgs {
  void const* qdata;       // uint8 [rows, k / 2]
  void const* scales;      // e4m3, 128x4 swizzled, row pitch scale_cols bytes
  void* out;               // bf16 [rows, k]
  int64_t rows;
  int64_t k;
  int64_t scale_cols;      // Cp
  void const* offsets;     // int32 [groups] cumulative row ends, or null for dense rows
  int64_t groups;
  void* table;             // int32 scratch for the group table above, no tile entries (grouped only)
  void* stream;
};

// NVFP4 packed codes -> the byte order the SM90 kernels read (scalemm/nvfp4_dequant.cuh, prepare_sm90).
struct Nvfp4PrepareArgs {
  void const* qdata;  // uint8 [rows, half], half = K / 2
  void* out;          // uint8 [rows, ceil(K / 64) * 32]
  int64_t rows;
  int64_t half;
  void* stream;
};

// An NVFP4 wgrad-layout copy -> bf16 value(code) x block scale, no global scale (wgrad_to_bf16).
struct Nvfp4WgradDecodeArgs {
  void const* qdata;   // uint8 [k, w / 2]
  void const* scales;  // e4m3, each group's own swizzled matrix
  void const* base;    // int64 [w / 16]: first scale byte of the block's group, -1 for columns past every group
  void const* local;   // int32 [w / 16]: the block's column in its group's matrix
  void const* cp;      // int32 [w / 16]: that matrix's padded width
  void* out;           // bf16 [k, w]
  int64_t k;
  int64_t w;
  void* stream;
};

// Output element types of the NVFP4 grouped wgrad's scaling pass.
enum OutKind : int {
  kOutBf16 = 0,
  kOutF16 = 1,
  kOutF32 = 2,
};

// The NVFP4 grouped wgrad's global scales (wgrad_scale): out = fl(fl(alpha_dy * alpha_x) * acc), 0 in empty groups.
struct Nvfp4WgradScaleArgs {
  void const* acc;       // bf16 [groups, n, k]
  void* out;             // [groups, n, k] of out_kind (may be acc itself for bf16)
  void const* alpha_dy;  // fp32 [groups] (dy_vec 0) or [groups, n] (dy_vec 1)
  int64_t dy_vec;
  void const* alpha_x;   // fp32 [groups] (x_vec 0) or [groups, k] (x_vec 1)
  int64_t x_vec;
  void const* has_rows;  // uint8 [groups]: the group holds rows
  int64_t groups;
  int64_t n;
  int64_t k;
  int64_t out_kind;      // OutKind
  void* stream;
};

// ---------------------------------------------------------------------------------------------
// Quantizers (scalemm/quant.cuh), one library per input dtype. x is [m, k] of that dtype; the
// rowwise copy quantizes x, the columnwise copy x^T [k, m]; a null q_row / q_col skips that copy.
// Each launcher returns 0 or a cudaError_t.
// ---------------------------------------------------------------------------------------------

// NVFP4. Every non-null stats_* output is zeroed and filled by one amax pass over x first; pass
// them all null when the amaxes are given. amax_* / alpha_* are 0-d (*_token = 0) or one per
// row of that copy (*_token = 1).
struct QuantizeNvfp4Args {
  void const* x;              // [m, k]
  int64_t m;
  int64_t k;
  float* stats_amax;          // 0-d amax(|x|), or null
  float* stats_amax_rht;      // 0-d amax of the RHT'd columnwise data, or null
  float* stats_row_amax;      // [m] per-row amax, or null
  float* stats_col_amax;      // [k] per-column amax (RHT'd when rht), or null
  uint8_t* q_row;             // rowwise codes uint8 [m, k / 2], or null
  uint8_t* s_row;             // rowwise e4m3 block scales, 128x4 swizzled
  void* exact_row;            // bf16 [m, k] = value(code) x block scale of the rowwise copy (no alpha), or null
  float* alpha_row;           // rowwise S_dec, 0-d or [m]
  float const* amax_row;      // the amax the rowwise copy is scaled from, 0-d or [m]
  int64_t row_token;          // 1: per-row global scales, 0: one per tensor
  uint8_t* q_col;             // columnwise codes uint8 [k, m / 2], or null
  uint8_t* s_col;             // columnwise e4m3 block scales, 128x4 swizzled
  float* alpha_col;           // columnwise S_dec, 0-d or [k]
  float const* amax_col;      // the amax the columnwise copy is scaled from, 0-d or [k]
  int64_t col_token;
  int64_t rht;                // 1: the columnwise copy goes through the 16-point RHT
  int64_t sr;                 // 1: stochastic rounding from Philox (seed, offset)
  uint64_t seed;
  uint64_t offset;
  uint64_t const* seed_device;  // [2] on the device, or null: (seed, added to offset) read at run time
  void* stream;               // cudaStream_t
};

// FP8 e4m3 with current scaling: an amax pass into amax_row / amax_col (per row / per column
// when *_token, else 0-d; the two may be one buffer), then the copies. Delayed scaling (tensor
// scaling only): amax_given = 1 and amax_row = amax_col = the given 0-d amax: no amax pass, and the
// copies' pass writes max|x| into amax_out (zeroed first; or null).
struct QuantizeFp8Args {
  void const* x;              // [m, k]
  int64_t m;
  int64_t k;
  uint8_t* q_row;             // e4m3 [m, k], or null
  float* scale_inv_row;       // 0-d or [m]
  float* amax_row;            // amax scratch of the rowwise copy, 0-d or [m]
  int64_t row_token;
  uint8_t* q_col;             // e4m3 [k, m], or null
  float* scale_inv_col;       // 0-d or [k]
  float* amax_col;            // amax scratch of the columnwise copy, 0-d or [k]
  int64_t col_token;
  int64_t amax_given;         // 1: amax_row (= amax_col, 0-d) is the amax to scale from (delayed scaling)
  float* amax_out;            // 0-d max|x| written by the quantize pass (amax_given only), or null
  void* stream;               // cudaStream_t
};

// MXFP8: e4m3 data and e8m0 scales per 32 elements (128x4 swizzled).
struct QuantizeMxfp8Args {
  void const* x;              // [m, k]
  int64_t m;
  int64_t k;
  uint8_t* q_row;             // e4m3 [m, k], or null
  uint8_t* s_row;             // e8m0 scales of the rowwise copy
  uint8_t* q_col;             // e4m3 [k, m], or null
  uint8_t* s_col;             // e8m0 scales of the columnwise copy
  void* stream;               // cudaStream_t
};

// FP8 delayed scaling's amax history step (scalemm/amax_history.cuh), in place: history rolled one row
// down with amax on top, next_amax = the new history's max over rows, its old value into used.
struct AmaxHistoryArgs {
  float* history;             // fp32 [rows, cols], row 0 newest
  int64_t rows;
  int64_t cols;
  float const* amax;          // [cols]: the amax the quantize pass just measured
  float* next_amax;           // [cols]: the amax the next quantization scales from (read, then written)
  float* used;                // [cols]: next_amax's value before the step, or null
  void* stream;               // cudaStream_t
};

// SwiGLU forward / backward (scalemm/swiglu.cuh): out = silu(gate) * up over h = [gate | up] [rows, 2 * inner];
// backward: dh [rows, 2 * inner] from h and dout [rows, inner]. All contiguous, one dtype.
struct SwigluArgs {
  void const* h;              // [rows, 2 * inner]
  void const* dout;           // [rows, inner]; null for the forward
  void* out;                  // forward: [rows, inner]; backward: dh [rows, 2 * inner]
  int64_t rows;
  int64_t inner;
  int32_t vec;                // 1: inner % (16 / element bytes) == 0 and every pointer 16-byte aligned
  void* stream;               // cudaStream_t
};

// ---------------------------------------------------------------------------------------------
// Grouped (MoE) quantizers (scalemm/quant_grouped.cuh), one library per input dtype. x [tokens, k]
// rows sorted by group; offsets int32 [groups] cumulative row ends on the device, never read on
// the host; table: the group table above, int32 scratch the launch writes. The columnwise copy
// is in the wgrad layout [k, w]. Each launcher returns 0 or a cudaError_t.
// ---------------------------------------------------------------------------------------------

// FP8 e4m3: rowwise [tokens, k] and/or the wgrad-layout columnwise copy [k, w].
struct QuantizeFp8GroupedArgs {
  void const* x;              // [tokens, k]
  int64_t tokens;
  int64_t k;
  int32_t const* offsets;     // [groups]
  int64_t groups;
  int32_t* table;             // group table, no tile entries
  int64_t token;              // 1: per row (rowwise) and per (group, column) (columnwise); 0: per group
  float* g_amax;              // [groups] amax scratch (token = 0)
  float* row_amax;            // [tokens] amax scratch (token = 1, rowwise)
  float* gcol_amax;           // [groups, k] amax scratch (token = 1, columnwise)
  uint8_t* q_row;             // e4m3 [tokens, k], or null
  float* sinv_row;            // scale_inv [groups] or [tokens]
  uint8_t* q_col;             // e4m3 [k, w], or null
  int64_t w;                  // the wgrad layout's padded token columns (a multiple of 16)
  float* sinv_col;            // scale_inv [groups] or [groups, k]
  int64_t col_group_rows;     // 0: q_col in the wgrad layout. n > 0 (every group n rows, n % 16 == 0, w = tokens =
                              // groups * n: stacked weights [groups, n, k]): q_col is [groups * k, n] instead, group
                              // g's transpose at rows g * k (stacked W^T, the dgrad operand)
  int64_t amax_given;         // 1 (token = 0): g_amax is the per-group amax to scale from (delayed scaling): no stats pass
  float* amax_out;            // [groups] per-group max|x| written by the quantize pass (amax_given only), or null
  void* stream;               // cudaStream_t
};

// Zero the rows of out [rows, row_bytes] that belong to no group: from the clamped running maximum of the offsets
// (the rows the grouped GEMMs do not write) to the end. row_bytes a multiple of 16, out 16-byte aligned.
struct ZeroRowsPastGroupsArgs {
  void* out;
  int64_t rows;
  int64_t row_bytes;
  int32_t const* offsets;     // [groups]
  int64_t groups;
  void* stream;               // cudaStream_t
};

// NVFP4: rowwise [tokens, k / 2] with scales grouped along M (scale_rows x Cp bytes), and/or the
// wgrad-layout columnwise copy [k, w / 2] with scales grouped along K (Rp x cb_total bytes).
struct QuantizeNvfp4GroupedArgs {
  void const* x;              // [tokens, k]
  int64_t tokens;
  int64_t k;
  int32_t const* offsets;     // [groups]
  int64_t groups;
  int32_t* table;             // group table with tile entries for scale_rows / 128 tiles when rowwise
  int64_t token;              // 1: per-row / per-(group, column) global scales; 0: per group
  float* g_amax;              // [groups] amax scratch (token = 0)
  float* row_amax;            // [tokens] amax scratch (token = 1, rowwise)
  float* col_amax;            // columnwise amax when not g_amax: [groups, k] (token) or [groups] (rht)
  uint8_t* q_row;             // codes [tokens, k / 2], or null
  uint8_t* s_row;             // e4m3 scales grouped along M
  int64_t scale_rows;         // rows of s_row (a multiple of 128)
  void* exact_row;            // bf16 [tokens, k] = value(code) x block scale (rows past the last group 0), or null
  float* alpha_row;           // S_dec [groups] or [tokens]
  uint8_t* q_col;             // codes [k, w / 2], or null
  int64_t w;                  // the wgrad layout's padded token columns
  uint8_t* s_col;             // e4m3 scales grouped along K
  int64_t cb_total;           // columns of s_col
  float* alpha_col;           // S_dec [groups] or [groups, k]
  int64_t rht;                // 1: the columnwise copy goes through the 16-point RHT
  int64_t sr;                 // 1: stochastic rounding of both copies from Philox (seed, offset)
  uint64_t seed;
  uint64_t offset;
  uint64_t const* seed_device;  // [2] on the device, or null: (seed, added to offset) read at run time
  void* stream;               // cudaStream_t
};

// MXFP8 rowwise [tokens, k] with e8m0 scales grouped along M.
struct QuantizeMxfp8GroupedArgs {
  void const* x;              // [tokens, k]
  int64_t tokens;
  int64_t k;
  int32_t const* offsets;     // [groups]
  int64_t groups;
  int32_t* table;             // group table with tile entries for scale_rows / 128 tiles
  uint8_t* q_row;             // e4m3 [tokens, k]
  uint8_t* s_row;             // e8m0 scales grouped along M
  int64_t scale_rows;         // rows of s_row (a multiple of 128)
  void* stream;               // cudaStream_t
};

}  // namespace scalemm
