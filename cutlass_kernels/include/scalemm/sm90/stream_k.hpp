// scalemm: CUTLASS's SM90 stream-K tile scheduler with a parallel, deterministic fixup.
//
// Stream-K splits an output tile's K loop over several CTAs ("peers"); their fp32 partial sums must be
// added before the epilogue. CUTLASS's deterministic fixup (ReductionMode::Deterministic) chains the
// peers: the first stores its partial, each later one waits for its predecessor and adds into the
// workspace, the final one waits for the sum and runs the epilogue. With p peers that is p - 1
// serialized hand-offs after the peers finish their K ranges at about the same time. ncu on the NVFP4
// GEMM at 64 tokens, 4096 x 4096 (H100) put ~20% of all stall samples in that chain.
//
// Here every non-final peer writes its partial to a slot of its own at once and signals; the final peer
// waits for all of them (the same lock and the same count CUTLASS uses: the K tiles done before its own)
// and adds the slots into its accumulators itself, nearest K range first:
//   acc = (((acc_final + p_{n-2}) + p_{n-3}) + ... + p_0).
// The order is fixed by the peers' K offsets, so results are the same on every run. Slots are claimed per
// warp with one atomic counter (a header records the claimant's K offset, so the claim order does not
// matter); a warp's slot holds its 32 lanes' accumulators, float4-interleaved for coalesced 512-byte
// accesses. Workspace: the slots, then the headers, then the locks and counters (zeroed per launch).
//
// The slot count per tile is bounded from the scheduler's own parameters (below); when the bound exceeds
// 32 (one header per lane of a warp: tiny N with huge K), this scheduler falls back to CUTLASS's chain.
// A claim beyond the bound traps (a loud launch failure, never a wrong sum).
#pragma once

#include <cstdint>

#include "cutlass/cutlass.h"
#include "cutlass/barrier.h"
#include "cutlass/workspace.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"

namespace scalemm::sm90 {

// Tile-scheduler tag: name it where CUTLASS takes cutlass::gemm::StreamKScheduler.
struct StreamKParallelFixupScheduler {};

template <class Tag>
inline constexpr bool is_stream_k_v = cute::is_same_v<Tag, cutlass::gemm::StreamKScheduler> ||
                                      cute::is_same_v<Tag, StreamKParallelFixupScheduler>;

template <class TileShape, class ClusterShape>
class StreamKParallelFixup
    : public cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90StreamK<TileShape, ClusterShape> {
  using Base = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90StreamK<TileShape, ClusterShape>;

 public:
  using Params = typename Base::Params;
  using Arguments = typename Base::Arguments;
  using WorkTileInfo = typename Base::WorkTileInfo;
  using Base::Base;

  static constexpr uint32_t kMaxSlots = 32;  // one slot header per lane
  static constexpr uint32_t kWarpsPerGroup = 4;
  static constexpr uint64_t kTileElems = uint64_t(cute::size<0>(TileShape{})) * cute::size<1>(TileShape{});

  // Tiles that may need a fixup (the lock index space CUTLASS uses): every output tile under split-K,
  // else the stream-K tiles.
  CUTLASS_HOST_DEVICE static uint64_t fixup_tiles(Params const& p) {
    return p.divmod_splits_.divisor > 1 ? p.units_per_problem_ : p.sk_tiles_;
  }

  // Most non-final peers of one tile. Split-K: splits - 1. Stream-K: the units are consecutive runs of
  // at least u = k_tiles_per_sk_unit K tiles (big units one more; CUTLASS's small-piece adjustment only
  // moves a piece to a unit that already meets the tile), so a tile of L K tiles meets at most
  // ceil(L / u) + 1 units, one of which is final.
  CUTLASS_HOST_DEVICE static uint32_t partial_slots(Params const& p) {
    if (p.divmod_splits_.divisor > 1) return uint32_t(p.divmod_splits_.divisor) - 1;
    uint32_t const k_tiles = uint32_t(p.divmod_tiles_per_output_tile_.divisor);
    uint32_t const unit = p.divmod_k_tiles_per_sk_unit_.divisor > 0 ? uint32_t(p.divmod_k_tiles_per_sk_unit_.divisor) : 1u;
    uint32_t const bound = (k_tiles + unit - 1) / unit;
    return k_tiles == 0 ? 0u : (bound < k_tiles - 1 ? bound : k_tiles - 1);
  }

  CUTLASS_HOST_DEVICE static bool parallel(Params const& p) {
    return p.reduction_mode_ == cutlass::gemm::kernel::detail::ReductionMode::Deterministic &&
           !p.requires_separate_reduction() && partial_slots(p) <= kMaxSlots;
  }

  struct Layout {
    uint64_t slots, headers_at, locks_at, counters_at, zeroed_bytes, bytes;
  };

  // `groups`: the consumer warpgroups, each with its own lock, slots and counters per tile.
  CUTLASS_HOST_DEVICE static Layout layout(Params const& p, uint32_t groups) {
    auto align = [](uint64_t b) { return (b + 127) / 128 * 128; };
    Layout l{};
    uint64_t const locks = fixup_tiles(p) * groups;
    l.slots = partial_slots(p);
    l.headers_at = align(fixup_tiles(p) * l.slots * kTileElems * sizeof(float));
    l.locks_at = l.headers_at + align(locks * kWarpsPerGroup * l.slots * sizeof(int32_t));
    l.counters_at = l.locks_at + locks * sizeof(int32_t);
    l.zeroed_bytes = align((locks + locks * kWarpsPerGroup) * sizeof(int32_t));
    l.bytes = l.locks_at + l.zeroed_bytes;
    return l;
  }

  template <class ProblemShape>
  static Params host_params(Arguments const& args, ProblemShape problem_shape, cutlass::KernelHardwareInfo const& hw_info,
                            uint32_t epilogue_subtile) {
    return Base::to_underlying_arguments(cute::append<4>(problem_shape, 1), TileShape{}, ClusterShape{}, hw_info, args,
                                         nullptr, epilogue_subtile);
  }

  template <class ProblemShape, class ElementAccumulator>
  static size_t get_workspace_size(Arguments const& args, ProblemShape problem_shape,
                                   cutlass::KernelHardwareInfo const& hw_info, uint32_t mma_warp_groups,
                                   uint32_t const epilogue_subtile = 1, uint32_t num_accumulator_mtxs = 1) {
    Params const p = host_params(args, problem_shape, hw_info, epilogue_subtile);
    if (!parallel(p) || fixup_tiles(p) == 0) {
      return Base::template get_workspace_size<ProblemShape, ElementAccumulator>(
          args, problem_shape, hw_info, mma_warp_groups, epilogue_subtile, num_accumulator_mtxs);
    }
    return layout(p, mma_warp_groups).bytes;
  }

  template <class ProblemShape, class ElementAccumulator>
  static cutlass::Status initialize_workspace(Arguments const& args, void* workspace, cudaStream_t stream,
                                              ProblemShape const& problem_shape,
                                              cutlass::KernelHardwareInfo const& hw_info, uint32_t mma_warp_groups,
                                              uint32_t const epilogue_subtile = 1, uint32_t num_accumulator_mtxs = 1,
                                              cutlass::CudaHostAdapter* cuda_adapter = nullptr) {
    Params const p = host_params(args, problem_shape, hw_info, epilogue_subtile);
    if (!parallel(p) || fixup_tiles(p) == 0) {
      return Base::template initialize_workspace<ProblemShape, ElementAccumulator>(
          args, workspace, stream, problem_shape, hw_info, mma_warp_groups, epilogue_subtile, num_accumulator_mtxs,
          cuda_adapter);
    }
    if (workspace == nullptr) return cutlass::Status::kErrorWorkspaceNull;
    Layout const l = layout(p, mma_warp_groups);
    return cutlass::zero_workspace(static_cast<uint8_t*>(workspace) + l.locks_at, l.zeroed_bytes, stream, cuda_adapter);
  }

  template <class FrgTensorC>
  CUTLASS_DEVICE static void fixup(Params const& params, WorkTileInfo const& work, FrgTensorC& accumulators,
                                   uint32_t num_barriers, uint32_t barrier_idx) {
    if (!parallel(params)) {
      Base::fixup(params, work, accumulators, num_barriers, barrier_idx);
      return;
    }
    if (!Base::requires_fixup(params, work)) return;

    static_assert(cute::is_same_v<typename FrgTensorC::value_type, float>, "fp32 accumulators");
    constexpr int kAcc = int(cute::size(FrgTensorC{}));
    static_assert(kAcc % 4 == 0, "accumulators travel as float4");
    constexpr uint32_t kThreads = cutlass::NumThreadsPerWarpGroup;
    // Every consumer warpgroup's accumulators fit one tile's worth of slot space.
    if (uint64_t(num_barriers) * kThreads * kAcc > kTileElems) __trap();
    using BarrierManager = cutlass::NamedBarrierManager<
        kThreads, static_cast<uint32_t>(cutlass::arch::ReservedNamedBarriers::StreamkBarrier0), 2>;

    Layout const l = layout(params, num_barriers);
    uint64_t const lock_idx = Base::output_tile_index(params, work) * num_barriers + barrier_idx;
    uint32_t const thread = threadIdx.x % kThreads;
    uint32_t const warp = thread / 32, lane = thread % 32;
    uint64_t const warp_slots = lock_idx * kWarpsPerGroup + warp;  // this warp's slot row

    char* const ws = static_cast<char*>(params.reduction_workspace_);
    int32_t* const locks = reinterpret_cast<int32_t*>(ws + l.locks_at);
    int32_t* const counter = reinterpret_cast<int32_t*>(ws + l.counters_at) + warp_slots;
    int32_t* const headers = reinterpret_cast<int32_t*>(ws + l.headers_at) + warp_slots * l.slots;
    auto slot_data = [&](uint64_t slot) {
      return reinterpret_cast<float4*>(ws) + ((warp_slots * l.slots + slot) * 32 * kAcc) / 4 + lane;
    };

    if (!Base::compute_epilogue(work, params)) {
      int32_t slot = 0;
      if (lane == 0) slot = atomicAdd(counter, 1);
      slot = __shfl_sync(0xffffffffu, slot, 0);
      if (uint64_t(slot) >= l.slots) __trap();
      float4* dst = slot_data(uint64_t(slot));
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kAcc / 4; ++i) {
        __stcg(dst + i * 32, make_float4(accumulators(4 * i), accumulators(4 * i + 1), accumulators(4 * i + 2),
                                         accumulators(4 * i + 3)));
      }
      if (lane == 0) __stcg(headers + slot, int32_t(work.K_idx));
      BarrierManager::arrive_inc(barrier_idx, locks, int(thread), int(lock_idx), int(work.k_tile_count));
    } else {
      // The K tiles before this peer's are done once the lock reaches its K offset.
      BarrierManager::wait_eq(barrier_idx, locks, int(thread), int(lock_idx), int(work.K_idx));
      int32_t const count = __ldcg(counter);
      int32_t const header = lane < uint32_t(count) ? __ldcg(headers + lane) : -1;
      int32_t below = int32_t(work.K_idx);
      for (int32_t n = 0; n < count; ++n) {  // nearest K range first
        int32_t const next = __reduce_max_sync(0xffffffffu, header < below ? header : -1);
        uint32_t const slot = uint32_t(__ffs(__ballot_sync(0xffffffffu, header == next)) - 1);
        float4 const* src = slot_data(slot);
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < kAcc / 4; ++i) {
          float4 const v = __ldcg(src + i * 32);
          accumulators(4 * i) += v.x;
          accumulators(4 * i + 1) += v.y;
          accumulators(4 * i + 2) += v.z;
          accumulators(4 * i + 3) += v.w;
        }
        below = next;
      }
    }
  }
};

}  // namespace scalemm::sm90

namespace cutlass::gemm::kernel::detail {

template <class TileShape, class ClusterShape, uint32_t SchedulerPipelineStageCount>
struct TileSchedulerSelector<scalemm::sm90::StreamKParallelFixupScheduler, arch::Sm90, TileShape, ClusterShape,
                             SchedulerPipelineStageCount> {
  using Scheduler = scalemm::sm90::StreamKParallelFixup<TileShape, ClusterShape>;
};

}  // namespace cutlass::gemm::kernel::detail
