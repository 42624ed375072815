// scalemm: SM90 NVFP4-weight GEMM for few tokens (decode: 8 * kTokenTiles tokens per CTA; more tokens run in
// blocks of that many side by side along the grid's z), exact.
//
// D [tokens, n] = act(scale_a[t] * scale_b[c] * (X [tokens, k] @ dequant(W [n, k])^T) + bias[c])
// Grouped (MoE decode): the same per expert g, W_g its stacked weights, X's rows from device offsets.
// X is bf16/fp16 (W4A16) or NVFP4, decoded in registers like the weights (W4A4, kX4).
//
// At decode the GEMM is a stream over the weights (0.5625 bytes per element with the scales):
// the CUTLASS kernel (nvfp4_mainloop.hpp) keeps only two decoding warpgroups per SM and reached
// ~40% of the copy bandwidth there. This kernel is built for the stream instead:
//  - every warp loads its own weight codes straight into registers (16 bytes per lane per
//    128-element chunk of K, a ring of kPrefetch chunks in flight), with their e4m3 block scales
//    read exactly as the quantizer wrote them (128x4 swizzled atoms, docs/numerics.md section 5)
//    and the codes in the quantizer's byte order: no prepared copy of the weights (kLoopStepped, the
//    default, and kLoopLean below address the same loads two ways);
//  - decodes them in registers (scalemm/sm90/nvfp4_numerics.cuh: value * s * 2^-8, exact in
//    bf16/fp16) into the A operand of mma.sync m16n8k16 (a warp's 16 weight rows per MMA), the
//    tokens being the B operand (8 per MMA, read through L1: the warps of a CTA share them);
//  - the K dimension is split over the CTAs of a thread-block cluster (one cluster per 64 weight
//    rows), which add their fp32 partials through distributed shared memory in a fixed order
//    (deterministic) before the epilogue: act(fl(fl(scale_a * scale_b) * acc) + bias), cast.
//
// Which element goes where. Lane l of a warp is (g = l / 4, q = l % 4); the warp owns weight rows
// r0 + g and r0 + g + 8 (the MMA's A rows g and g + 8). In a 128-element chunk of K, lane (g, q)
// holds elements [32q, 32q + 32) of both rows (one uint4 of codes each: words j = 0..3 of 8 codes;
// byte i of a word = elements 2i (low nibble) and 2i + 1). MMA step (j, s), s = 0, 1, covers
// elements e = 32q + 8j + 4s + {0..3} for lane q: its A registers are the decoded pairs (e, e + 1)
// of rows g, g + 8 (a0a1, a2a3) and (e + 2, e + 3) of rows g, g + 8 (a4a5, a6a7); its B registers
// are the same elements of token g of the 8-token tile: (e, e + 1) and (e + 2, e + 3), i.e. two
// consecutive 32-bit words of one 16-byte load of that token's row. Since A and B use the same
// assignment of K elements to MMA slots, the product is the GEMM's (the MMA only sums over K).
// Scale block 2q covers words 0 and 1, block 2q + 1 words 2 and 3.
// tests/test_nvfp4_skinny_layout.py models these steps lane by lane on the CPU: keep it in step.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <numeric>
#include <utility>
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include "cutlass/numeric_conversion.h"
#include "cutlass/numeric_types.h"
#include "cutlass/epilogue/thread/activation.h"
#include "cute/arch/mma_sm90_desc.hpp"
#include "cute/arch/mma_sm90_gmma.hpp"

#include "scalemm/abi.h"
#include "scalemm/group_offsets.cuh"
#include "scalemm/sm90/nvfp4_numerics.cuh"

namespace scalemm::sm90::skinny {

constexpr int kChunkK = 128;      // K elements per step of the main loop: a lane quad's 4 x 32
constexpr int kWarps = 4;         // warps per CTA, side by side along n
constexpr int kN8PerWarp = 2;     // a warp's weight rows in groups of 8: rows g and g + 8 of one MMA
constexpr int kTileN = kWarps * kN8PerWarp * 8;  // weight rows per CTA (64)
// chunks of weights in flight per warp: 3 keeps the 8-token kernel at 128 registers (4 CTAs per SM);
// 4 made ptxas hoist more token loads (180 registers)
constexpr int kPrefetch = 3;
constexpr int kMaxSplits = kSkinnyMaxSplits;

// How the main loop streams the weights (SkinnyConfig.mainloop; perf/NOTES.md has the timings):
//  kLoopStepped (the default): a ring of kPrefetch chunks in registers over the chunks that lie wholly
//    inside K with no predicates at all (rows past n and tokens past the block read the last valid
//    row / token, whose outputs are never stored), each slot reloaded after its MMAs (no register
//    moves); the last, partial chunk checked. The row, scale and token pointers step once per
//    kPrefetch chunks, so every address in an iteration is a pointer plus an immediate (under the
//    128-register bound ptxas then keeps the pointers in registers: ~195 instead of ~242 SASS
//    instructions per chunk at 1 token tile). The code loads ask L2 for the whole 128-byte line
//    (.L2::128B): a chunk reads 64 bytes of each row, and fetched in two halves a chunk apart the
//    stream ran slower (H100, M = 1, two runs: 3-9% on 8192^2, 14336 x 4096, 4096 x 14336; the hint
//    cost 1-2% at 4096^2).
//  kLoopLean (the previous default, kept as the measured baseline): the same loads, each address
//    computed from the chunk index, without the fetch hint: 1.01-1.18x kLoopStepped's time (H100, 1-8
//    tokens, four layer shapes).
// Measured and removed (H100, perf/NOTES.md): a predicated register ring (1.07-1.25x kLoopLean's time at
// 1-8 tokens), a cp.async ring in shared memory (1.26-1.67x); on top of kLoopStepped: L1 prefetches of
// the next chunks' tokens (no gain), L2 prefetches of the weights 6 chunks ahead (1.1-1.4x slower), a
// 6-chunk ring at 3 CTAs per SM ("deep": 1.03-1.19x slower at 1-8 tokens), a fifth warp streaming the
// weights into a 4-stage shared-memory ring with TMA ("bulk": 1.12-1.18x slower), and each chunk's
// tokens loaded one chunk early ("ahead": W4A16 1.01-1.06x slower, W4A4 0.97-1.05x; faster only under
// ncu's cache flush).
//  kLoopWgmma: wgmma instead of mma.sync, for 9-64 tokens (bf16/fp16 tokens; NVFP4 ones reach it decoded by the
//    launcher's exact bf16 pass: decoding them in every CTA here ran up to 2x slower). The CTA streams each
//    chunk's weights from the prepared copy the CUTLASS kernel reads (scalemm.gemm_nvfp4.prepare_sm90_weight:
//    lane q's 8 bytes of a row's 64-element k-tile are its wgmma A-fragment elements), the chunk's scale
//    atoms and its tokens into shared memory (cp.async, a ring of 3-8 chunks); each lane decodes its A
//    fragments from there, and one wgmma m64 x (8 * kTokenTiles) x 16 per k16 step replaces a warp's
//    2 * kTokenTiles mma.sync: the MMA work per weight byte no longer grows with the tokens.
//    Measured (H100, perf/NOTES.md "the wgmma main loop"): at 16 tokens 0.65-0.94x the CUTLASS kernel's time
//    on seven layer shapes and 0.75x the stepped loop's at 4096^2; at 64 tokens level with the CUTLASS
//    kernel at 8192^2 but 1.13-1.18x at 14336 x 4096 / 4096 x 14336; at 1 token 1.1-1.3x the stepped loop's.
//    Measured and replaced: the same loop with a register ring of 2 chunks instead of shared memory
//    (1.1-1.5x the time: its warps waited on their loads, and a wgmma waits for all 4 warps of the group),
//    with two accumulator sets or a ring of 3 chunks (no faster), and with a K order giving each lane two
//    scale blocks per chunk (4x fewer scale conversions; tokens permuted in shared memory: 1.0-1.15x).
//  kLoopResident: kLoopStepped with the block's tokens resident in shared memory. Before its main loop the CTA
//    copies (W4A16, cp.async) or decodes (W4A4, once per CTA instead of in every warp and chunk) the tokens of its
//    whole chunks of K into shared memory as T, one row per token (kResidentTokenBytes at most: one token tile;
//    the launcher refuses a split whose rows would not fit); the loop reads each chunk's B
//    operand from there. The same values in the same MMAs: bit-identical to kLoopStepped. Measured (H100,
//    perf/NOTES.md "the resident loop"): W4A4 2-16% faster than kLoopStepped at 1 token where a CTA has 16 or more
//    chunks, level or slower with fewer chunks or more tokens (the staging is a burst of loads and a barrier
//    before the loop); W4A16 level to 27% slower (its copy saves nothing). scalemm's default takes it for NVFP4
//    activations where it pays (resident_pays in configs/sm90.py).
enum : int { kLoopLean = 1, kLoopStepped = 2, kLoopWgmma = 3, kLoopResident = 4 };
constexpr bool is_wgmma(int loop) { return loop == kLoopWgmma; }
constexpr bool is_resident(int loop) { return loop == kLoopResident; }
constexpr int kResidentTokenBytes = kSkinnyResidentTokenBytes;
// Elements per resident token row for splits of `per_split` chunks (+ 8: 16 bytes, so that rows do not start on
// the same bank), and the bytes of `rows` such rows of T with their 16-byte alignment.
__host__ __device__ constexpr int64_t resident_pitch(int64_t per_split) { return per_split * kChunkK + 8; }
template <class T>
constexpr int64_t resident_bytes(int64_t rows, int64_t per_split) {
  return rows * resident_pitch(per_split) * int64_t(sizeof(T)) + 16;
}
// Output pairs a thread finishes at once after the split reduction: 2 for the wgmma loop (9-64 tokens: a thread has
// several pairs), 1 for the mma.sync loops (1-8 tokens: at most one pair a thread at 8 tokens and 4+ splits) and
// for the wgmma loop at 4 token tiles, whose 128-register bound (kMinBlocks) has no room for a second pair's leaves
// and partials: ptxas spilled 16-20 bytes there, and 32 tokens ran 2% slower than one pair (H200,
// perf/results/h200/nvfp4_epilogue_leaves/); one pair there: 1.04-1.05x (perf/results/h200/nvfp4_wgmma_stages/).
template <int kTokenTiles, int kLoop>
constexpr int kEpiloguePairs = is_wgmma(kLoop) && kTokenTiles != 4 ? 2 : 1;
// CTAs per SM the kernel is compiled for (launch bounds; 0: no bound). At 1 token tile without a
// bound ptxas hoists every slot's loads and token reads (166 registers, 3 CTAs per SM); 4 CTAs fit in
// 128 registers. At 2 tiles the bound costs a few bytes of spills outside the loop (149 registers
// without it) and was faster (up to 11%) or even. 4 and 8 tiles spill in the loop under a bound.
// (A bound of 1 is not "none": it changed the other kernels' code, so they keep 0.) Bounds of 5 and 6
// at 1 tile (96 / 80 registers: more warps per SM) were slower at every split count (H100, perf/NOTES.md).
template <int kTokenTiles, int kLoop>
constexpr int kMinBlocks = is_wgmma(kLoop) ? (kTokenTiles <= 4 ? 4 : 3) : kTokenTiles <= 2 ? 4 : 0;

// Read-only 16-byte load that does not allocate in L1 (the weights stream through once; L1 keeps
// the tokens, which every warp of the CTA reads). kWholeLine: L2 fetches the whole 128-byte line
// around it from memory.
template <bool kWholeLine>
__device__ __forceinline__ uint4 load_stream(const void* p) {
  uint4 v;
  // volatile: a non-volatile asm counts as free of side effects, so the compiler may execute it
  // where the source guards it (it did: kLoopLean's ring prologue loaded chunks past the end of a
  // split's rows unconditionally). ptxas still schedules the load freely.
  if constexpr (kWholeLine)
    asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  else
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// 16 bytes global -> shared, asynchronously; zeros when !valid (nothing is read)
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

template <class T>
__device__ __forceinline__ void mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  if constexpr (kIsHalf<T>) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// One chunk of one lane's weights: kN8PerWarp rows x 32 codes and their two block scales each.
struct WeightChunk {
  uint4 codes[kN8PerWarp];
  uint32_t scales[kN8PerWarp];  // bytes 0, 1: e4m3 scales of blocks 2q, 2q + 1
};

struct Params {
  const uint8_t* weight;         // [groups * n, k / 2]: group g's n rows at g * n
  const uint8_t* weight_scales;  // 128x4 swizzled, row pitch scale_cols; group g's block at g * scale_group_bytes
  const void* x;                 // [tokens, k] bf16/fp16, or NVFP4 codes uint8 [tokens, k / 2] (kX4)
  const uint8_t* x_scales;       // kX4: the tokens' e4m3 block scales, 128x4 swizzled, row pitch scale_cols
  void* d;                       // [tokens, n]
  const float* scale_a;          // abi.h GroupedLeafMode scale_a_mode: kLeafOne, kLeafPerRow [tokens], kLeafPerGroup [G]
  const float* scale_b;          // scale_b_mode: kLeafOne, kLeafPerGroup [G], kLeafPerGroupVec [G, n]
  const void* bias;              // bias_mode: kLeafNull, kLeafShared [n], kLeafPerGroupVec [G, n]; the output type
  int scale_a_mode, scale_b_mode, bias_mode;
  int n, tokens, k, scale_cols;
  int chunks_per_split;
  const int* offsets;            // [G] cumulative row ends on the device, or null: one group of all tokens
  const int* x_sf_offsets;       // kX4 with offsets: scale row of each group's first token
  int64_t scale_group_bytes;     // ceil(n / 128) * 128 * scale_cols
  int groups;                    // G (with offsets)
  int slot_stride;               // compact grouped launches (fewer slots than groups): find_group's stride
};

// Byte offset of row r's 4 scales in atom column 0 of a 128x4-swizzled scale matrix of scale_cols
// columns (its 128-row stripe, then its place in the 512-byte atom); atom column a adds 512 a.
__device__ __forceinline__ int64_t scale_row_offset(int r, int scale_cols) {
  return int64_t(r / 128) * 128 * scale_cols + scale_atom_row_offset(r % 128);
}

// Lane quad q's share of a row in a chunk: codes of elements [32q, 32q + 32), and the scales of
// blocks 2q, 2q + 1 (atom q / 2 of the chunk's two, bytes 2 (q & 1) and 2 (q & 1) + 1)
__device__ __forceinline__ int quad_code_offset(int q) { return 16 * q; }
__device__ __forceinline__ int quad_scale_offset(int q) { return (q / 2) * 512 + 2 * (q & 1); }

// Where weight row `row` of group `group` starts: its codes (element 0) and its scales (atom 0)
struct WeightRow {
  const uint8_t* codes;
  const uint8_t* scales;
};
__device__ __forceinline__ WeightRow weight_row(Params const& p, int group, int row) {
  return {p.weight + int64_t(group) * p.n * (p.k / 2) + int64_t(row) * (p.k / 2),
          p.weight_scales + int64_t(group) * p.scale_group_bytes + scale_row_offset(row, p.scale_cols)};
}

// What a lane reads, fixed for the whole main loop of one block of tokens (addresses of chunk 0;
// chunk c adds c * 64 bytes of codes, c * 1024 bytes of scales = two 512-byte atoms, c * 128 token
// elements). kX4: the tokens are NVFP4 too (W4A4), read like the weights: 16 bytes of codes and a
// scale pair per token and chunk, decoded in registers (no bf16 copy of the activations in memory).
template <class T, bool kX4>
struct Lane {
  const uint8_t* codes[kN8PerWarp];   // weight rows r0 + g + 8t: codes of elements [32q, 32q + 32)
  const uint8_t* scales[kN8PerWarp];  // their scales of blocks 2q, 2q + 1
  bool row_ok[kN8PerWarp];            // the row exists (< n)
  const T* x;                         // token g of the block: elements [32q, 32q + 32); tile m adds 8m rows
  const uint8_t* xq;                  // kX4: token g's codes of elements [32q, 32q + 32)
  const uint8_t* xs;                  // kX4: scale atoms of blocks 2q, 2q + 1 (the row's offset added per token)
  int64_t x_tile_stride;              // 8 * k elements (kX4: 8 * k / 2 bytes)
  int x_scale_row;                    // kX4: scale row of the block's token 0
  int tiles_live;                     // token tiles m < tiles_live hold any token of the block (warp-uniform)
  int tile_ok;                        // token tiles m < tile_ok hold token 8m + g of the block
  int chunks_ok;                      // chunks c < chunks_ok hold all 32 of the lane's elements (k % 32 == 0)

  // group: its weights; first: the block's first token row; count: its tokens; scale_row: kX4, the
  // scale row of token `first`
  __device__ Lane(Params const& p, int group, int row0, int first, int count, int scale_row, int g, int q) {
#pragma unroll
    for (int t = 0; t < kN8PerWarp; ++t) {
      const int row = row0 + 8 * t;
      const WeightRow wr = weight_row(p, group, row);
      row_ok[t] = row < p.n;
      codes[t] = wr.codes + quad_code_offset(q);
      scales[t] = wr.scales + quad_scale_offset(q);
    }
    if constexpr (kX4) {
      x = nullptr;
      xq = static_cast<const uint8_t*>(p.x) + int64_t(first + g) * (p.k / 2) + quad_code_offset(q);
      xs = p.x_scales + quad_scale_offset(q);
      x_tile_stride = int64_t(8) * (p.k / 2);
    } else {
      x = static_cast<const T*>(p.x) + int64_t(first + g) * p.k + 32 * q;
      xq = xs = nullptr;
      x_tile_stride = int64_t(8) * p.k;
    }
    x_scale_row = scale_row;
    tiles_live = (count + 7) / 8;
    tile_ok = g < count ? (count - g + 7) / 8 : 0;
    chunks_ok = p.k >= 32 * q + 32 ? (p.k - 32 * q - 32) / kChunkK + 1 : 0;
  }

  // kX4: byte offset of the scale pair of token 8m + g of the block in chunk 0
  __device__ int64_t x_scale_offset(Params const& p, int m, int g) const {
    return scale_row_offset(x_scale_row + 8 * m + g, p.scale_cols);
  }
};

template <class L>
__device__ __forceinline__ void load_weights(WeightChunk& w, L const& l, int chunk) {
  const bool ok = chunk >= 0 && chunk < l.chunks_ok;
#pragma unroll
  for (int t = 0; t < kN8PerWarp; ++t) {
    w.codes[t] = make_uint4(0, 0, 0, 0);
    w.scales[t] = 0;
    if (ok && l.row_ok[t]) {
      w.codes[t] = load_stream<false>(l.codes[t] + int64_t(chunk) * (kChunkK / 2));
      w.scales[t] = __ldg(reinterpret_cast<const uint16_t*>(l.scales[t] + int64_t(chunk) * 1024));
    }
  }
}

// A word of 8 codes split into its even codes (low nibbles) and odd codes (high nibbles), each in the
// low nibble of its byte with the high nibble zero.
struct CodeWord {
  uint32_t even, odd;
  __device__ __forceinline__ explicit CodeWord(uint32_t word) : even(word & 0x0F0F0F0Fu), odd((word >> 4) & 0x0F0F0F0Fu) {}
};

// The codes of byte `byte` of the word (elements 2 byte, 2 byte + 1) x the scale pair -> the MMA
// type's pair, value * s * 2^-8. One PRMT puts the even code at bits [3:0] and the odd one at
// [19:16]; the other two bytes replicate the sign bit of a byte whose high nibble is zero (selector
// nibble 8 | i), i.e. are zero, so e2m1x2_tiny's own mask is not needed (e2m1x2_tiny_clean).
template <class T>
__device__ __forceinline__ uint32_t decode_pair(CodeWord const& w, int byte, uint32_t scale_pair) {
  const uint32_t sel = byte | ((8 | byte) << 4) | ((4 + byte) << 8) | ((8 | byte) << 12);
  return mul2<T>(e2m1x2_tiny_clean<T>(prmt(w.even, w.odd, sel)), scale_pair);  // not __byte_perm: sign bytes
}

// The unpredicated loops: per token tile m, where token min(8 m + g, count - 1) of the block starts
// (chunk 0): W4A16 its elements [32 q, ...), W4A4 its codes and its scale pair. Tokens past the block
// read the block's last token: they only feed MMA columns whose outputs are never stored.
template <class T, int kTokenTiles>
struct LeanTokens {
  const T* x[kTokenTiles];
  const uint8_t* xq[kTokenTiles];
  const uint8_t* xs[kTokenTiles];
};

// The token pointers of lane (g, q) at chunk 0 for the block of `count` tokens at row `block` (kX4: its
// scale rows from `scale_row`).
template <class T, bool kX4, int kTokenTiles>
__device__ __forceinline__ LeanTokens<T, kTokenTiles> lean_tokens(Params const& p, int block, int count, int scale_row,
                                                                  int g, int q) {
  LeanTokens<T, kTokenTiles> lt;
#pragma unroll
  for (int m = 0; m < kTokenTiles; ++m) {
    const int tok = min(8 * m + g, count - 1);
    if constexpr (kX4) {
      lt.xq[m] = static_cast<const uint8_t*>(p.x) + int64_t(block + tok) * (p.k / 2) + quad_code_offset(q);
      lt.xs[m] = p.x_scales + scale_row_offset(scale_row + tok, p.scale_cols) + quad_scale_offset(q);
    } else {
      lt.x[m] = static_cast<const T*>(p.x) + int64_t(block + tok) * p.k + 32 * q;
    }
  }
  return lt;
}

// One chunk of one lane's tokens, per token tile m (token 8m + g): W4A16 its elements [32q + 8j, 32q + 8j + 8)
// in x[m][j], j = 0..3; kX4 its 16 bytes of codes in x[m][0] and its scale pair in scales[m].
template <bool kX4, int kTokenTiles>
struct TokenChunk {
  uint4 x[kTokenTiles][kX4 ? 1 : 4];
  uint32_t scales[kTokenTiles];
};

// The unpredicated loops' token loads of chunk `chunk` (counted from where lt's pointers are). kShared: lt.x points
// into the resident tokens (kLoopResident), T in shared memory.
template <class T, bool kX4, int kTokenTiles, bool kShared = false>
__device__ __forceinline__ void load_tokens(TokenChunk<kX4, kTokenTiles>& tc, LeanTokens<T, kTokenTiles> const& lt,
                                            int chunk) {
  static_assert(!(kShared && kX4), "resident tokens are decoded already");
#pragma unroll
  for (int m = 0; m < kTokenTiles; ++m) {
    if constexpr (kShared) {
#pragma unroll
      for (int j = 0; j < 4; ++j) tc.x[m][j] = *reinterpret_cast<const uint4*>(lt.x[m] + int64_t(chunk) * kChunkK + 8 * j);
    } else if constexpr (kX4) {
      tc.x[m][0] = __ldg(reinterpret_cast<const uint4*>(lt.xq[m] + int64_t(chunk) * (kChunkK / 2)));
      tc.scales[m] = __ldg(reinterpret_cast<const uint16_t*>(lt.xs[m] + int64_t(chunk) * 1024));
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j)
        tc.x[m][j] = __ldg(reinterpret_cast<const uint4*>(lt.x[m] + int64_t(chunk) * kChunkK + 8 * j));
    }
  }
}

// The MMAs of one chunk. kLean: no predicates (tc holds the chunk's tokens, the chunk lies inside K).
// kDecodeTokens: tc (or the loads) hold NVFP4 tokens to decode here; false for kX4 with resident tokens.
template <class T, bool kX4, int kTokenTiles, bool kLean = false, bool kDecodeTokens = kX4>
__device__ __forceinline__ void mma_chunk(float (&acc)[kTokenTiles][4], WeightChunk const& w, Lane<T, kX4> const& l,
                                          Params const& p, int chunk, int g,
                                          TokenChunk<kDecodeTokens, kTokenTiles> const* tc = nullptr) {
  static_assert(kDecodeTokens == kX4 || kLean, "only the unpredicated loop takes decoded NVFP4 tokens");
  const bool k_ok = kLean || chunk < l.chunks_ok;
  uint32_t pairs[kN8PerWarp][4];
#pragma unroll
  for (int t = 0; t < kN8PerWarp; ++t) e4m3x4_to_scale_pairs<T>(w.scales[t], pairs[t]);
  // kDecodeTokens: the chunk's codes and scale pair of token 8m + g (decoded per word below)
  uint4 xcodes[kDecodeTokens ? kTokenTiles : 1];
  uint32_t xpairs[kDecodeTokens ? kTokenTiles : 1][4];
  if constexpr (kDecodeTokens) {
#pragma unroll
    for (int m = 0; m < kTokenTiles; ++m) {
      uint32_t sc = 0;
      if constexpr (kLean) {
        xcodes[m] = tc->x[m][0];
        sc = tc->scales[m];
      } else {
        xcodes[m] = make_uint4(0, 0, 0, 0);
        if (k_ok && m < l.tile_ok) {
          xcodes[m] = __ldg(reinterpret_cast<const uint4*>(l.xq + m * l.x_tile_stride + int64_t(chunk) * (kChunkK / 2)));
          sc = __ldg(reinterpret_cast<const uint16_t*>(l.xs + l.x_scale_offset(p, m, g) + int64_t(chunk) * 1024));
        }
      }
      e4m3x4_to_scale_pairs<T>(sc, xpairs[m]);
    }
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {  // word j: elements 8j .. 8j + 7 of the lane's 32
    uint32_t b[kTokenTiles][4];   // token 8m + g: the pairs (8j + 2i, 8j + 2i + 1), i = 0..3
#pragma unroll
    for (int m = 0; m < kTokenTiles; ++m) {
      if constexpr (kDecodeTokens) {
        const uint32_t word = j == 0 ? xcodes[m].x : j == 1 ? xcodes[m].y : j == 2 ? xcodes[m].z : xcodes[m].w;
        const CodeWord cw(word);
#pragma unroll
        for (int i = 0; i < 4; ++i) b[m][i] = decode_pair<T>(cw, i, xpairs[m][j / 2]);
      } else {
        uint4 v = make_uint4(0, 0, 0, 0);
        if constexpr (kLean)
          v = tc->x[m][j];
        else if (k_ok && m < l.tile_ok)
          v = __ldg(reinterpret_cast<const uint4*>(l.x + m * l.x_tile_stride + int64_t(chunk) * kChunkK + 8 * j));
        b[m][0] = v.x, b[m][1] = v.y, b[m][2] = v.z, b[m][3] = v.w;
      }
    }
    uint32_t a[kN8PerWarp][4];  // [row g, row g + 8][pair of bytes 0..3]
#pragma unroll
    for (int t = 0; t < kN8PerWarp; ++t) {
      const CodeWord cw(j == 0 ? w.codes[t].x : j == 1 ? w.codes[t].y : j == 2 ? w.codes[t].z : w.codes[t].w);
#pragma unroll
      for (int i = 0; i < 4; ++i) a[t][i] = decode_pair<T>(cw, i, pairs[t][j / 2]);
    }
#pragma unroll
    for (int m = 0; m < kTokenTiles; ++m) {
      if (m < l.tiles_live) {  // a grouped block may fill fewer tiles than the kernel has
        mma16816<T>(acc[m], a[0][0], a[1][0], a[0][1], a[1][1], b[m][0], b[m][1]);  // elements 8j + 0..3
        mma16816<T>(acc[m], a[0][2], a[1][2], a[0][3], a[1][3], b[m][2], b[m][3]);  // elements 8j + 4..7
      }
    }
  }
}

// After the unpredicated chunks [c_begin, c_full): the partial last chunk of K, if this split has it,
// through the checked loads.
template <class T, bool kX4, int kTokenTiles>
__device__ __forceinline__ void partial_chunk(float (&acc)[kTokenTiles][4], Lane<T, kX4> const& l, Params const& p,
                                              int c_begin, int c_end, int c_full, int g) {
  if (c_full >= c_begin && c_full < c_end) {
    WeightChunk wc;
    load_weights(wc, l, c_full);
    mma_chunk<T, kX4, kTokenTiles>(acc, wc, l, p, c_full, g);
  }
}

// kLoopResident: the `count` tokens of the block at row `block` (kX4: scale row `scale_row`) over the chunks
// [c_begin, c_stop) into `staged`, token t's elements of chunk c_begin + i at t * pitch + i * kChunkK (T: W4A16
// copied by cp.async, W4A4 decoded as mma_chunk decodes them, value * s * 2^-kDecodeShift), by the whole CTA; then
// its barrier. A unit is one lane quad's 32 elements of one token and chunk; a thread's loads are issued before
// any of them is decoded.
template <class T, bool kX4>
__device__ __forceinline__ void stage_tokens(T* staged, int64_t pitch, Params const& p, int block, int count,
                                             int scale_row, int c_begin, int c_stop) {
  constexpr int kBatch = 8;  // units per thread and round: W4A4's loads all in flight before the first decode
  const int per_token = 4 * max(c_stop - c_begin, 0), units = count * per_token;
  const int threads = int(blockDim.x);
  for (int u0 = int(threadIdx.x); u0 < units; u0 += kBatch * threads) {
    int t[kBatch], c[kBatch], qq[kBatch];  // unit u0 + b * threads: token t, chunk c, lane quad qq
    bool ok[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int u = u0 + b * threads;
      ok[b] = u < units;
      t[b] = ok[b] ? u / per_token : 0;
      c[b] = c_begin + (ok[b] ? u % per_token : 0) / 4;
      qq[b] = u % 4;
    }
    auto dst = [&](int b) { return staged + t[b] * pitch + int64_t(c[b] - c_begin) * kChunkK + 32 * qq[b]; };
    if constexpr (kX4) {
      uint4 codes[kBatch];
      uint32_t sc[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        codes[b] = make_uint4(0, 0, 0, 0);
        sc[b] = 0;
        if (ok[b]) {
          codes[b] = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(p.x) +
                                                          int64_t(block + t[b]) * (p.k / 2) +
                                                          int64_t(c[b]) * (kChunkK / 2) + quad_code_offset(qq[b])));
          sc[b] = __ldg(reinterpret_cast<const uint16_t*>(p.x_scales + scale_row_offset(scale_row + t[b], p.scale_cols) +
                                                          quad_scale_offset(qq[b]) + int64_t(c[b]) * 1024));
        }
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        if (ok[b]) {
          uint32_t pairs[4];
          e4m3x4_to_scale_pairs<T>(sc[b], pairs);
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const CodeWord cw(j == 0 ? codes[b].x : j == 1 ? codes[b].y : j == 2 ? codes[b].z : codes[b].w);
            *reinterpret_cast<uint4*>(dst(b) + 8 * j) =
                make_uint4(decode_pair<T>(cw, 0, pairs[j / 2]), decode_pair<T>(cw, 1, pairs[j / 2]),
                           decode_pair<T>(cw, 2, pairs[j / 2]), decode_pair<T>(cw, 3, pairs[j / 2]));
          }
        }
      }
    } else {
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        if (ok[b]) {
          const T* src = static_cast<const T*>(p.x) + int64_t(block + t[b]) * p.k + int64_t(c[b]) * kChunkK + 32 * qq[b];
          const uint32_t to = static_cast<uint32_t>(__cvta_generic_to_shared(dst(b)));
#pragma unroll
          for (int j = 0; j < 4; ++j) cp_async16(to + 16 * j, src + 8 * j, true);
        }
      }
    }
  }
  if constexpr (!kX4) {
    cp_async_commit();
    cp_async_wait<0>();
  }
  __syncthreads();
}

// The register-ring main loops (kLoopStepped, kLoopResident; kLoopLean) over the chunks
// [c_begin, c_end) of one block of `count` tokens starting at token row `block` (scale row
// `scale_row`), for lane (g, q) of the warp whose rows start at wrow0. kLoopResident: `staged` holds room for
// the block's tokens over the split's chunks (resident_bytes).
template <class T, bool kX4, int kTokenTiles, int kLoop>
__device__ __forceinline__ void lean_loop(float (&acc)[kTokenTiles][4], Lane<T, kX4> const& l, Params const& p,
                                          int group, int wrow0, int block, int count, int scale_row, int c_begin,
                                          int c_end, int g, int q, T* staged) {
  constexpr bool kStepped = kLoop != kLoopLean;
  constexpr bool kResident = is_resident(kLoop);
  constexpr bool kDecodeTokens = kX4 && !kResident;  // NVFP4 tokens decoded chunk by chunk in every warp
  static_assert(!kResident || kTokenTiles == 1, "resident tokens: one token tile");
  const int c_full = min(c_end, p.k / kChunkK);  // chunks wholly inside K: every lane's 32 elements exist
  const uint8_t* codes[kN8PerWarp];
  const uint8_t* scales[kN8PerWarp];
#pragma unroll
  for (int t = 0; t < kN8PerWarp; ++t) {  // rows past n read row n - 1 (never stored)
    const WeightRow wr = weight_row(p, group, min(wrow0 + g + 8 * t, p.n - 1));
    codes[t] = wr.codes + quad_code_offset(q);
    scales[t] = wr.scales + quad_scale_offset(q);
  }
  LeanTokens<T, kTokenTiles> lt = lean_tokens<T, kX4, kTokenTiles>(p, block, count, scale_row, g, q);
  const int64_t pitch = resident_pitch(p.chunks_per_split);
  if constexpr (kResident) lt.x[0] = staged + min(g, count - 1) * pitch + 32 * q;  // at chunk c_begin
  // kStepped: the pointers above move to chunk c (c_begin, then each iteration's first chunk) and
  // a load or MMA names its chunk by the offset from c, a constant once the loop is unrolled.
  // Otherwise they stay at chunk 0 and name the chunk itself.
  auto step = [&](int chunks, bool tokens = true) {
#pragma unroll
    for (int t = 0; t < kN8PerWarp; ++t) {
      codes[t] += int64_t(chunks) * (kChunkK / 2);
      scales[t] += int64_t(chunks) * 1024;
    }
#pragma unroll
    for (int m = 0; m < kTokenTiles && tokens; ++m) {
      if constexpr (kDecodeTokens) {
        lt.xq[m] += int64_t(chunks) * (kChunkK / 2);
        lt.xs[m] += int64_t(chunks) * 1024;
      } else {
        lt.x[m] += int64_t(chunks) * kChunkK;
      }
    }
  };
  auto load = [&](WeightChunk& wc, int chunk) {
#pragma unroll
    for (int t = 0; t < kN8PerWarp; ++t) {
      wc.codes[t] = load_stream<kStepped>(codes[t] + int64_t(chunk) * (kChunkK / 2));
      wc.scales[t] = __ldg(reinterpret_cast<const uint16_t*>(scales[t] + int64_t(chunk) * 1024));
    }
  };
  const int origin = kStepped ? c_begin : 0;  // the chunk the pointers are at, for the prologue
  if constexpr (kStepped) step(c_begin, !kResident);  // resident tokens start at chunk c_begin
  WeightChunk ring[kPrefetch];
#pragma unroll
  for (int i = 0; i < kPrefetch; ++i)
    if (c_begin + i < c_full) load(ring[i], c_begin - origin + i);
  // the resident tokens, while the ring's first weights are in flight
  if constexpr (kResident) stage_tokens<T, kX4>(staged, pitch, p, block, count, scale_row, c_begin, c_full);
  // slot i's tokens, loaded for its MMAs (one per slot: the form that was timed; ptxas schedules one
  // reused chunk differently)
  TokenChunk<kDecodeTokens, kTokenTiles> tokens[kPrefetch];
  for (int c = c_begin; c < c_full; c += kPrefetch) {
    const int at = kStepped ? 0 : c;  // chunk c + i is `at + i` from the pointers
#pragma unroll
    for (int i = 0; i < kPrefetch; ++i) {
      if (c + i < c_full) {
        load_tokens<T, kDecodeTokens, kTokenTiles, kResident>(tokens[i], lt, at + i);
        mma_chunk<T, kX4, kTokenTiles, true, kDecodeTokens>(acc, ring[i], l, p, at + i, g, &tokens[i]);
        if (c + i + kPrefetch < c_full) load(ring[i], at + i + kPrefetch);  // into the registers just read
      }
    }
    if constexpr (kStepped) step(kPrefetch);
  }
  partial_chunk(acc, l, p, c_begin, c_end, c_full, g);
}

// ---------------------------------------------------------------------------------------
// kLoopWgmma: the warpgroup's wgmma main loop
// ---------------------------------------------------------------------------------------

constexpr int kTileK = 64;  // K elements of a k-tile: one 512-byte scale atom, one 128-byte token row

// Shared memory of the kLoopWgmma kernels: a ring of kWgmmaStages stages, each one chunk's tokens
// ([8 * kTokenTiles tokens][128 bytes] per 64-element k-tile, 128-byte swizzled, first: 1024-aligned), its 64
// rows of prepared weight codes and the two 512-byte scale atoms of their 128-row stripe; + 1024 to align the
// ring (also the partials' home after the main loop). As many stages as fit 52 KB (4 CTAs per SM up to 4
// token tiles, 3 at 8), 3 to 8.
template <int kTokenTiles>
constexpr int kWgmmaStageBytes = 8 * kTokenTiles * 2 * kChunkK + 64 * 64 + 2 * 512;
template <int kTokenTiles>
constexpr int kWgmmaStages = std::max(3, std::min(8, 52 * 1024 / kWgmmaStageBytes<kTokenTiles>));
// kLoopResident: the most its launches ask for (each asks for resident_bytes of its tokens and split); what the
// occupancy query assumes.
template <int kTokenTiles, int kLoop>
constexpr int kDynamicSmem = is_wgmma(kLoop)      ? kWgmmaStages<kTokenTiles> * kWgmmaStageBytes<kTokenTiles> + 1024
                             : is_resident(kLoop) ? kResidentTokenBytes
                                                  : 0;

// One chunk (two k-tiles) of a lane's prepared weights, rows g and g + 8: words [k-tile][row], each 16 codes
// (wgmma A elements (row, 16 s + 2q + {0, 1, 8, 9}) of the k-tile's four k16 steps s), and the rows' 4 block
// scales of each k-tile.
struct PreparedChunk {
  uint2 codes[2][2];
  uint32_t scales[2][2];
};

// The RS wgmma of T (bf16 / fp16 operands, fp32 accumulators) with kN tokens
template <class T, int kN> struct Gmma;
#define SCALEMM_SKINNY_GMMA(N)                                                                                   \
  template <> struct Gmma<cutlass::bfloat16_t, N> {                                                               \
    using Op = cute::SM90::GMMA::MMA_64x##N##x16_F32BF16BF16_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>; \
  };                                                                                                              \
  template <> struct Gmma<cutlass::half_t, N> {                                                                   \
    using Op = cute::SM90::GMMA::MMA_64x##N##x16_F32F16F16_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>;   \
  };
SCALEMM_SKINNY_GMMA(8)
SCALEMM_SKINNY_GMMA(16)
SCALEMM_SKINNY_GMMA(32)
SCALEMM_SKINNY_GMMA(64)
#undef SCALEMM_SKINNY_GMMA

// acc[m][i] is the wgmma accumulator register 4 m + i: (row g + 8 (i / 2), token 8 m + 2 q + i % 2) of the
// warp's 16 rows, the same places as the mma.sync loops' accumulators.
template <class Op, int kTokenTiles, int... I>
__device__ __forceinline__ void gmma(std::integer_sequence<int, I...>, uint32_t const (&a)[4], uint64_t desc,
                                     float (&acc)[kTokenTiles][4]) {
  Op::fma(a[0], a[1], a[2], a[3], desc, acc[I / 4][I % 4]...);
}

template <int kTokenTiles>
__device__ __forceinline__ void fence_accumulators(float (&acc)[kTokenTiles][4]) {
#pragma unroll
  for (int m = 0; m < kTokenTiles; ++m)
#pragma unroll
    for (int i = 0; i < 4; ++i) cute::warpgroup_fence_operand(acc[m][i]);
}

// Shared-memory descriptor of a K-major [rows][64] 16-bit tile with the 128-byte swizzle at shared address
// `addr` (1024-aligned; + 32 bytes per k16 step): 8-row groups 1024 bytes apart.
__device__ __forceinline__ uint64_t token_desc(uint32_t addr) {
  cute::GmmaDescriptor d;
  d.bitfield.start_address_ = uint16_t(addr >> 4);
  d.bitfield.leading_byte_offset_ = 1;  // unused with a swizzle
  d.bitfield.stride_byte_offset_ = 1024 >> 4;
  d.bitfield.base_offset_ = 0;
  d.bitfield.layout_type_ = 1;  // SWIZZLE_128B
  return d.desc_;
}

// One k-tile's four RS wgmmas (k16 steps s: A fragments a[s], the tokens' k-tile at shared address `tile`,
// + 32 bytes per step), committed as one group.
template <class Op, int kTokenTiles>
__device__ __forceinline__ void wgmma_ktile(uint32_t (&a)[4][4], uint32_t tile, float (&acc)[kTokenTiles][4]) {
  const uint64_t desc = token_desc(tile);
#pragma unroll
  for (int s = 0; s < 4; ++s)
#pragma unroll
    for (int r = 0; r < 4; ++r) cute::warpgroup_fence_operand(a[s][r]);  // decoded before the wgmmas start
  cute::warpgroup_arrive();
#pragma unroll
  for (int s = 0; s < 4; ++s)
    gmma<Op, kTokenTiles>(std::make_integer_sequence<int, 4 * kTokenTiles>{}, a[s], desc + 2 * s, acc);
  cute::warpgroup_commit_batch();
}

// The A fragment of k-tile h of a chunk: a[s] for k16 step s = registers (g, 2q), (g + 8, 2q), (g, 2q + 8),
// (g + 8, 2q + 8) (pairs), decoded as the CUTLASS kernel does (nvfp4_mainloop.hpp: the same prepared words).
template <class T>
__device__ __forceinline__ void decode_ktile(PreparedChunk const& w, int h, uint32_t (&a)[4][4]) {
  uint32_t pairs[2][4];
#pragma unroll
  for (int t = 0; t < 2; ++t) e4m3x4_to_scale_pairs<T>(w.scales[h][t], pairs[t]);
#pragma unroll
  for (int s = 0; s < 4; ++s) {
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      const uint32_t word = (s < 2 ? w.codes[h][t].x : w.codes[h][t].y) >> (8 * (s % 2));
      a[s][t] = mul2<T>(e2m1x2_tiny<T>(word), pairs[t][s]);           // row g + 8t, k 2q, 2q + 1
      a[s][t + 2] = mul2<T>(e2m1x2_tiny<T>(word >> 4), pairs[t][s]);  // k 2q + 8, 2q + 9
    }
  }
}

// The kLoopWgmma main loop over the chunks [c_begin, c_end) (128 elements of K each) of the block of `count`
// tokens at row `block`, for the CTA's 64 weight rows from n0 (warp w: rows n0 + 16 w + g, + 8). The CTA's
// threads copy each chunk's weight codes (64 rows x 64 prepared bytes), the two scale atoms of its stripe and
// its tokens into one stage of the kWgmmaStages-deep ring (cp.async: nothing is held in registers while in
// flight); each lane then reads its fragment words from shared memory. A row's four 16-byte pieces are
// stored XOR-swizzled by (row / 2) % 4, so the lanes' 8-byte reads are conflict-free. Leaves every wgmma
// and copy finished and the CTA synchronized.

template <class T, int kTokenTiles>
__device__ __forceinline__ void wgmma_loop(float (&acc)[kTokenTiles][4], Params const& p, uint8_t* smem,
                                                  int group, int n0, int block, int count, int c_begin, int c_end,
                                                  int warp, int g, int q) {
  using Op = typename Gmma<T, 8 * kTokenTiles>::Op;
  constexpr int kTokens = 8 * kTokenTiles;
  constexpr int kHalfBytes = kTokens * 2 * kTileK;  // one k-tile of the tokens
  constexpr int kTokenBytes = 2 * kHalfBytes;
  constexpr int kCodeBytes = 64 * 64, kScaleOffset = kTokenBytes + kCodeBytes;  // tokens first (1024-aligned)
  constexpr int kStageBytes = kWgmmaStageBytes<kTokenTiles>;
  constexpr int kStages = kWgmmaStages<kTokenTiles>;
  static_assert(kStageBytes % 1024 == 0, "stages keep the tokens' swizzle atoms aligned");
  const int ktiles = (p.k + kTileK - 1) / kTileK;
  const int64_t row_bytes = int64_t(ktiles) * (kTileK / 2);
  const int tid = threadIdx.x;
  // this thread's copies of a chunk: code pieces tid and tid + 128 (row piece / 4, piece % 4), scale piece tid % 64
  // (atom tid / 32 % 2, 16-byte line tid % 32) by threads < 64, token pieces as the wgmma loop
  const uint8_t* csrc[2];
  uint32_t cdst[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int piece = tid + 128 * i, r = piece / 4, pc = piece % 4;
    csrc[i] = p.weight + (int64_t(group) * p.n + min(n0 + r, p.n - 1)) * row_bytes + 16 * pc;
    cdst[i] = kTokenBytes + r * 64 + ((pc ^ ((r / 2) % 4)) << 4);
  }
  const uint8_t* ssrc = p.weight_scales + int64_t(group) * p.scale_group_bytes +
                        int64_t(n0 / 128) * 128 * p.scale_cols + (tid / 32 % 2) * 512 + (tid % 32) * 16;
  const uint32_t sdst = kScaleOffset + (tid / 32 % 2) * 512 + (tid % 32) * 16;
  const int piece = tid % 16, trow = tid / 16;
  // token rows past the block's `count` are zero-filled, not copied from its last row: those duplicate copies of
  // one row from up to 31 threads made a block of 33-48 tokens up to 2x slower than a full one of 64 (H100,
  // perf/results/h100/nvfp4_token_blocks/)
  const T* xsrc[kTokenTiles];
  uint32_t xdst[kTokenTiles];
  bool xlive[kTokenTiles];
#pragma unroll
  for (int j = 0; j < kTokenTiles; ++j) {
    const int tok = min(trow + 8 * j, count - 1);
    xsrc[j] = static_cast<const T*>(p.x) + int64_t(block + tok) * p.k + 8 * piece;
    xdst[j] = (piece / 8) * kHalfBytes + (trow + 8 * j) * 128 + (((piece % 8) ^ trow) << 4);
    xlive[j] = trow + 8 * j < count;
  }
  const uint32_t smem0 = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  auto copy_chunk = [&](int c, int stage) {
    if (c < c_end) {
      const uint32_t at = smem0 + stage * kStageBytes;
#pragma unroll
      for (int i = 0; i < 2; ++i)  // k-tiles past the prepared row: zeros
        cp_async16(at + cdst[i], csrc[i] + int64_t(c) * (kChunkK / 2), 2 * c + (tid + 128 * i) % 4 / 2 < ktiles);
      if (tid < 64) cp_async16(at + sdst, ssrc + int64_t(c) * 1024, 2 * c + tid / 32 < ktiles);
      const bool ok = c * kChunkK + 8 * piece < p.k;
#pragma unroll
      for (int j = 0; j < kTokenTiles; ++j) cp_async16(at + xdst[j], xsrc[j] + int64_t(c) * kChunkK, ok && xlive[j]);
    }
    cp_async_commit();  // one group per chunk, empty past the end: the waits count chunks
  };
  // this lane's words in a stage: rows r_t = 16 warp + g + 8t, k-tile h
  uint32_t code_at[2][2], scale_at[2][2];
#pragma unroll
  for (int t = 0; t < 2; ++t) {
    const int r = 16 * warp + g + 8 * t, rr = (n0 + r) % 128;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int pc = 2 * h + q / 2;
      code_at[h][t] = kTokenBytes + r * 64 + ((pc ^ ((r / 2) % 4)) << 4) + 8 * (q % 2);
      scale_at[h][t] = kScaleOffset + h * 512 + scale_atom_row_offset(rr);
    }
  }
  auto read_chunk = [&](PreparedChunk& w, int stage) {
    const uint8_t* base = smem + stage * kStageBytes;
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        w.codes[h][t] = *reinterpret_cast<const uint2*>(base + code_at[h][t]);
        w.scales[h][t] = *reinterpret_cast<const uint32_t*>(base + scale_at[h][t]);
      }
  };

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) copy_chunk(c_begin + s, s);
  uint32_t a[2][4][4];
  int stage = 0;
  fence_accumulators(acc);
  for (int c = c_begin; c < c_end; ++c) {
    cp_async_wait<kStages - 2>();  // this thread's copies of chunk c landed
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // visible to the wgmmas (async proxy)
    __syncthreads();                                               // every thread's
    PreparedChunk w;
    read_chunk(w, stage);
    decode_ktile<T>(w, 0, a[0]);
    wgmma_ktile<Op, kTokenTiles>(a[0], smem0 + stage * kStageBytes, acc);
    cute::warpgroup_wait<1>();  // the previous k-tile is done: a[1] and the previous chunk's stage are free
    copy_chunk(c + kStages - 1, stage == 0 ? kStages - 1 : stage - 1);
    if (2 * c + 1 < ktiles) {
      decode_ktile<T>(w, 1, a[1]);
      wgmma_ktile<Op, kTokenTiles>(a[1], smem0 + stage * kStageBytes + kHalfBytes, acc);
      cute::warpgroup_wait<1>();  // k-tile 0 is done: a[0] is free
    } else {
      cute::warpgroup_wait<0>();  // (the last chunk) the same for the next pass, as ptxas sees the loop
    }
    stage = stage + 1 == kStages ? 0 : stage + 1;
  }
  cute::warpgroup_wait<0>();
  fence_accumulators(acc);
  cp_async_wait<0>();
  __syncthreads();  // the stages may be reused (the partials live there)
}

// The epilogue's leaves for the output pair of group `group`, token row `row`, columns `col`, `col` + 1 (addressed
// as abi.h's GroupedLeafMode says), loaded apart from the arithmetic so that their loads can be in flight with the
// partial sums' (every CTA's epilogue waits on both: with the main loop's tail and the cluster barriers, 23-27% of
// the wgmma loop's warp-stall samples at 16-64 tokens fell after the main loop before, perf/results/h200/nvfp4_m64_l2/).
struct PairLeaves {
  float sa, sb[2], bias[2];
};
template <class Out>
__device__ __forceinline__ PairLeaves load_leaves(Params const& p, int group, int row, int col) {
  PairLeaves l;
  l.sa = __ldg(p.scale_a + (p.scale_a_mode == kLeafPerRow ? row : p.scale_a_mode == kLeafPerGroup ? group : 0));
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l.sb[i] = __ldg(p.scale_b + (p.scale_b_mode == kLeafPerGroupVec ? int64_t(group) * p.n + col + i
                                 : p.scale_b_mode == kLeafPerGroup ? group : 0));
    l.bias[i] = 0.f;
    if (p.bias_mode != kLeafNull) {
      const Out* bias = static_cast<const Out*>(p.bias);
      l.bias[i] = float(bias[p.bias_mode == kLeafPerGroupVec ? int64_t(group) * p.n + col + i : col + i]);
    }
  }
  return l;
}

// The epilogue of output i of a pair: act(fl(fl(scale_a * scale_b) * acc) + bias), cast (scalemm.epilogues.scaled's
// order, CUTLASS's activation functors).
template <class Out, class Act>
__device__ __forceinline__ Out epilogue(float acc, PairLeaves const& l, int i, bool has_bias) {
  float v = (l.sa * l.sb[i]) * acc;
  if (has_bias) v = v + l.bias[i];
  return cutlass::NumericConverter<Out, float, cutlass::FloatRoundStyle::round_to_nearest>{}(Act{}(v));
}

// Two consecutive outputs, one store (2-byte types: 4 bytes; fp32: 8 bytes; aligned: n and the pair's
// first column are even).
template <class Out>
__device__ __forceinline__ void store_pair(Out* d, Out const (&v)[2]) {
  if constexpr (sizeof(Out) == 2) {
    uint32_t bits;
    memcpy(&bits, v, 4);
    *reinterpret_cast<uint32_t*>(d) = bits;
  } else {
    *reinterpret_cast<float2*>(d) = make_float2(float(v[0]), float(v[1]));
  }
}

// Which group a grouped CTA runs. The group's rows are [first, last) by the rule of every grouped kernel
// (scalemm.formats.layout.group_bounds): ends = running max of the offsets clamped into [0, tokens],
// first = the previous group's end, so bad offsets give empty or short groups, never overlapping rows or rows
// outside the scale rows the quantizer laid out. Group j holds rows iff its clamped offset exceeds every
// earlier one. At most `tokens` groups hold rows, so the launcher runs slots = min(groups, tokens) slots along
// the grid's z:
//  - slots == groups: slot z is group z (an empty group's CTAs leave at once, among the others);
//  - slots < groups (compact): slot z takes the r-th group holding rows, r = z * slot_stride mod slots (the
//    launcher's stride, coprime to slots, scatters the ranks so the slots left empty are spread over the grid
//    instead of forming a tail of CTAs that only leave). A decode step routed to 8 of 256 experts launches the
//    CTAs of 8 slots, not of 256 groups. Slots past the groups holding rows get group -1 (and first = last).
// A CTA with first == last leaves, with its whole cluster (the same slot). The CTA's threads each take a run of
// consecutive groups, their offsets loaded at once (kGroupsPerThread: a round of loads, not a chain, up to 512
// groups); compact launches then scan the runs' maxima and the counts of groups holding rows across the CTA, and
// the one thread whose run holds the slot's group writes it. All threads call this. (Warp 0 alone, G / 32 dependent
// loads per lane, ran Qwen3-30B-A3B's grouped decode at 16 tokens 2-6% slower on an H100.)
struct GroupRows {
  int group, first, last;
};
constexpr int kGroupsPerThread = 4;
constexpr int kGroupResultAt = 2 * kWarps;             // find_group's scratch: two scans' warp partials, then
constexpr int kGroupScratch = kGroupResultAt + 3;      // the result (group, first, last)

__device__ __forceinline__ GroupRows find_group(const int* offsets, int groups, int tokens, int slot, int slots,
                                                int slot_stride, int* scratch) {
  constexpr int kThreads = kWarps * 32;
  const int tid = threadIdx.x;
  auto end_of = [&](int j) { return group_offsets::clamp_offset(__ldg(offsets + j), tokens); };
  int* result = scratch + kGroupResultAt;
  if (slots == groups) {  // group `slot`: first = the running max of the offsets before it
    int m = 0;
    for (int j0 = 0; j0 < slot; j0 += kThreads * kGroupsPerThread) {
      int v[kGroupsPerThread];
#pragma unroll
      for (int i = 0; i < kGroupsPerThread; ++i) {
        const int j = j0 + i * kThreads + tid;
        v[i] = j < slot ? end_of(j) : 0;
      }
#pragma unroll
      for (int i = 0; i < kGroupsPerThread; ++i) m = max(m, v[i]);
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (tid % 32 == 0) scratch[tid / 32] = m;
    __syncthreads();
    int first = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) first = max(first, scratch[w]);
    return {slot, first, max(first, end_of(slot))};
  }
  const int rank = int(int64_t(slot) * slot_stride % slots);
  const int per = (groups + kThreads - 1) / kThreads, j0 = min(tid * per, groups), j1 = min(j0 + per, groups);
  // the run's first clamped offsets, loaded at once (0 past its end: never above a running max); read again (from
  // L1) after each scan rather than held across it
  auto load_run = [&](int (&v)[kGroupsPerThread]) {
#pragma unroll
    for (int i = 0; i < kGroupsPerThread; ++i) v[i] = j0 + i < j1 ? end_of(j0 + i) : 0;
  };
  int v[kGroupsPerThread];
  load_run(v);
  int run_max = 0;
#pragma unroll
  for (int i = 0; i < kGroupsPerThread; ++i) run_max = max(run_max, v[i]);
  for (int j = j0 + kGroupsPerThread; j < j1; ++j) run_max = max(run_max, end_of(j));
  // the end of the group before the run
  const int before = group_offsets::block_scan<kThreads>(run_max, group_offsets::MaxOp{}, scratch).exclusive;
  // walk the run from `before`: count the groups holding rows, or (find) stop at the one of rank `want`
  auto walk = [&](int want, bool find) {
    int v[kGroupsPerThread];
    load_run(v);
    int e = before, r = 0;
#pragma unroll
    for (int i = 0; i < kGroupsPerThread; ++i) {
      if (v[i] > e) {
        if (find && r == want) result[0] = j0 + i, result[1] = e, result[2] = v[i];
        ++r, e = v[i];
      }
    }
    for (int j = j0 + kGroupsPerThread; j < j1; ++j) {
      const int c = end_of(j);
      if (c > e) {
        if (find && r == want) result[0] = j, result[1] = e, result[2] = c;
        ++r, e = c;
      }
    }
    return r;
  };
  const int held = walk(0, false);
  // groups holding rows before the run
  const int base = group_offsets::block_scan<kThreads>(held, group_offsets::SumOp{}, scratch + kWarps).exclusive;
  if (rank >= base && rank < base + held) walk(rank - base, true);        // one thread
  if (tid == kThreads - 1 && rank >= base + held) result[0] = -1, result[1] = 0, result[2] = 0;  // past them all
  __syncthreads();
  return {result[0], result[1], result[2]};
}

// Grid (splits, ceil(n / kTileN), slots), cluster (splits, 1, 1): CTA s of a cluster reduces K chunks
// [s * chunks_per_split, (s + 1) * chunks_per_split) for the cluster's 64 weight rows of its group (dense: one
// slot, the one group; grouped: find_group),
// for each block of up to 8 * kTokenTiles of the group's tokens in turn (at decode: one block; dense: the block
// blockIdx.z).
// kGrouped: p.offsets is set (the grouped kernel); the dense kernel has no group code at all (with the group code
// compiled in, though never run, dense decode ran 2-4% slower on an H100).
template <class T, bool kX4, class Out, int kTokenTiles, int kLoop, class Act, bool kGrouped>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks<kTokenTiles, kLoop>) nvfp4_skinny_kernel(const Params p) {
  // value * s * 2^-kDecodeShift per decoded operand: one (W4A16) or two (W4A4) factors to undo, exactly
  constexpr float kUnscale = kX4 ? kDecodeUnscale * kDecodeUnscale : kDecodeUnscale;
  namespace cg = cooperative_groups;
  constexpr int kTokens = 8 * kTokenTiles;
  constexpr int kPitch = kTileN + 4;  // floats per partial row (one row per token; + 4: no bank conflicts)
  constexpr bool kWgmma = is_wgmma(kLoop);
  static_assert(!kWgmma || !kX4, "the wgmma loop takes bf16/fp16 tokens (NVFP4 ones: decoded by the launcher's pass)");
  static_assert(!kWgmma || kTokens * kPitch * 4 <= kDynamicSmem<kTokenTiles, kLoop> - 1024, "partials fit the stages");
  __shared__ int group_scratch[kGroupScratch];
  // kWgmma: the token stages (dynamic, aligned here to 1024 for the swizzle), the partials after the main loop;
  // kLoopResident: the resident tokens (aligned here to 16)
  extern __shared__ uint8_t dynamic_smem[];
  uint8_t* stages = nullptr;
  T* staged = nullptr;
  if constexpr (is_resident(kLoop)) {
    const uint32_t at = static_cast<uint32_t>(__cvta_generic_to_shared(dynamic_smem));
    staged = reinterpret_cast<T*>(dynamic_smem + ((16 - at % 16) % 16));
  }
  float* partial;
  if constexpr (kWgmma) {
    const uint32_t at = static_cast<uint32_t>(__cvta_generic_to_shared(dynamic_smem));
    stages = dynamic_smem + ((1024 - at % 1024) % 1024);
    partial = reinterpret_cast<float*>(stages);
  } else {
    __shared__ __align__(16) float static_partial[kTokens * kPitch];
    partial = static_partial;
  }

  // grouped: blockIdx.z is a slot (find_group); dense: one group, blockIdx.z a block of its rows. The mma.sync loops
  // read the group again where they use it (blockIdx.z, or in compact launches the found group from shared memory;
  // group_of_cta) rather than hold it in a register across the main loop: held, their 128-register kernels ran
  // DeepSeek-V3's grouped decode ~5% slower (H100). The wgmma loop holds it (the re-reads made it spill).
  int group = 0, first = 0, last = p.tokens, scale_row = 0;
  if constexpr (!kGrouped) {  // blockIdx.z: the block of kTokens tokens (launch_slots); kX4: their own scale rows
    first = scale_row = int(blockIdx.z) * kTokens;
    last = min(p.tokens, first + kTokens);
  } else {
    const GroupRows found = find_group(p.offsets, p.groups, p.tokens, int(blockIdx.z), int(gridDim.z), p.slot_stride,
                                       group_scratch);
    group = found.group, first = found.first, last = found.last;
    if (kX4 && found.group >= 0) scale_row = __ldg(p.x_sf_offsets + found.group);
  }
  auto group_of_cta = [&]() -> int {
    if constexpr (kGrouped && !kWgmma)
      return int(gridDim.z) == p.groups ? int(blockIdx.z) : *reinterpret_cast<volatile const int*>(&group_scratch[kGroupResultAt]);
    return group;
  };
  if (last <= first) return;  // the whole cluster leaves together

  cg::cluster_group cluster = cg::this_cluster();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, q = lane % 4;
  const int split = blockIdx.x, splits = gridDim.x;
  const int n0 = blockIdx.y * kTileN, row0 = n0 + warp * (8 * kN8PerWarp) + g;
  const int chunks = (p.k + kChunkK - 1) / kChunkK;
  const int c_begin = min(split * p.chunks_per_split, chunks);
  const int c_end = min(c_begin + p.chunks_per_split, chunks);
  Out* d = static_cast<Out*>(p.d);

  for (int block = first; block < last; block += kTokens) {
    const int count = min(kTokens, last - block);
    float acc[kTokenTiles][4] = {};
    const Lane<T, kX4> lane_src(p, group_of_cta(), row0, block, count, scale_row + (block - first), g, q);
    if constexpr (kWgmma)
      wgmma_loop<T, kTokenTiles>(acc, p, stages, group_of_cta(), n0, block, count, c_begin, c_end, warp, g, q);
    else
      lean_loop<T, kX4, kTokenTiles, kLoop>(acc, lane_src, p, group_of_cta(), n0 + warp * (8 * kN8PerWarp), block, count,
                                            scale_row + (block - first), c_begin, c_end, g, q, staged);

    // partial sums (x kUnscale, exact) -> shared memory [token][weight row of the tile]: the
    // accumulator of lane (g, q) holds rows g (c0, c1) and g + 8 (c2, c3), tokens 2q and 2q + 1.
#pragma unroll
    for (int m = 0; m < kTokenTiles; ++m) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = warp * (8 * kN8PerWarp) + 8 * h + g;
        partial[(8 * m + 2 * q) * kPitch + row] = acc[m][2 * h] * kUnscale;
        partial[(8 * m + 2 * q + 1) * kPitch + row] = acc[m][2 * h + 1] * kUnscale;
      }
    }
    // every CTA's partials are written (release/acquire across the cluster; without a split, the CTA's barrier and
    // its own shared memory: the cluster barriers and DSMEM reads of a 1-CTA cluster made grouped decode up to 1.2x
    // slower, H100, perf/NOTES.md "the epilogue's barriers")
    if (splits == 1)
      __syncthreads();
    else
      cluster.sync();

    // CTA `split` finishes every splits-th pair of outputs (one token, two weight rows) of the
    // cluster's tile, adding the partials of CTAs 0, 1, ... in that order.
    // n is even (16-byte output rows), so a pair never straddles n and stores as one. A thread takes
    // kEpiloguePairs of its pairs at once: their leaves' and partials' loads are all issued before the first sum
    // is needed (one pair at a time, each waited for its partials, then for its leaves). Bit-identical; H200, the
    // default dispatch against the previous code, two runs each (perf/results/h200/nvfp4_epilogue_leaves/round2):
    // 1.01x at 1-8 tokens (W4A16 and W4A4), 1.02x at 16, 48 and 64.
    constexpr int kPairs = kEpiloguePairs<kTokenTiles, kLoop>;
    const int pairs = count * (kTileN / 2), stride = splits * blockDim.x, out_group = group_of_cta();
    for (int e0 = split * blockDim.x + threadIdx.x; e0 < pairs; e0 += kPairs * stride) {
      PairLeaves leaves[kPairs];
      float2 sum[kPairs];
      int tok[kPairs], col[kPairs];  // pair j: token row of the block, first column of the tile
#pragma unroll
      for (int j = 0; j < kPairs; ++j) {
        const int e = e0 + j * stride;
        tok[j] = e / (kTileN / 2), col[j] = 2 * (e % (kTileN / 2));
        sum[j] = make_float2(0.f, 0.f);
        if (e < pairs) leaves[j] = load_leaves<Out>(p, out_group, block + tok[j], min(n0 + col[j], p.n - 2));
      }
      if (splits == 1) {  // this CTA's own partials (0.f +: the same bits as the sum below)
#pragma unroll
        for (int j = 0; j < kPairs; ++j) {
          if (e0 + j * stride < pairs) {
            const float2 v = *reinterpret_cast<const float2*>(&partial[tok[j] * kPitch + col[j]]);
            sum[j].x += v.x;
            sum[j].y += v.y;
          }
        }
      } else {
        for (int r = 0; r < splits; ++r) {
#pragma unroll
          for (int j = 0; j < kPairs; ++j) {
            if (e0 + j * stride < pairs) {
              const float2 v =
                  *reinterpret_cast<const float2*>(cluster.map_shared_rank(&partial[tok[j] * kPitch + col[j]], r));
              sum[j].x += v.x;
              sum[j].y += v.y;
            }
          }
        }
      }
#pragma unroll
      for (int j = 0; j < kPairs; ++j) {
        const int c0 = n0 + col[j];
        if (e0 + j * stride < pairs && c0 < p.n) {
          const bool has_bias = p.bias_mode != kLeafNull;
          Out pair[2] = {epilogue<Out, Act>(sum[j].x, leaves[j], 0, has_bias),
                         epilogue<Out, Act>(sum[j].y, leaves[j], 1, has_bias)};
          store_pair(d + int64_t(block + tok[j]) * p.n + c0, pair);
        }
      }
    }
    // the partials are read before the next block overwrites them or a CTA leaves (a CTA's own: its barrier). The
    // cluster's arrive is relaxed: the reads are done (their sums were stored), and there is nothing to release,
    // while a release would wait for the output stores above to become visible across the cluster (with the
    // release: dense decode 1.5-8% slower, H100)
    if (splits == 1) {
      __syncthreads();
    } else {
      asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
      asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
    }
  }
}

// A CTA's fixed cost in chunks of streaming: its ring's first loads (exposed latency), the cluster
// barriers and its share of the reduction. Fitted on an H100 (perf/NOTES.md, "skinny kernel:
// measured"): with 1 the model sent 14336 x 4096 to 8 splits in 3 waves (27.1 us) where 2 splits in
// one wave ran in 24.5 us.
constexpr int64_t kSplitOverheadChunks = 4;
// CTAs per SM (in halves: 2.5) that already keep an SM streaming at its full rate: more CTAs on an SM
// share it. On an H100 (every split timed on nine layer shapes, perf/NOTES.md "the split model"),
// 14336 x 4096 ran 19.9 us with 1.7 CTAs per SM of 32 chunks each and 17.8 us with 3.4 of 16; 8192^2
// ran 20.1 us with 2.9 CTAs per SM and 25.4 us with 3.9. Without this term the model filled every
// SM with 4 CTAs and lost up to 1.4x.
constexpr int64_t kSaturatingCtasPerSmX2 = 5;
// The same for the wgmma loop, whose CTAs each keep a deep ring of copies in flight: 2 per SM, and its split
// counts powers of two (H100, splits timed at 16-64 tokens on nine layer shapes, perf/NOTES.md "the wgmma
// main loop": 8192^2 at 16 tokens ran 22.4 us at 2 splits, ~2 CTAs per SM, 26.4 us at 3, the choice with 2.5
// and every count, and 5120^2 12.6 us at 4, 15.1 at 3). With both, the choice was within 5% of the best
// power of two on 22 of 27 points, 6-13% off on the other five (28672 x 8192, and 4096 x 14336 at 32).
constexpr int64_t kWgmmaSaturatingCtasPerSmX2 = 4;

// How many CTAs split K: the one in [1, min(kMaxSplits, chunks)] (powers_of_two: of those, 1, 2, 4, 8) that
// minimises the time of the busiest SM, waves x (chunks per CTA + kSplitOverheadChunks) x max(1, its CTAs /
// (saturating_x2 / 2)), where resident[s] CTAs fit on the GPU at once in clusters of s and `sms` is the SM
// count (0: unknown, no sharing term). Ties go to fewer splits.
inline int choose_splits(int64_t tiles, int64_t chunks, int64_t sms, int64_t const (&resident)[kMaxSplits + 1],
                         int64_t saturating_x2 = kSaturatingCtasPerSmX2, bool powers_of_two = false) {
  int best = 1;
  int64_t best_cost = -1;
  for (int s = 1; s <= kMaxSplits && s <= chunks; ++s) {
    if (resident[s] <= 0) continue;  // clusters of s CTAs do not fit (or the query failed): not an option
    if (powers_of_two && (s & (s - 1)) != 0) continue;
    const int64_t fit = resident[s], ctas = tiles * s;
    const int64_t waves = (ctas + fit - 1) / fit, per = (chunks + s - 1) / s;
    const int64_t busiest = sms > 0 ? (std::min(ctas, fit) + sms - 1) / sms : 0;  // CTAs on one SM in a wave
    const int64_t cost = waves * (per + kSplitOverheadChunks) * std::max(saturating_x2, 2 * busiest);
    if (best_cost < 0 || cost < best_cost) best = s, best_cost = cost;
  }
  return best;
}

// find_group's stride for `slots` slots: the first integer from 0.618 * slots up that is coprime to it (so
// z -> z * stride mod slots is a permutation), 1 for one slot.
inline int64_t slot_stride(int64_t slots) {
  if (slots <= 1) return 1;
  int64_t s = std::max<int64_t>(1, slots * 618 / 1000);
  while (std::gcd(s, slots) != 1) ++s;
  return s;
}

// The slots of a launch along the grid's z: grouped, one per group that can hold rows (at most `tokens` do;
// find_group), dense one per block of `block_tokens` tokens (so more tokens than one block's run side by side,
// each CTA streaming its weights for its own block: L2 serves the repeats).
inline int64_t launch_slots(Nvfp4SkinnyGemmArgs const& a, int64_t block_tokens) {
  return a.offsets != nullptr ? std::min<int64_t>(a.groups, a.tokens) : (a.tokens + block_tokens - 1) / block_tokens;
}

// Grid (splits, tiles, slots) in clusters of (splits, 1, 1); `attr` must outlive the config.
inline cudaLaunchConfig_t cluster_config(int splits, int64_t tiles, int64_t slots, int smem, cudaStream_t stream,
                                         cudaLaunchAttribute& attr) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(splits), unsigned(tiles), unsigned(slots));
  cfg.blockDim = dim3(unsigned(kWarps) * 32, 1, 1);
  cfg.dynamicSmemBytes = size_t(smem);
  cfg.stream = stream;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = unsigned(splits);
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  return cfg;
}

inline bool leaf_mode_ok(int64_t mode, std::initializer_list<int> allowed) {
  for (int m : allowed)
    if (mode == m) return true;
  return false;
}

// The kernel a launch runs: the grouped one (offsets set) or the dense one.
template <class T, bool kX4, class Out, int kTokenTiles, int kLoop, class Act>
auto kernel_for(bool grouped) {
  return grouped ? nvfp4_skinny_kernel<T, kX4, Out, kTokenTiles, kLoop, Act, true>
                 : nvfp4_skinny_kernel<T, kX4, Out, kTokenTiles, kLoop, Act, false>;
}

// Lets the kernel have its dynamic shared memory on the current device `device` (over 48 KB needs the
// opt-in), once per device; not a stream operation, so also safe inside a graph capture.
template <class T, bool kX4, class Out, int kTokenTiles, int kLoop, class Act>
void allow_dynamic_smem(int64_t device) {
  if constexpr (kDynamicSmem<kTokenTiles, kLoop> > 0) {
    static bool done[64] = {};
    if (!done[device]) {
      for (bool grouped : {false, true})
        cudaFuncSetAttribute(kernel_for<T, kX4, Out, kTokenTiles, kLoop, Act>(grouped),
                             cudaFuncAttributeMaxDynamicSharedMemorySize, kDynamicSmem<kTokenTiles, kLoop>);
      done[device] = true;
    }
  }
}

// kLoopResident: token rows a CTA holds at once, the launch's tokens (dense) or a block's most (grouped)
template <int kTokenTiles>
int64_t resident_rows(Nvfp4SkinnyGemmArgs const& a) {
  return a.offsets != nullptr ? 8 * kTokenTiles : std::min<int64_t>(a.tokens, 8 * kTokenTiles);
}

// How a launch with arguments `a` runs: `error` (a cudaError_t or kBadArgument) when it cannot, else
// `splits` CTAs along K of `per_split` chunks each (0 splits: nothing to do, n or tokens is 0).
// a.splits = 0: choose_splits for this GPU (CUDA's count of co-resident clusters of each size and the SM count, asked
// once per device); 1..kMaxSplits: as given. Dense (offsets null): one slot per block of 8 * kTokenTiles tokens.
struct Plan {
  int error = 0;
  int splits = 0;
  int64_t per_split = 0;
};

template <class T, bool kX4, class Out, int kTokenTiles, int kLoop, class Act>
Plan plan(Nvfp4SkinnyGemmArgs const& a) {
  static_assert(kLoop == kLoopLean || kLoop == kLoopStepped || is_wgmma(kLoop) || is_resident(kLoop), "main loop");
  Plan out;
  const cudaError_t err = cudaSetDevice(int(a.device));  // our static cudart tracks its own device
  if (err != cudaSuccess) return out.error = static_cast<int>(err), out;
  const bool grouped = a.offsets != nullptr;
  if (a.splits < 0 || a.splits > kMaxSplits || a.k % 32 != 0 || a.n < 0 || a.n % 2 != 0 || a.tokens < 0 ||
      (!grouped && a.tokens > int64_t(65535) * 8 * kTokenTiles) || a.groups < 1 || a.groups > 65535 ||
      (!grouped && a.groups != 1) ||
      a.n > int64_t(65535) * kTileN || a.k > (int64_t(1) << 30) || a.tokens > (int64_t(1) << 30) ||
      a.device < 0 || a.device >= 64 || kX4 != (a.x_scales != nullptr) || (kX4 && grouped && !a.x_sf_offsets) ||
      !leaf_mode_ok(a.scale_a_mode, {kLeafOne, kLeafPerRow, kLeafPerGroup}) ||
      !leaf_mode_ok(a.scale_b_mode, {kLeafOne, kLeafPerGroup, kLeafPerGroupVec}) ||
      !leaf_mode_ok(a.bias_mode, {kLeafNull, kLeafShared, kLeafPerGroupVec}))
    return out.error = kBadArgument, out;
  if (a.n == 0 || a.tokens == 0) return out;
  const int64_t tiles = (a.n + kTileN - 1) / kTileN, chunks = (a.k + kChunkK - 1) / kChunkK;
  int splits = int(a.splits);
  if (splits == 0) {
    // [grouped][device][cluster size]: CTAs that fit at once (0: that size cannot run), filled on first use;
    // concurrent first calls compute the same values
    static int64_t resident[2][64][kMaxSplits + 1] = {};
    static int64_t sm_count[64] = {};
    static bool queried[2][64] = {};
    int64_t(&fit)[kMaxSplits + 1] = resident[grouped][a.device];
    if (!queried[grouped][a.device]) {
      allow_dynamic_smem<T, kX4, Out, kTokenTiles, kLoop, Act>(a.device);
      int sms = 0;
      if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, int(a.device)) != cudaSuccess) sms = 0;
      sm_count[a.device] = sms;
      for (int s = 1; s <= kMaxSplits; ++s) {
        cudaLaunchAttribute attr;
        const cudaLaunchConfig_t cfg = cluster_config(s, 1, 1, kDynamicSmem<kTokenTiles, kLoop>, nullptr, attr);
        int clusters = 0;
        if (cudaOccupancyMaxActiveClusters(&clusters, kernel_for<T, kX4, Out, kTokenTiles, kLoop, Act>(grouped), &cfg) !=
            cudaSuccess)
          clusters = 0;
        fit[s] = int64_t(clusters) * s;
      }
      cudaGetLastError();  // a failed query is not this launch's error
      queried[grouped][a.device] = true;
    }
    splits = choose_splits(tiles * launch_slots(a, 8 * kTokenTiles), chunks, sm_count[a.device], fit,
                           is_wgmma(kLoop) ? kWgmmaSaturatingCtasPerSmX2 : kSaturatingCtasPerSmX2, is_wgmma(kLoop));
  }
  out.per_split = chunks == 0 ? 0 : (chunks + splits - 1) / splits;
  // a split's resident tokens must fit kResidentTokenBytes at the split given or chosen (not split further for them:
  // at more splits than the model's the loop ran 2.5-5% slower than kLoopStepped at the model's, H100)
  if (is_resident(kLoop) && resident_bytes<T>(resident_rows<kTokenTiles>(a), out.per_split) > kResidentTokenBytes)
    return out.error = kBadArgument, out;
  out.splits = out.per_split > 0 ? int((chunks + out.per_split - 1) / out.per_split) : splits;  // no CTA without chunks
  return out;
}

// The split count a launch of q.call runs (1..kMaxSplits; 0: nothing to do) into *q.splits, or the error
// that launch would return: what scalemm.gemm_nvfp4.skinny_splits reports (splits = 0 resolved).
template <class T, bool kX4, class Out, int kTokenTiles, int kLoop, class Act>
int resolve_splits(Nvfp4SkinnySplitsArgs const& q) {
  if (q.call == nullptr || q.splits == nullptr) return kBadArgument;
  const Plan pl = plan<T, kX4, Out, kTokenTiles, kLoop, Act>(*static_cast<Nvfp4SkinnyGemmArgs const*>(q.call));
  *static_cast<int64_t*>(q.splits) = pl.splits;
  return pl.error;
}

template <class T, bool kX4, class Out, int kTokenTiles, int kLoop, class Act>
int launch(Nvfp4SkinnyGemmArgs const& a) {
  const Plan pl = plan<T, kX4, Out, kTokenTiles, kLoop, Act>(a);
  if (pl.error != 0 || pl.splits == 0) return pl.error;
  const int64_t tiles = (a.n + kTileN - 1) / kTileN;
  const int64_t slots = launch_slots(a, 8 * kTokenTiles);
  Params p{static_cast<const uint8_t*>(a.weight), static_cast<const uint8_t*>(a.weight_scales), a.x,
           static_cast<const uint8_t*>(a.x_scales), a.d, static_cast<const float*>(a.scale_a),
           static_cast<const float*>(a.scale_b), a.bias, int(a.scale_a_mode), int(a.scale_b_mode), int(a.bias_mode),
           int(a.n), int(a.tokens), int(a.k), int(a.scale_cols), int(pl.per_split), static_cast<const int*>(a.offsets),
           static_cast<const int*>(a.x_sf_offsets), (a.n + 127) / 128 * 128 * a.scale_cols, int(a.groups),
           int(slot_stride(slots))};
  allow_dynamic_smem<T, kX4, Out, kTokenTiles, kLoop, Act>(a.device);
  cudaLaunchAttribute attr;
  const int64_t smem = is_resident(kLoop) ? resident_bytes<T>(resident_rows<kTokenTiles>(a), pl.per_split)
                                          : kDynamicSmem<kTokenTiles, kLoop>;
  const cudaLaunchConfig_t cfg = cluster_config(pl.splits, tiles, slots, int(smem), static_cast<cudaStream_t>(a.stream),
                                                attr);
  const cudaError_t err = cudaLaunchKernelEx(&cfg, kernel_for<T, kX4, Out, kTokenTiles, kLoop, Act>(a.offsets != nullptr), p);
  return static_cast<int>(err != cudaSuccess ? err : cudaGetLastError());
}

}  // namespace scalemm::sm90::skinny
