// scalemm: SM90 FP8 mainloop with full (fp32) accumulation that keeps wide tiles.
//
// Hopper's FP8 wgmma accumulates in reduced precision, so "full accumulation" promotes the wgmma
// accumulators into fp32 registers every 128 elements of K (4 MMAs of k32, one k-tile of 128).
// CUTLASS's FP8 mainloop does it with a second accumulator as large as the tile's: 2 x 128 registers
// per thread for a 128x256 cooperative tile, which spills, so CUTLASS full accumulation is usable only
// up to 128x192.
//
// This mainloop splits the tile's N into `Chunks` slices and runs the wgmmas of one slice at a time
// into a temporary accumulator of that slice's size, waits for them and adds the temporary into the
// tile's fp32 accumulator (the one the kernel's epilogue reads, laid out as for CUTLASS's own TiledMma).
// A 128x256 tile in 2 chunks needs 128 + 64 accumulator registers. As in CUTLASS's FP8 mainloop, a
// warpgroup's adds wait for its own wgmmas; the other consumer warpgroup's wgmmas fill the tensor
// cores meanwhile. That needs the cooperative schedule: under ping-pong only one consumer warpgroup
// is in its mainloop at a time, so the heuristics (configs.sm90.full_accumulation) use this mainloop
// for cooperative tiles only (ping-pong compiles and is correct, but leaves the tensor cores idle
// during the adds). (Keeping chunk c + 1's wgmmas in flight while chunk c is added, with two
// temporaries, made ptxas serialize every wgmma (C7514, CUDA 13.0) when the last chunk of a k-tile stayed in
// flight into the next one; `Overlap` does it within each k-tile, which ptxas keeps asynchronous. With one chunk,
// `Overlap` pairs k-tiles instead: two temporaries of the whole tile, the first k-tile's added while the second's
// wgmmas run, nothing in flight across the loop's back edge.)
//
// Numerics: each output element gets, per k-tile of 128, the wgmma sum of its 4 k32 MMAs added into
// the fp32 accumulator, in k order: the same operations as CUTLASS's promotion every 4 MMAs, so the
// results agree with CUTLASS's full-accumulation kernels (tests/test_gemm_gpu.py compares them).
//
// It derives from the CUTLASS fast-accumulation collective `Base` (its shared memory, pipeline,
// producer and TMA are used unchanged) and replaces the consumer's mma / mma_tail.
#pragma once

#include "cute/tensor.hpp"
#include "cute/atom/mma_atom.hpp"
#include "cute/algorithm/gemm.hpp"
#include "cute/arch/mma_sm90.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/gemm/collective/collective_builder.hpp"

namespace scalemm::sm90 {

// MAINLOOP_SCHEDULE tag: full FP8 accumulation in `Chunks` slices of N on CUTLASS's fast-accumulation
// `Schedule` (KernelTmaWarpSpecialized{Cooperative,Pingpong}FP8FastAccum).
template <class Schedule_, int Chunks_, bool Overlap_ = false>
struct Fp8ChunkedPromotion {
  using Schedule = Schedule_;
  static constexpr int Chunks = Chunks_;
  static constexpr bool Overlap = Overlap_;
};

// The register budget the promotion plans for: accumulators (the tile's and the temporaries) of at
// most this many fp32 registers per thread compile without spills in CUTLASS's cooperative kernels
// (240 registers per consumer thread; 128x192 full accumulation = 96 + 96 does, 128 + 128 does not).
constexpr int kAccumulatorRegisterBudget = 192;

template <class Base, int Chunks, bool Overlap = false>
struct Fp8ChunkedPromotionMainloop : Base {
  using typename Base::TiledMma;
  using typename Base::TileShape;
  using typename Base::SmemLayoutA;
  using typename Base::SmemLayoutB;
  using typename Base::MainloopPipeline;
  using typename Base::PipelineState;
  using typename Base::TensorStorage;
  using typename Base::Params;
  using typename Base::DispatchPolicy;

  static constexpr int kTileM = cute::size<0>(TileShape{});
  static constexpr int kTileN = cute::size<1>(TileShape{});
  static constexpr int kTileK = cute::size<2>(TileShape{});
  static constexpr int kChunkN = kTileN / Chunks;
  static_assert(Chunks >= 1 && kTileN % Chunks == 0 && kChunkN % 8 == 0,
                "N chunks must be multiples of 8 (the wgmma N step)");
  static_assert(kTileK == 128, "promotion every 128 k-elements: one k-tile of 128 per promotion");
  static constexpr int kWarpGroups = cute::size(TiledMma{}) / cutlass::NumThreadsPerWarpGroup;

  // One warpgroup's wgmma over a chunk: the same warpgroup arrangement as the tile's TiledMma.
  using ChunkMma = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<typename Base::ElementA, typename Base::ElementB, float,
                                 cute::Shape<cute::Int<kTileM>, cute::Int<kChunkN>, cute::Int<kTileK>>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::K>(),
      cute::Layout<cute::Shape<cute::Int<kWarpGroups>, cute::_1, cute::_1>>{}));

  // Registers per thread: the tile's accumulator and one chunk's temporary.
  static constexpr int kTileRegs = kTileM * kTileN / (kWarpGroups * cutlass::NumThreadsPerWarpGroup);
  static constexpr int kChunkRegs = kTileRegs / Chunks;
  static constexpr int kTemps = Overlap ? 2 : 1;
  static_assert(kTileRegs + kTemps * kChunkRegs <= kAccumulatorRegisterBudget,
                "tile accumulator + the chunk temporaries exceed the register budget: use more chunks");
  static_assert(!Overlap || Chunks == 1 || Chunks % 2 == 0,
                "overlapped promotion alternates two temporaries: an even chunk count, or one chunk (k-tile pairs)");

  // chunk `c` of the tile's accumulator += t. The accumulator's value mode is the wgmma C layout
  // (2, 2, N/8) with N/8 outermost, so chunk c's columns are its values [c * kChunkRegs, (c+1) * kChunkRegs).
  template <class Accum, class Temp>
  CUTLASS_DEVICE static void promote(Accum& accum, Temp const& t, int c) {
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kChunkRegs; ++i) {
      accum(c * kChunkRegs + i) += t(i);
    }
  }

  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read, FrgTensorC& accum,
                          int k_tile_count, int thread_idx, TensorStorage& shared_tensors, Params const&) {
    using namespace cute;
    static_assert(is_rmem<FrgTensorC>::value, "the accumulator must be in registers");
    static_assert(size(FrgTensorC{}) == kTileRegs, "the kernel's accumulator is not the tile's");
    static_assert(size<1>(FrgTensorC{}) == 1 && size<2>(FrgTensorC{}) == 1,
                  "one wgmma atom per warpgroup and tile (value mode = the whole tile slice)");

    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});  // (BLK_M,BLK_K,PIPE)
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});  // (BLK_N,BLK_K,PIPE)
    int warp_group = __shfl_sync(0xffffffff, thread_idx / cutlass::NumThreadsPerWarpGroup, 0);
    auto warp_group_layout = make_layout(Int<kWarpGroups>{}, Int<cutlass::NumThreadsPerWarpGroup>{});
    ChunkMma chunk_mma;
    auto thread_mma = chunk_mma.get_slice(warp_group_layout(warp_group));
    Tensor tCrA = thread_mma.make_fragment_A(thread_mma.partition_A(sA));  // (MMA,1,MMA_K,PIPE)
    Tensor tCrB = thread_mma.make_fragment_B(thread_mma.partition_B(sB));  // (MMA,Chunks,MMA_K,PIPE)
    static_assert(size<1>(decltype(tCrA){}) == 1 && size<1>(decltype(tCrB){}) == Chunks);
    constexpr int k_blocks = size<2>(decltype(tCrA){});

    Tensor temp = partition_fragment_C(chunk_mma, make_shape(Int<kTileM>{}, Int<kChunkN>{}));  // (MMA,1,1)
    static_assert(size(decltype(temp){}) == kChunkRegs);

    clear(accum);
    PipelineState smem_pipe_release = smem_pipe_read;
    // chunk c of k-tile `stage`'s wgmmas into temporary t (one commit group), and t's addition into accum
    auto issue = [&](auto& t, int stage, int c) {
      warpgroup_fence_operand(t);
      warpgroup_arrive();
      chunk_mma.accumulate_ = GMMA::ScaleOut::Zero;
      CUTLASS_PRAGMA_UNROLL
      for (int kb = 0; kb < k_blocks; ++kb) {
        cute::gemm(chunk_mma, tCrA(_, 0, kb, stage), tCrB(_, c, kb, stage), t(_, 0, 0));
        chunk_mma.accumulate_ = GMMA::ScaleOut::One;
      }
      warpgroup_commit_batch();
    };
    auto add = [&](auto& t, int c) {
      warpgroup_fence_operand(t);
      promote(accum, t, c);
    };
    // Overlap: chunk c of a k-tile goes to temporary c % 2, and its wgmmas are issued before chunk c - 1's
    // temporary is added (wait_group 1 retires exactly the older batch): all but the last chunk's adds run beside
    // this warpgroup's own wgmmas. The last chunk is waited for and added within its k-tile: carrying it in flight
    // into the next k-tile (across the loop's back edge) made ptxas serialize every wgmma (C7514, CUDA 13.0), as did
    // a wait skipped on some path. Without Overlap every chunk is waited for before the next one is issued.
    Tensor temp1 = partition_fragment_C(chunk_mma, make_shape(Int<kTileM>{}, Int<kChunkN>{}));  // Overlap only
    if constexpr (Overlap && Chunks == 1) {
      // One chunk, overlapped across k-tiles: a pair of k-tiles is waited for, k-tile 0's wgmmas go to temp and
      // k-tile 1's to temp1, and temp is added while k-tile 1's wgmmas run (wait_group 1); temp1 is added after
      // them, so nothing is in flight across the loop's back edge. The whole tile's width per wgmma (m64 x n128
      // for 128x128) reads the A tile once per k-tile, where two chunks read it twice. An odd count's last k-tile
      // runs alone.
      CUTLASS_PRAGMA_NO_UNROLL
      for (; k_tile_count > 1; k_tile_count -= 2) {
        PipelineState second = smem_pipe_read;
        ++second;
        auto token0 = pipeline.consumer_try_wait(smem_pipe_read);
        pipeline.consumer_wait(smem_pipe_read, token0);
        auto token1 = pipeline.consumer_try_wait(second);
        pipeline.consumer_wait(second, token1);
        issue(temp, smem_pipe_read.index(), 0);
        issue(temp1, second.index(), 0);
        warpgroup_wait<1>();
        add(temp, 0);
        pipeline.consumer_release(smem_pipe_release);
        ++smem_pipe_release;
        warpgroup_wait<0>();
        add(temp1, 0);
        pipeline.consumer_release(smem_pipe_release);
        ++smem_pipe_release;
        ++second;
        smem_pipe_read = second;
      }
    }
    CUTLASS_PRAGMA_NO_UNROLL
    for (; k_tile_count > 0; --k_tile_count) {  // (Overlap with one chunk: at most one k-tile left here)
      auto barrier_token = pipeline.consumer_try_wait(smem_pipe_read);
      pipeline.consumer_wait(smem_pipe_read, barrier_token);
      int const stage = smem_pipe_read.index();
      if constexpr (Overlap && Chunks > 1) {
        issue(temp, stage, 0);
        CUTLASS_PRAGMA_UNROLL
        for (int c = 1; c < Chunks; ++c) {
          if (c % 2 == 0) issue(temp, stage, c); else issue(temp1, stage, c);
          warpgroup_wait<1>();
          if (c % 2 == 1) add(temp, c - 1); else add(temp1, c - 1);
        }
        warpgroup_wait<0>();
        add(temp1, Chunks - 1);
      } else {
        CUTLASS_PRAGMA_UNROLL
        for (int c = 0; c < Chunks; ++c) {
          issue(temp, stage, c);
          warpgroup_wait<0>();
          add(temp, c);
        }
      }
      pipeline.consumer_release(smem_pipe_release);  // every wgmma reading this stage is done
      ++smem_pipe_release;
      ++smem_pipe_read;
    }
    warpgroup_fence_operand(accum);
  }

  // mma() has released every stage it read and waited for its wgmmas.
  CUTLASS_DEVICE void mma_tail(MainloopPipeline, PipelineState, int) {}
};

// How a kernel's MAINLOOP_SCHEDULE becomes its collective (dense and grouped kernels alike):
// builder_schedule_t is what CUTLASS's CollectiveBuilder is given, mainloop_t<Built, S> the collective
// the kernel runs (CUTLASS's own, or the chunked promotion on top of it).
template <class S>
struct BuilderSchedule { using type = S; };
template <class S, int C, bool O>
struct BuilderSchedule<Fp8ChunkedPromotion<S, C, O>> { using type = S; };
template <class S>
using builder_schedule_t = typename BuilderSchedule<S>::type;

template <class Built, class S>
struct Mainloop { using type = Built; };
template <class Built, class S, int C, bool O>
struct Mainloop<Built, Fp8ChunkedPromotion<S, C, O>> { using type = Fp8ChunkedPromotionMainloop<Built, C, O>; };
template <class Built, class S>
using mainloop_t = typename Mainloop<Built, S>::type;

}  // namespace scalemm::sm90
