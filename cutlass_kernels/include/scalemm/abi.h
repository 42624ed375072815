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

// NVFP4 weights x bf16/fp16 activations on SM90 (scalemm/sm90/nvfp4_gemm.cuh).
// D [tokens, n] = epilogue(X [tokens, k] @ dequant(W [n, k])^T).
struct Nvfp4GemmArgs {
  void const* weight;         // prepared NVFP4 weights, uint8 [n, k_pad / 2]
  void const* weight_scales;  // e4m3 block scales of W, 128x4 swizzled, ceil(n/128)*128 x scale_cols bytes
  void const* x;              // activations [tokens, k], bf16 or fp16 as compiled
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

// Grouped (MoE) NVFP4-weight GEMM on SM90 (scalemm/sm90/nvfp4_grouped_gemm.cuh).
// out[rows of g] = epilogue(x[rows of g] @ dequant(W_g)^T) for each group g of the offsets.
struct Nvfp4GroupedGemmArgs {
  void const* weight;         // prepared NVFP4 expert weights, uint8 [groups, n, k_pad / 2]
  void const* weight_scales;  // e4m3 128x4 swizzled, batched: expert g at g * ceil(n/128)*128 * scale_cols
  void const* x;              // activations [tokens, k], rows sorted by group
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
  void* table;             // int32 scratch, groups + 3 * (groups + 1) entries (grouped only)
  void* stream;
};

}  // namespace scalemm
