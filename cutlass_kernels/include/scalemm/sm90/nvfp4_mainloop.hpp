// scalemm: SM90 mainloop for NVFP4 weights x bf16 activations, exact (docs/numerics.md section 4).
//
// The GEMM is computed swapped, D^T = W X^T, so the weights are the register-sourced wgmma
// operand A and the tokens sit on the wgmma N side (small for decode):
//   A: prepared NVFP4 weights, uint8 [L][N_w][K_pad / 2] (see "prepared layout" below);
//   scales: the quantizer's e4m3 block scales in the 128x4 swizzled layout, untouched: batch l
//     starts at byte l * scale_batch_bytes, and the 512-byte atom of rows [128 i, 128 i + 128)
//     and k-tile kt (64 elements) is at byte (i * atoms_per_row_tile + kt) * 512;
//   B: bf16 (or fp16) activations [L][tokens][K], K-major, TMA-loaded into 128B-swizzled smem;
//     or (W4A4, ElementB = Nvfp4Activations) the activations' packed e2m1 codes uint8 [tokens][K / 2]
//     as the quantizer wrote them, with their own 128x4 scale atoms (see "NVFP4 activations" below).
// Per k-tile of 64 elements a producer warp TMA-loads the A tile (TileM rows x 32 bytes), the B
// tile and, with one bulk copy, the scale atom. Each consumer thread reads its weight bytes and
// scales from shared memory, decodes them into the bf16 A fragment (scalemm/sm90/nvfp4_numerics.cuh)
// while earlier wgmmas run, and issues m64nNk16 RS wgmmas; one wgmma k-block (16) is exactly one
// NVFP4 block, so each fragment register needs one scale. The accumulator is multiplied by
// 2^kDecodeShift at the end (exact), and the epilogue applies the global scales in fp32.
//
// NVFP4 activations (W4A4): per k-tile the producer loads the token tile's codes (TileN rows x 32
// bytes) and its TileN / 128 scale atoms; the 256 consumer threads decode them exactly (code x
// block scale x 2^-kDecodeShift, the weights' decode) into a bf16 tile in the canonical wgmma
// layout, one of three such tiles in shared memory, while the wgmmas of the previous k-tile run.
// A fence.proxy.async and a named barrier over both consumer warpgroups publish each tile to the
// wgmmas; three tiles let one barrier per k-tile also guard the tile being rewritten (its last
// readers, two k-tiles back, have completed). The packed stage is released as soon as it is decoded.
//
// Tokens on A (kTokensOnA, W4A4 on many tokens): the GEMM is computed unswapped, D = X W^T. A is then the NVFP4
// activations' codes uint8 [tokens][K / 2] in the quantizer's own order (no prepared copy, rows of K / 2 bytes, the
// last k-tile's bytes past K zero-filled by TMA) with their 128x4 scale atoms, decoded in registers like the
// weights; B is the weights decoded exactly to bf16 by a pass (value x block scale, their global scale left for the
// epilogue). In that order the 8 bytes a thread needs from a row's 32-byte chunk are bytes t, t + 4, ..., t + 28:
// the consumer reads the chunk and gathers them (3 byte permutes per 4 bytes) into the words the decode takes.
//
// Prepared layout (built once per weight by scalemm.formats.nvfp4.prepare_sm90_weight): K is padded
// to a multiple of 64 with zero codes; each row's 64-element chunk (32 bytes) is permuted so that
// the thread with t = lane % 4 finds the 8 bytes it needs for the chunk at [8t, 8t + 8), as two
// 32-bit words w (k-blocks 2w and 2w + 1). Nibble n of word w holds the element
//   16 * (2w + (n % 4) / 2) + 2t + 8 * (n % 2) + n / 4
// so that nibbles j and j + 4 are the two elements of one bf16x2 fragment register.
#pragma once

#include <cstdint>

#include "cutlass/cutlass.h"
#include "cutlass/gemm/gemm.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/pipeline/pipeline.hpp"
#include "cutlass/gemm/collective/builders/sm90_common.inl"
#include "cute/arch/copy_sm90.hpp"
#include "cute/atom/copy_traits_sm90_tma.hpp"
#include "cute/atom/mma_atom.hpp"
#include "cute/algorithm/gemm.hpp"
#include "cute/tensor.hpp"

#include "scalemm/sm90/nvfp4_numerics.cuh"

namespace scalemm::sm90 {

// Routes cutlass::gemm::kernel::GemmUniversal to CUTLASS's warp-specialized persistent kernels
// (cooperative or ping-pong), which call the mainloop below.
template <int Stages_, class ClusterShape_, class KernelSchedule_>
struct Nvfp4MainloopPolicy {
  static constexpr int Stages = Stages_;
  using ClusterShape = ClusterShape_;
  using ArchTag = cutlass::arch::Sm90;
  using Schedule = KernelSchedule_;
};

constexpr int kScaleAtomRows = 128;   // rows of one 128x4 scale atom
constexpr int kScaleAtomBytes = 512;  // 128 rows x 4 scales (64 elements of K)

constexpr int kChunkK = 64;           // elements of K per prepared chunk / per scale atom
constexpr int kDecodedTilesB = 3;     // bf16 tiles the W4A4 consumers decode the activations into

// ElementB of the W4A4 kernels: the activations are NVFP4 (packed codes and 128x4 e4m3 scale atoms)
// and the mainloop decodes them into bf16 tiles itself; the MMA's B type is then bf16.
struct Nvfp4Activations {};
template <class ElementB>
constexpr bool kNvfp4B = cute::is_same_v<ElementB, Nvfp4Activations>;
template <class ElementB>
using MmaElementB = cute::conditional_t<kNvfp4B<ElementB>, cutlass::bfloat16_t, ElementB>;

// Shared-memory bytes of one pipeline stage (the packed FP4 weight tile and its scale atom, plus
// the activation tile: bf16/fp16, or packed codes and their scale atoms) and of the W4A4 kernels'
// decoded activation tiles, which sit outside the pipeline.
template <class TileShape, class ElementB>
constexpr int nvfp4_stage_bytes() {
  constexpr int n = cute::size<1>(TileShape{}), k = cute::size<2>(TileShape{});
  constexpr int b = kNvfp4B<ElementB> ? n * k / 2 + n / kScaleAtomRows * kScaleAtomBytes : n * k * int(sizeof(ElementB));
  return cute::size<0>(TileShape{}) * k / 2 + kScaleAtomBytes + b;
}
template <class TileShape, class ElementB>
constexpr int nvfp4_decoded_b_bytes() {
  return kNvfp4B<ElementB> ? kDecodedTilesB * cute::size<1>(TileShape{}) * cute::size<2>(TileShape{}) * 2 : 0;
}

// Pipeline stages of the NVFP4 mainloops: as many as shared memory holds beside `reserved_bytes`
// (the epilogue's storage and the kernel's own) and the decoded activation tiles, capped at 12,
// each stage with 32 bytes of barriers.
template <class TileShape, class ElementB>
constexpr int nvfp4_stages(int reserved_bytes) {
  int const stages = (cutlass::gemm::collective::detail::sm90_smem_capacity_bytes - reserved_bytes -
                      nvfp4_decoded_b_bytes<TileShape, ElementB>()) / (nvfp4_stage_bytes<TileShape, ElementB>() + 32);
  return stages > 12 ? 12 : stages;
}

// What the dense and grouped mainloops share: tiles, shared memory, the producer's per-k-tile
// copies and the whole consumer side.
template <class TileShape_, class ClusterShape_, class KernelSchedule_, class ElementB_, int Stages_,
          bool TokensOnA_ = false>
struct Nvfp4MainloopBase {
  static constexpr bool kFp4B = kNvfp4B<ElementB_>;  // W4A4: the activations are decoded here too
  static constexpr bool kTokensOnA = TokensOnA_;     // A: NVFP4 activations in their own code order (tokens on A)
  static_assert(!(kTokensOnA && kFp4B), "tokens on A: B is the weights' bf16 decode");
  using TileShape = TileShape_;
  using DispatchPolicy = Nvfp4MainloopPolicy<Stages_, ClusterShape_, KernelSchedule_>;
  using ClusterShape = ClusterShape_;
  using ArchTag = cutlass::arch::Sm90;
  using ElementA = uint8_t;                                   // prepared, two codes per byte
  using StrideA = cute::Stride<int64_t, cute::_1, int64_t>;  // in bytes
  using ElementB = MmaElementB<ElementB_>;                   // the MMA's B: bf16 or fp16
  using StrideB = cute::Stride<int64_t, cute::_1, int64_t>;
  using ElementAccumulator = float;

  static constexpr int kTileM = cute::size<0>(TileShape{});
  static constexpr int kTileN = cute::size<1>(TileShape{});
  static constexpr int kTileK = cute::size<2>(TileShape{});
  static constexpr int kTileKBytes = kTileK / 2;
  static constexpr int kStages = Stages_;
  static_assert(kTileM == kScaleAtomRows, "one scale atom per tile: TileM must be 128");
  static_assert(kTileK == kChunkK, "one scale atom per k-tile: TileK must be 64");
  static constexpr int kBScaleAtoms = kFp4B ? kTileN / kScaleAtomRows : 0;  // W4A4: B scale atoms per k-tile

  static constexpr bool kCooperative =
      cute::is_base_of_v<cutlass::gemm::KernelTmaWarpSpecializedCooperative, KernelSchedule_> ||
      cute::is_base_of_v<cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative, KernelSchedule_>;
  using AtomLayoutMNK = cute::conditional_t<kCooperative, cute::Layout<cute::Shape<cute::_2, cute::_1, cute::_1>>,
                                            cute::Layout<cute::Shape<cute::_1, cute::_1, cute::_1>>>;
  using TiledMma = decltype(cute::make_tiled_mma(
      cute::GMMA::rs_op_selector<ElementB, ElementB, float, TileShape, cute::GMMA::Major::K, cute::GMMA::Major::K>(),
      AtomLayoutMNK{}));
  static constexpr int kMmaThreads = cute::size(TiledMma{});
  static_assert(!kFp4B || (kCooperative && kTileN % kScaleAtomRows == 0),
                "NVFP4 activations: cooperative kernels with token tiles of whole 128-row scale atoms");

  using GmemTiledCopyA = decltype(cutlass::gemm::collective::detail::sm90_cluster_shape_to_tma_atom(
      cute::shape<1>(ClusterShape{})));
  using GmemTiledCopyB = decltype(cutlass::gemm::collective::detail::sm90_cluster_shape_to_tma_atom(
      cute::shape<0>(ClusterShape{})));

  // A: plain row-major bytes (the consumers' reads are conflict-free without a swizzle: a warp
  // reads 8 consecutive 32-byte rows). B: the canonical K-major 128B-swizzled wgmma layout.
  using SmemLayoutA = cute::Layout<cute::Shape<cute::Int<kTileM>, cute::Int<kTileKBytes>, cute::Int<kStages>>,
                                   cute::Stride<cute::Int<kTileKBytes>, cute::_1, cute::Int<kTileM * kTileKBytes>>>;
  using SmemLayoutAtomB = decltype(cutlass::gemm::collective::detail::ss_smem_selector<
                                   cute::GMMA::Major::K, ElementB, cute::Int<kTileN>, cute::Int<kTileK>>());
  // The MMA's B tiles: the pipeline stages, or (W4A4) the decoded tiles.
  static constexpr int kTilesB = kFp4B ? kDecodedTilesB : kStages;
  using SmemLayoutB = decltype(cute::tile_to_shape(
      SmemLayoutAtomB{}, cute::make_shape(cute::Int<kTileN>{}, cute::Int<kTileK>{}, cute::Int<kTilesB>{}),
      cute::Step<cute::_1, cute::_2, cute::_3>{}));
  // W4A4: the token tile's packed codes, plain row-major like A (TileN rows of 32 bytes).
  using SmemLayoutBCodes = cute::Layout<cute::Shape<cute::Int<kTileN>, cute::Int<kTileKBytes>, cute::Int<kStages>>,
                                        cute::Stride<cute::Int<kTileKBytes>, cute::_1, cute::Int<kTileN * kTileKBytes>>>;

  using MainloopPipeline = cutlass::PipelineTmaAsync<kStages>;
  using PipelineState = cutlass::PipelineState<kStages>;
  using PipelineParams = typename MainloopPipeline::Params;
  static constexpr int NumProducerThreadEvents = 1;

  static constexpr uint32_t kBytesA = kTileM * kTileKBytes;
  static constexpr uint32_t kBytesBCodes = kTileN * kTileKBytes;
  static constexpr uint32_t kBytesBScales = kBScaleAtoms * kScaleAtomBytes;
  static constexpr uint32_t kBytesB = kFp4B ? kBytesBCodes + kBytesBScales : kTileN * kTileK * sizeof(ElementB);
  static constexpr uint32_t TmaTransactionBytes = kBytesA + kBytesB + kScaleAtomBytes;
  static constexpr int kStageBytes = int(TmaTransactionBytes);
  static_assert(kStageBytes == nvfp4_stage_bytes<TileShape, ElementB_>(), "stage bytes disagree with nvfp4_stages");

  struct NoStorage {};
  struct Fp4BStorage {
    cute::array_aligned<uint8_t, cute::cosize_v<SmemLayoutBCodes>> codes;
    cute::array_aligned<uint8_t, kBytesBScales * kStages> scales;
  };
  struct SharedStorage {
    struct TensorStorage : cute::aligned_struct<128, cute::_0> {
      cute::array_aligned<ElementB, cute::cosize_v<SmemLayoutB>> smem_B;
      cute::array_aligned<uint8_t, cute::cosize_v<SmemLayoutA>> smem_A;
      cute::array_aligned<uint8_t, kScaleAtomBytes * kStages> smem_S;
      cute::conditional_t<kFp4B, Fp4BStorage, NoStorage> fp4_b;
    } tensors;
    using PipelineStorage = typename MainloopPipeline::SharedStorage;
    PipelineStorage pipeline;
  };
  using TensorStorage = typename SharedStorage::TensorStorage;
  using PipelineStorage = typename SharedStorage::PipelineStorage;

  // TMA copy types: A as bytes (N_w, K_pad / 2, L), B as 16-bit (rows, K, L) or (W4A4) as bytes
  // (rows, K / 2, L), both bytewise ones in tiles of 32 bytes along K.
  using StrideTma = cute::Stride<int64_t, cute::_1, int64_t>;
  using TmaElementB = cute::conditional_t<kFp4B, uint8_t, cute::uint_bit_t<cute::sizeof_bits_v<ElementB>>>;
  using TmaTileA = cute::Shape<cute::Int<kTileM>, cute::Int<kTileN>, cute::Int<kTileKBytes>>;
  using TmaTileB = cute::conditional_t<kFp4B, TmaTileA, TileShape>;
  using SmemLayoutBLoad = cute::conditional_t<kFp4B, SmemLayoutBCodes, SmemLayoutB>;  // what TMA writes
  using TMA_A = decltype(cute::make_tma_copy_A_sm90(
      GmemTiledCopyA{},
      cute::make_tensor(static_cast<uint8_t const*>(nullptr), cute::repeat_like(StrideTma{}, int32_t(0)), StrideTma{}),
      SmemLayoutA{}(cute::_, cute::_, cute::Int<0>{}), TmaTileA{}, ClusterShape{}));
  using TMA_B = decltype(cute::make_tma_copy_B_sm90(
      GmemTiledCopyB{},
      cute::make_tensor(static_cast<TmaElementB const*>(nullptr), cute::repeat_like(StrideTma{}, int32_t(0)), StrideTma{}),
      SmemLayoutBLoad{}(cute::_, cute::_, cute::Int<0>{}), TmaTileB{}, ClusterShape{}));

  // The operands every launch describes the same way (dense or grouped).
  struct Operands {
    uint8_t const* weight = nullptr;        // prepared weights [L][N_w][K_pad / 2]
    void const* x = nullptr;                // activations [rows][K] (L batches of rows_per_batch), or
                                            // (W4A4) their codes uint8 [rows][K / 2]
    uint8_t const* x_scales = nullptr;      // W4A4: the activations' e4m3 128x4 swizzled scales, row pitch
                                            // scale_atoms_per_row_tile * 4 bytes (the weights' K, so the same)
    uint8_t const* scales = nullptr;        // e4m3 128x4 swizzled, batch l at l * scale_batch_bytes
    int64_t n = 0, k = 0;
    int64_t weight_batches = 1;             // L of A and of the scales (experts when grouped)
    int64_t x_rows = 0, x_batches = 1;      // B is x_batches x [x_rows, k]
    int64_t k_pad = 0;                      // K rounded up to 64 (the prepared row length x 2)
    int64_t scale_atoms_per_row_tile = 0;   // Cp / 4
    int64_t scale_batch_bytes = 0;          // Rp * Cp
  };

  struct CommonParams {
    TMA_A tma_load_a;
    TMA_B tma_load_b;
    uint8_t const* scales;
    uint8_t const* x_scales;
    int64_t scale_atoms_per_row_tile;
    int64_t scale_batch_bytes;
    int x_rows;
    uint32_t tma_transaction_bytes;
  };

  static CommonParams make_common_params(Operands const& o) {
    int64_t const row_bytes = kTokensOnA ? o.k / 2 : o.k_pad / 2;  // A's row pitch
    int64_t const x_row = kFp4B ? o.k / 2 : o.k;  // elements of TmaElementB per activation row
    auto tensor_a = cute::make_tensor(o.weight, cute::make_layout(
        cute::make_shape(int(o.n), int(row_bytes), int(o.weight_batches)), StrideTma{row_bytes, cute::_1{}, o.n * row_bytes}));
    auto tensor_b = cute::make_tensor(static_cast<TmaElementB const*>(o.x), cute::make_layout(
        cute::make_shape(int(o.x_rows), int(x_row), int(o.x_batches)), StrideTma{x_row, cute::_1{}, o.x_rows * x_row}));
    auto tma_a = cute::make_tma_copy_A_sm90(GmemTiledCopyA{}, tensor_a, SmemLayoutA{}(cute::_, cute::_, cute::Int<0>{}),
                                            TmaTileA{}, ClusterShape{});
    auto tma_b = cute::make_tma_copy_B_sm90(GmemTiledCopyB{}, tensor_b, SmemLayoutBLoad{}(cute::_, cute::_, cute::Int<0>{}),
                                            TmaTileB{}, ClusterShape{});
    return {tma_a, tma_b, o.scales, o.x_scales, o.scale_atoms_per_row_tile, o.scale_batch_bytes, int(o.x_rows),
            TmaTransactionBytes};
  }

  static bool operands_ok(Operands const& o) {
    bool ok = o.weight != nullptr && o.x != nullptr && o.scales != nullptr;
    ok &= o.k_pad % kChunkK == 0 && o.k_pad >= o.k && o.k_pad < o.k + kChunkK;
    ok &= o.scale_atoms_per_row_tile * kChunkK >= o.k_pad;
    ok &= reinterpret_cast<uintptr_t>(o.weight) % 16 == 0 && reinterpret_cast<uintptr_t>(o.x) % 16 == 0;
    ok &= reinterpret_cast<uintptr_t>(o.scales) % 16 == 0;
    if constexpr (kTokensOnA) ok &= o.k % 32 == 0;  // TMA row pitch of A's codes
    if constexpr (kFp4B) {
      ok &= o.x_scales != nullptr && reinterpret_cast<uintptr_t>(o.x_scales) % 16 == 0;
      ok &= o.k % 32 == 0 && o.x_batches == 1;  // TMA row pitch of the codes; one batch of activation scales
    } else {
      ok &= (o.k * int64_t(sizeof(ElementB))) % 16 == 0;  // TMA row pitch of B
    }
    return ok;
  }

  CUTLASS_DEVICE static void prefetch_tma_descriptors(CommonParams const& params) {
    cute::prefetch_tma_descriptor(params.tma_load_a.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_load_b.get_tma_descriptor());
  }

  // (BLK_M, BLK_K, m, k, l) and (BLK_N, BLK_K, n, k, l) TMA coordinate tensors of the full
  // operands; A is counted in bytes along K, so it has as many k-tiles as B.
  CUTLASS_DEVICE static auto full_tensors(CommonParams const& params, int M, int rows, int K, int L) {
    int const kb = int((K + kChunkK - 1) / kChunkK) * kTileKBytes;
    return cute::make_tuple(params.tma_load_a.get_tma_tensor(cute::make_shape(M, kb, L)),
                            params.tma_load_b.get_tma_tensor(cute::make_shape(rows, kFp4B ? kb : K, L)));
  }

  template <class TensorMKL, class TensorNKL>
  CUTLASS_DEVICE static auto tile_tensors(TensorMKL const& mA, TensorNKL const& mB) {
    using X = cute::Underscore;
    auto gA = cute::local_tile(mA, TmaTileA{}, cute::make_coord(cute::_, cute::_, cute::_), cute::Step<cute::_1, X, cute::_1>{});
    auto gB = cute::local_tile(mB, TmaTileB{}, cute::make_coord(cute::_, cute::_, cute::_), cute::Step<X, cute::_1, cute::_1>{});
    return cute::make_tuple(gA, gB);
  }

  // W4A4: where the scale atoms of token tile n start (at k-tile 0), for activation scale rows
  // beginning at 128-row atom `first_atom` (0 dense; the group's sf_offsets / 128 grouped) with
  // `rows` rows in all. Atoms past the last one that holds rows repeat it: the rows they would
  // cover are past the end (the epilogue drops them), and nothing is read outside the scales.
  struct BScaleRows { uint8_t const* atom[kBScaleAtoms > 0 ? kBScaleAtoms : 1]; };
  CUTLASS_DEVICE static BScaleRows b_scale_rows(CommonParams const& params, int n, int64_t first_atom, int rows) {
    BScaleRows r{};
    if constexpr (kFp4B) {
      int const last = (rows + kScaleAtomRows - 1) / kScaleAtomRows - 1;
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kBScaleAtoms; ++j) {
        int const atom = n * kBScaleAtoms + j;
        r.atom[j] = params.x_scales +
                    (first_atom + (atom < last ? atom : last)) * params.scale_atoms_per_row_tile * kScaleAtomBytes;
      }
    }
    return r;
  }

  // Producer: one elected thread issues, per k-tile, the A and B TMA loads (gA: (BLK_M, BLK_K, k),
  // gB: (BLK_N, BLK_K, k)) and the scale atoms' bulk copies, all completing on the stage's barrier.
  template <class TensorA, class TensorB, class KTileIterator>
  CUTLASS_DEVICE void load_tiles(CommonParams const& params, MainloopPipeline pipeline, PipelineState smem_pipe_write,
                                 TensorA const& gA, TensorB const& gB, uint8_t const* scale_row_tile,
                                 BScaleRows const& b_scales, KTileIterator k_tile_iter, int k_tile_count,
                                 uint32_t block_rank_in_cluster, TensorStorage& shared_tensors) {
    using namespace cute;
    if (!cute::elect_one_sync()) return;
    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});
    Tensor sB = [&] {
      if constexpr (kFp4B) return make_tensor(make_smem_ptr(shared_tensors.fp4_b.codes.data()), SmemLayoutBCodes{});
      else return make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});
    }();
    constexpr uint32_t cluster_shape_x = get<0>(ClusterShape{});
    uint2 cluster_local_block_id = {block_rank_in_cluster % cluster_shape_x, block_rank_in_cluster / cluster_shape_x};
    auto block_tma_a = params.tma_load_a.get_slice(cluster_local_block_id.y);
    auto block_tma_b = params.tma_load_b.get_slice(cluster_local_block_id.x);
    Tensor tAgA = block_tma_a.partition_S(gA);
    Tensor tAsA = block_tma_a.partition_D(sA);
    Tensor tBgB = block_tma_b.partition_S(gB);
    Tensor tBsB = block_tma_b.partition_D(sB);

    uint16_t mcast_mask_a = 0, mcast_mask_b = 0;
    auto block_layout = Layout<ClusterShape>{};  // (m, n) -> block id
    if constexpr (cute::is_same_v<GmemTiledCopyA, SM90_TMA_LOAD_MULTICAST>) {
      for (int n = 0; n < size<1>(block_layout); ++n)
        mcast_mask_a |= uint16_t(1) << block_layout(cluster_local_block_id.x, n, Int<0>{});
    }
    if constexpr (cute::is_same_v<GmemTiledCopyB, SM90_TMA_LOAD_MULTICAST>) {
      for (int m = 0; m < size<0>(block_layout); ++m)
        mcast_mask_b |= uint16_t(1) << block_layout(m, cluster_local_block_id.y, Int<0>{});
    }
    CUTLASS_PRAGMA_NO_UNROLL
    for (; k_tile_count > 0; --k_tile_count) {
      pipeline.producer_acquire(smem_pipe_write);
      auto* tma_barrier = pipeline.producer_get_barrier(smem_pipe_write);
      int const stage = smem_pipe_write.index();
      int const k_tile = *k_tile_iter;
      copy(params.tma_load_a.with(*tma_barrier, mcast_mask_a), tAgA(_, _, _, k_tile), tAsA(_, _, _, stage));
      copy(params.tma_load_b.with(*tma_barrier, mcast_mask_b), tBgB(_, _, _, k_tile), tBsB(_, _, _, stage));
      SM90_BULK_COPY_G2S::copy(scale_row_tile + int64_t(k_tile) * kScaleAtomBytes, tma_barrier,
                               shared_tensors.smem_S.data() + stage * kScaleAtomBytes, kScaleAtomBytes);
      if constexpr (kFp4B) {
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < kBScaleAtoms; ++j)
          SM90_BULK_COPY_G2S::copy(b_scales.atom[j] + int64_t(k_tile) * kScaleAtomBytes, tma_barrier,
                                   shared_tensors.fp4_b.scales.data() + stage * kBytesBScales + j * kScaleAtomBytes,
                                   kScaleAtomBytes);
      }
      ++k_tile_iter;
      ++smem_pipe_write;
    }
  }

  // The scale atoms of the 128 weight rows of m-tile m in batch l, one per k-tile, 512 bytes apart.
  CUTLASS_DEVICE static uint8_t const* scale_row_tile(CommonParams const& params, int m, int l) {
    return params.scales + int64_t(l) * params.scale_batch_bytes +
           int64_t(m) * params.scale_atoms_per_row_tile * kScaleAtomBytes;
  }

  CUTLASS_DEVICE void load_tail(MainloopPipeline pipeline, PipelineState smem_pipe_write) {
    if (cute::elect_one_sync()) pipeline.producer_tail(smem_pipe_write);
  }

  // W4A4: decodes work item `item` of a token tile (row item / 2, K half item % 2: 32 codes, two
  // blocks) from the packed stage into decoded tile `sBt` (TileN x 64 bf16, wgmma layout). With
  // this numbering 8 consecutive threads read 128 consecutive bytes and write 8 distinct 16-byte
  // columns of the 128B swizzle: no bank conflicts either way.
  template <class TensorBt>
  CUTLASS_DEVICE static void decode_b_item(TensorStorage const& shared_tensors, int stage, TensorBt&& sBt, int item) {
    int const row = item >> 1, half = item & 1;
    uint4 const q = *reinterpret_cast<uint4 const*>(shared_tensors.fp4_b.codes.data() + stage * kBytesBCodes +
                                                    row * kTileKBytes + half * 16);
    uint32_t const s4 = *reinterpret_cast<uint32_t const*>(
        shared_tensors.fp4_b.scales.data() + stage * kBytesBScales + (row / kScaleAtomRows) * kScaleAtomBytes +
        scale_atom_row_offset(row % kScaleAtomRows));
    uint32_t pairs[4];
    e4m3x4_to_scale_pairs<ElementB>(s4 >> (16 * half), pairs);  // pairs 0, 1: this half's two blocks
    uint32_t const words[4] = {q.x, q.y, q.z, q.w};
    CUTLASS_PRAGMA_UNROLL
    for (int c = 0; c < 4; ++c) {  // word c: elements 8c .. 8c + 7 of the half, byte b = (2b, 2b + 1)
      uint32_t const lo = words[c] & 0x0F0F0F0Fu, hi = (words[c] >> 4) & 0x0F0F0F0Fu;
      uint32_t o[4];
      CUTLASS_PRAGMA_UNROLL
      for (int b = 0; b < 4; ++b) {  // byte b of lo to bits 3:0, of hi to bits 19:16, zeros elsewhere
        uint32_t const sel = uint32_t(b) | uint32_t(8 | b) << 4 | uint32_t(4 + b) << 8 | uint32_t(8 | b) << 12;
        o[b] = mul2<ElementB>(e2m1x2_tiny_clean<ElementB>(prmt(lo, hi, sel)), pairs[c / 2]);
      }
      *reinterpret_cast<uint4*>(&sBt(row, 32 * half + 8 * c)) = make_uint4(o[0], o[1], o[2], o[3]);
    }
  }

  // Consumer: decode A for k-block kb + 1 while the wgmma of k-block kb runs; W4A4 also decodes the
  // next k-tile's activations while the last wgmmas of this one run.
  template <class FrgTensorC, class AnyParams>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read, FrgTensorC& accum,
                          int k_tile_count, int thread_idx, TensorStorage& shared_tensors, AnyParams const&) {
    using namespace cute;
    static_assert(is_rmem<FrgTensorC>::value, "C tensor must be rmem resident.");
    constexpr int MmaWarpGroups = size(TiledMma{}) / cutlass::NumThreadsPerWarpGroup;
    Layout warp_group_thread_layout = make_layout(Int<MmaWarpGroups>{}, Int<cutlass::NumThreadsPerWarpGroup>{});
    int const warp_group_idx = __shfl_sync(0xFFFFFFFF, thread_idx / cutlass::NumThreadsPerWarpGroup, 0);

    TiledMma tiled_mma;
    auto thr_mma = tiled_mma.get_thread_slice(thread_idx);
    auto wg_mma = tiled_mma.get_slice(warp_group_thread_layout(warp_group_idx));
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});
    Tensor tCrB = wg_mma.make_fragment_B(wg_mma.partition_B(sB));                 // (MMA, MMA_N, MMA_K, PIPE)
    // The register A fragment, and which (row, k) each of its values is.
    auto a_shape = make_shape(Int<kTileM>{}, Int<kTileK>{});
    Tensor tCrA = thr_mma.partition_fragment_A(make_tensor(make_smem_ptr(static_cast<ElementB*>(nullptr)), a_shape));
    Tensor tCcA = thr_mma.partition_A(make_identity_tensor(a_shape));              // (MMA, MMA_M, MMA_K)
    constexpr int kMmaM = size<1>(tCrA);
    constexpr int kBlocks = size<2>(tCrA);
    static_assert(size<0>(tCrA) == 8 && kBlocks == kTileK / 16, "unexpected bf16 RS fragment");
    CUTE_STATIC_ASSERT_V(size<1>(tCrB) == size<2>(accum));

    // Value 0 of each m-subtile is (row g, k 2t); value 2 is row g + 8 (see the fragment
    // layout of SM90 RS wgmma: registers 0..3 = (g, 2t), (g + 8, 2t), (g, 2t + 8), (g + 8, 2t + 8)).
    int a_off[kMmaM][2], s_off[kMmaM][2];
    int const t = get<1>(tCcA(0, 0, 0)) / 2;
    CUTLASS_PRAGMA_UNROLL
    for (int m = 0; m < kMmaM; ++m) {
      CUTLASS_PRAGMA_UNROLL
      for (int h = 0; h < 2; ++h) {
        int const row = get<0>(tCcA(0, m, 0)) + 8 * h;
        a_off[m][h] = row * kTileKBytes + (kTokensOnA ? 0 : 8 * t);
        s_off[m][h] = scale_atom_row_offset(row);
      }
    }

    // One k-tile's words: codes (2 words per row) and 4 scale pairs per row, in two register sets: the
    // k-loop below is unrolled by two and alternates them (set S for this k-tile, 1 - S for the next),
    // so no copies are made between k-tiles. The next k-tile's words are loaded right after this
    // k-tile's first wgmma is issued and its scales converted after the second, so the shared-memory
    // latency hides behind this k-tile's work.
    // kTokensOnA: per row the gathered words' even codes (bits 3:0 of each byte) and odd codes, k-blocks 0-1 and 2-3.
    using Codes = cute::conditional_t<kTokensOnA, uint4, uint2>;
    Codes codes[2][kMmaM][2];
    uint32_t pairs[2][kMmaM][2][4];
    uint32_t scale_words[kMmaM][2];
    // kTokensOnA: byte t of two words into bytes 0 and 1 (the thread's bytes t + 4j of a row chunk, see the top).
    uint32_t const gather_sel = uint32_t(t) | uint32_t(4 + t) << 4;
    auto gather = [&](uint4 q) {  // bytes t of q.x, q.y, q.z, q.w
      return __byte_perm(__byte_perm(q.x, q.y, gather_sel), __byte_perm(q.z, q.w, gather_sel), 0x5410);
    };
    auto load_stage = [&](int stage, auto set) {
      uint8_t const* sA = shared_tensors.smem_A.data() + stage * kBytesA;
      uint8_t const* sS = shared_tensors.smem_S.data() + stage * kScaleAtomBytes;
      CUTLASS_PRAGMA_UNROLL
      for (int m = 0; m < kMmaM; ++m) {
        CUTLASS_PRAGMA_UNROLL
        for (int h = 0; h < 2; ++h) {
          if constexpr (kTokensOnA) {
            uint32_t const g0 = gather(*reinterpret_cast<uint4 const*>(sA + a_off[m][h]));        // k-blocks 0, 1
            uint32_t const g1 = gather(*reinterpret_cast<uint4 const*>(sA + a_off[m][h] + 16));   // k-blocks 2, 3
            codes[set][m][h] = make_uint4(g0 & 0x0F0F0F0Fu, (g0 >> 4) & 0x0F0F0F0Fu, g1 & 0x0F0F0F0Fu,
                                          (g1 >> 4) & 0x0F0F0F0Fu);
          } else {
            codes[set][m][h] = *reinterpret_cast<uint2 const*>(sA + a_off[m][h]);
          }
          scale_words[m][h] = *reinterpret_cast<uint32_t const*>(sS + s_off[m][h]);
        }
      }
    };
    auto convert_scales = [&](auto set) {
      CUTLASS_PRAGMA_UNROLL
      for (int m = 0; m < kMmaM; ++m) {
        CUTLASS_PRAGMA_UNROLL
        for (int h = 0; h < 2; ++h) e4m3x4_to_scale_pairs<ElementB>(scale_words[m][h], pairs[set][m][h]);
      }
    };
    auto decode = [&](int kb, auto set) {
      CUTLASS_PRAGMA_UNROLL
      for (int m = 0; m < kMmaM; ++m) {
        uint32_t* frag = reinterpret_cast<uint32_t*>(raw_pointer_cast(tCrA(_, m, kb).data()));
        CUTLASS_PRAGMA_UNROLL
        for (int h = 0; h < 2; ++h) {
          if constexpr (kTokensOnA) {
            // Gathered byte 2 (kb % 2) holds k 2t, 2t + 1 of this k-block, byte 2 (kb % 2) + 1 k 2t + 8, 2t + 9:
            // the even code to bits 3:0 and the odd one to bits 19:16, zeros elsewhere (sign-replicated 0x00).
            uint32_t const lo = kb < 2 ? codes[set][m][h].x : codes[set][m][h].z;
            uint32_t const hi = kb < 2 ? codes[set][m][h].y : codes[set][m][h].w;
            uint32_t const b0 = 2 * (kb % 2), b1 = b0 + 1;  // kb is a constant of the unrolled k-tile
            uint32_t const sel0 = b0 | (8 | b0) << 4 | (4 + b0) << 8 | (8 | b0) << 12;
            uint32_t const sel1 = b1 | (8 | b1) << 4 | (4 + b1) << 8 | (8 | b1) << 12;
            frag[h] = mul2<ElementB>(e2m1x2_tiny_clean<ElementB>(prmt(lo, hi, sel0)), pairs[set][m][h][kb]);
            frag[h + 2] = mul2<ElementB>(e2m1x2_tiny_clean<ElementB>(prmt(lo, hi, sel1)), pairs[set][m][h][kb]);
          } else {
            uint32_t const w = (kb < 2 ? codes[set][m][h].x : codes[set][m][h].y) >> (8 * (kb % 2));
            frag[h] = mul2<ElementB>(e2m1x2_tiny<ElementB>(w), pairs[set][m][h][kb]);           // k 2t, 2t + 1
            frag[h + 2] = mul2<ElementB>(e2m1x2_tiny<ElementB>(w >> 4), pairs[set][m][h][kb]);  // k 2t + 8, 2t + 9
          }
        }
      }
    };

    // W4A4: the activation work items of this thread, and the named barrier of both warpgroups.
    constexpr int kItems = kFp4B ? kTileN * 2 / kMmaThreads : 0;
    auto decode_b = [&](int stage, int tile, int j) {
      if constexpr (kFp4B) decode_b_item(shared_tensors, stage, sB(_, _, tile), thread_idx + j * kMmaThreads);
    };
    auto publish_b = [&]() {  // every thread's decoded tile visible to every warpgroup's wgmmas
      if constexpr (kFp4B) {
        cutlass::arch::fence_view_async_shared();
        cutlass::arch::NamedBarrier::sync(kMmaThreads, 0);
      }
    };

    PipelineState smem_pipe_release = smem_pipe_read;
    if constexpr (kFp4B) {  // the previous tile's wgmmas (both warpgroups) are done with the decoded tiles
      cutlass::arch::NamedBarrier::sync(kMmaThreads, 0);
    }
    auto barrier_token = pipeline.consumer_try_wait(smem_pipe_read);
    pipeline.consumer_wait(smem_pipe_read, barrier_token);
    load_stage(smem_pipe_read.index(), Int<0>{});
    convert_scales(Int<0>{});
    if constexpr (kFp4B) {
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kItems; ++j) decode_b(smem_pipe_read.index(), 0, j);
      publish_b();
      pipeline.consumer_release(smem_pipe_release);  // decoded: the packed stage is free
      ++smem_pipe_release;
    }
    decode(0, Int<0>{});
    int tile_b = 0;  // W4A4: the decoded tile of this k-tile
    tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
    warpgroup_fence_operand(accum);
    bool first_tile = true;
    // One k-tile on register set `set` (its words loaded, its k-block 0 decoded); `remaining` counts it too.
    auto k_tile = [&](auto set, int remaining) {
      constexpr int kNext = 1 - decltype(set)::value;
      int const stage = smem_pipe_read.index();
      int const tile = kFp4B ? tile_b : stage;
      int const next_tile_b = tile_b + 1 < kDecodedTilesB ? tile_b + 1 : 0;
      ++smem_pipe_read;
      bool const has_next = remaining > 1;
      if (has_next) barrier_token = pipeline.consumer_try_wait(smem_pipe_read);
      warpgroup_fence_operand(accum);
      CUTLASS_PRAGMA_UNROLL
      for (int kb = 0; kb < kBlocks; ++kb) {
        warpgroup_arrive();
        cute::gemm(tiled_mma, tCrA(_, _, kb), tCrB(_, _, kb, tile), accum);
        tiled_mma.accumulate_ = GMMA::ScaleOut::One;
        warpgroup_commit_batch();
        // At most kBlocks - 1 wgmmas in flight: the one that last read fragment slot kb + 1
        // (issued kBlocks - 1 ago) is done, so the slot may be rewritten.
        warpgroup_wait<kBlocks - 1>();
        if (kb == 0 && has_next) {
          pipeline.consumer_wait(smem_pipe_read, barrier_token);
          load_stage(smem_pipe_read.index(), Int<kNext>{});
        }
        if (kb == 1 && has_next) convert_scales(Int<kNext>{});
        if (kb == kBlocks - 1) {
          if constexpr (kFp4B) {
            if (has_next) {
              // Decode the next k-tile's activations while this k-tile's last wgmmas run (decoding
              // between earlier ones made ptxas serialize the wgmmas, C7513), publish them, free
              // their packed stage. Tile next_tile_b was last read by the wgmmas of two k-tiles
              // back, which both warpgroups completed before the previous publish_b.
              CUTLASS_PRAGMA_UNROLL
              for (int j = 0; j < kItems; ++j) decode_b(smem_pipe_read.index(), next_tile_b, j);
              publish_b();
              pipeline.consumer_release(smem_pipe_release);
              ++smem_pipe_release;
            }
          } else if (!first_tile) {  // every wgmma of the previous k-tile is done: free its stage
            pipeline.consumer_release(smem_pipe_release);
            ++smem_pipe_release;
          }
          if (has_next) decode(0, Int<kNext>{});
        } else {
          decode(kb + 1, set);
        }
      }
      warpgroup_fence_operand(accum);
      first_tile = false;
      tile_b = next_tile_b;
    };
    CUTLASS_PRAGMA_NO_UNROLL
    for (; k_tile_count > 1; k_tile_count -= 2) {
      k_tile(Int<0>{}, k_tile_count);
      k_tile(Int<1>{}, k_tile_count - 1);
    }
    if (k_tile_count == 1) k_tile(Int<0>{}, 1);
    warpgroup_wait<0>();
    constexpr float kUnscale = kFp4B ? kDecodeUnscale * kDecodeUnscale : kDecodeUnscale;  // both operands decoded
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(accum); ++i) accum(i) *= kUnscale;
    warpgroup_fence_operand(accum);
  }

  // Releases the last k-tile's stage (mma released every other one; W4A4 released them all).
  CUTLASS_DEVICE void mma_tail(MainloopPipeline pipeline, PipelineState smem_pipe_release, int k_tile_count) {
    cute::warpgroup_wait<0>();
    if constexpr (!kFp4B) {
      smem_pipe_release.advance(k_tile_count - 1);
      pipeline.consumer_release(smem_pipe_release);
    }
  }
};


// Dense GEMM (GemmUniversal with a rank-4 problem shape; L batches are not used by scalemm).
template <class TileShape, class ClusterShape, class KernelSchedule, class ElementB, int Stages, bool TokensOnA = false>
struct Nvfp4Mainloop : Nvfp4MainloopBase<TileShape, ClusterShape, KernelSchedule, ElementB, Stages, TokensOnA> {
  using Base = Nvfp4MainloopBase<TileShape, ClusterShape, KernelSchedule, ElementB, Stages, TokensOnA>;
  using typename Base::MainloopPipeline;
  using typename Base::PipelineState;
  using typename Base::TensorStorage;
  using StrideA = typename Base::StrideTma;
  using StrideB = typename Base::StrideTma;
  using Arguments = typename Base::Operands;
  using Params = typename Base::CommonParams;

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return Base::make_common_params(args);
  }

  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const& args) {
    auto [M, N, K, L] = cute::append<4>(problem_shape, 1);
    return Base::operands_ok(args) && M == args.n && N == args.x_rows && K == args.k && L == args.weight_batches &&
           L == args.x_batches;
  }

  template <class ProblemShape_MNKL>
  CUTLASS_DEVICE auto load_init(ProblemShape_MNKL const& problem_shape_MNKL, Params const& params) const {
    auto [M, N, K, L] = problem_shape_MNKL;
    auto [mA, mB] = Base::full_tensors(params, M, N, K, L);
    return Base::tile_tensors(mA, mB);
  }

  template <class TensorA, class TensorB, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load(Params const& params, MainloopPipeline pipeline, PipelineState smem_pipe_write,
                           cute::tuple<TensorA, TensorB> const& load_inputs, BlockCoord const& blk_coord,
                           KTileIterator k_tile_iter, int k_tile_count, int, uint32_t block_rank_in_cluster,
                           TensorStorage& shared_tensors) {
    auto [m, n, k, l] = blk_coord;
    Base::load_tiles(params, pipeline, smem_pipe_write, cute::get<0>(load_inputs)(cute::_, cute::_, m, cute::_, l),
                     cute::get<1>(load_inputs)(cute::_, cute::_, n, cute::_, l), Base::scale_row_tile(params, m, l),
                     Base::b_scale_rows(params, n, 0, params.x_rows), k_tile_iter, k_tile_count, block_rank_in_cluster,
                     shared_tensors);
  }
};

// Grouped (MoE) GEMM: CUTLASS's ptr-array grouped kernel with problem shapes on the device.
// Group g multiplies expert g's weights (batch g of A and of the scales) with the activation rows
// [row_start[g], row_start[g] + m_g) of one [T, K] tensor: the B tiles are read through one TMA
// descriptor at a row offset, so no per-group descriptor is ever rewritten. Rows a tile reads past
// its group are computed and dropped by the epilogue, whose per-group D extent is m_g.
template <class TileShape, class ClusterShape, class KernelSchedule, class ElementB, int Stages>
struct Nvfp4GroupedMainloop : Nvfp4MainloopBase<TileShape, ClusterShape, KernelSchedule, ElementB, Stages> {
  using Base = Nvfp4MainloopBase<TileShape, ClusterShape, KernelSchedule, ElementB, Stages>;
  using typename Base::MainloopPipeline;
  using typename Base::PipelineState;
  using typename Base::TensorStorage;
  // Pointer stride types tell CUTLASS's ptr-array kernel that this is a grouped GEMM.
  using InternalStrideA = typename Base::StrideTma;
  using InternalStrideB = typename Base::StrideTma;
  using StrideA = InternalStrideA*;
  using StrideB = InternalStrideB*;
  struct TensorMapStorage {};

  struct Arguments {
    typename Base::Operands operands;  // x_rows = T (all tokens), weight_batches = number of experts
    int const* row_start = nullptr;    // [G] first activation row of each group (device)
    int const* x_sf_offsets = nullptr;  // W4A4: [G] the activation scale row of each group's first row (device)
  };
  struct Params {
    typename Base::CommonParams common;
    int const* row_start;
    int const* x_sf_offsets;
    int x_rows;
    uint32_t tma_transaction_bytes;
  };

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return {Base::make_common_params(args.operands), args.row_start, args.x_sf_offsets, int(args.operands.x_rows),
            Base::TmaTransactionBytes};
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&, int) { return 0; }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }
  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const& args) {
    return Base::operands_ok(args.operands) && args.row_start != nullptr &&
           (!Base::kFp4B || args.x_sf_offsets != nullptr);
  }
  CUTLASS_DEVICE static void prefetch_tma_descriptors(Params const& params) {
    Base::prefetch_tma_descriptors(params.common);
  }

  // (gA over all experts, gB tiled from row 0 (its shape is what the kernel reads), the untiled B
  // coordinates, the current group, its first row, and for W4A4 its first activation scale atom
  // and its rows).
  template <class ProblemShape_MNKL>
  CUTLASS_DEVICE auto load_init(ProblemShape_MNKL const& problem_shape_MNKL, Params const& params) const {
    auto [M, N, K, L] = problem_shape_MNKL;
    // Extents beyond the tile counts the kernel reads are never used (TMA bounds come from the
    // descriptors), so B's coordinates span all rows of x.
    auto [mA, mB] = Base::full_tensors(params.common, M, params.x_rows, K, 1);
    auto tiled = Base::tile_tensors(mA, mB);
    return cute::make_tuple(cute::get<0>(tiled), cute::get<1>(tiled), mB, int(0), int(0), int(0), int(0));
  }

  // problem_shape_MNKL is next_batch's: (N_w, the group's rows, K, 1).
  template <class InputTensors, class ProblemShape_MNKL>
  CUTLASS_DEVICE InputTensors tensors_perform_update(InputTensors const& in, Params const& params,
                                                     ProblemShape_MNKL problem_shape_MNKL, int32_t next_batch) {
    int const first_atom = Base::kFp4B ? __ldg(params.x_sf_offsets + next_batch) / kScaleAtomRows : 0;
    return cute::make_tuple(cute::get<0>(in), cute::get<1>(in), cute::get<2>(in), int(next_batch),
                            __ldg(params.row_start + next_batch), first_atom, int(cute::get<1>(problem_shape_MNKL)));
  }

  // No TMA descriptor changes between groups (see above): the tensormap protocol is a no-op.
  CUTLASS_DEVICE auto tensormaps_init(Params const&, TensorMapStorage&, int32_t, int32_t) { return cute::tuple<>{}; }
  template <class... TMs, class ProblemShape_MNKL>
  CUTLASS_DEVICE void tensormaps_perform_update(TensorMapStorage&, Params const&, cute::tuple<TMs...> const&,
                                                ProblemShape_MNKL, int32_t) {}
  template <class... TMs>
  CUTLASS_DEVICE void tensormaps_cp_fence_release(TensorMapStorage&, cute::tuple<TMs...> const&) {}
  template <class... TMs>
  CUTLASS_DEVICE void tensormaps_fence_acquire(cute::tuple<TMs...> const&) {}

  template <class... Ts, class... TMs, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load(Params const& params, MainloopPipeline pipeline, PipelineState smem_pipe_write,
                           cute::tuple<Ts...> const& load_inputs, cute::tuple<TMs...> const&, BlockCoord const& blk_coord,
                           KTileIterator k_tile_iter, int k_tile_count, int, uint32_t block_rank_in_cluster,
                           TensorStorage& shared_tensors) {
    using namespace cute;
    auto [m, n, k, l_mock] = blk_coord;
    int const group = get<3>(load_inputs);
    auto mB = domain_offset(make_coord(get<4>(load_inputs), 0, 0), get<2>(load_inputs));
    auto gB = get<1>(Base::tile_tensors(get<2>(load_inputs), mB));
    Base::load_tiles(params.common, pipeline, smem_pipe_write, get<0>(load_inputs)(_, _, m, _, group),
                     gB(_, _, n, _, 0), Base::scale_row_tile(params.common, m, group),
                     Base::b_scale_rows(params.common, n, get<5>(load_inputs), get<6>(load_inputs)), k_tile_iter,
                     k_tile_count, block_rank_in_cluster, shared_tensors);
  }
};

}  // namespace scalemm::sm90
