// scalemm: SM90 grouped (MoE) GEMM fed by device-side offsets.
//
// out[rows of group g] = Evt(a[rows of g] @ b[g]^T), a [T,K] rows sorted by group, b [G,N,K],
// offsets int32 [G] cumulative row ends (torch._grouped_mm's `offs`). A tiny setup kernel
// turns the offsets into CUTLASS's per-group problem shapes, pointer and stride arrays on the
// device, so nothing is read on the host and the whole call is CUDA-graph capturable.
// Swap-AB form (few tokens per expert): each group computes D_g^T = B_g A_g^T, written
// column-major, which is the same memory as row-major D_g.
// Wgrad form: dW_g [N,K] = dY_g^T X_g with the groups along the reduction: the operands are
// the transposed copies dy_t [N, Tp], x_t [K, Tp] (K-major, as FP8 wgmma needs), group g's
// tokens in columns [p_g, p_g + m_g), p_g = sum_{j<g} ceil(m_j/16)*16 (16-byte TMA bases).
// An epilogue tree with a Source leaf (ElementC not void) reads D itself: the GEMM accumulates into
// its output (C and D are one array; each tile reads its C before it writes the same elements).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cuda_runtime.h>

#include "scalemm/group_offsets.cuh"
#include "scalemm/sm90/gemm.cuh"

namespace scalemm {

namespace sm90 {

// CUTLASS's builder gives a C and a D of one width one set of shared-memory buffers (ReuseSmemC): the next C
// subtile then loads into a buffer only once the D store that last used it has been read out, so the loads of C
// queue behind the epilogue's own stores (the wgrad that adds into .grad, C = D = dW in bf16, took 1.37-1.40x the time
// of the same kernel writing dW). own_source_buffers_t keeps the builder's stage counts and gives C buffers of its
// own (the builder's choice for a C and D of different widths), at the cost of a mainloop stage: 1.07x on the
// adding bf16 wgrad of Qwen3-30B-A3B's expert layers, bit-identical (H100, perf/results/h100/wgrad_source_staging/).
template <class Epilogue>
struct own_source_buffers { using type = Epilogue; };

template <int StagesC, int StagesD, int FragmentSize, bool ReuseSmemC, bool DelayTmaStore, int EpilogueWarpGroups,
          class... Rest>
struct own_source_buffers<cutlass::epilogue::collective::CollectiveEpilogue<
    cutlass::epilogue::Sm90PtrArrayTmaWarpSpecialized<StagesC, StagesD, FragmentSize, ReuseSmemC, DelayTmaStore,
                                                      EpilogueWarpGroups>, Rest...>> {
  using type = cutlass::epilogue::collective::CollectiveEpilogue<
      cutlass::epilogue::Sm90PtrArrayTmaWarpSpecialized<StagesC, StagesD, FragmentSize, false, DelayTmaStore,
                                                        EpilogueWarpGroups>, Rest...>;
};

template <class Epilogue>
using own_source_buffers_t = typename own_source_buffers<Epilogue>::type;

}  // namespace sm90

struct GroupedLeaves {
  void const* base[kMaxLeaves];
  int mode[kMaxLeaves];
  int elem_bytes[kMaxLeaves];
  int64_t group_stride[kMaxLeaves];  // elements per group for kLeafPerGroupVec
  int count;
};

enum class GroupedKind { kFprop, kSwapFprop, kWgrad };

inline bool leaf_is_vector(int mode) {
  return mode == kLeafPerRow || mode == kLeafPerGroupVec || mode == kLeafShared;
}

// The setup kernel's per-group arrays. Offsets are clamped into [0, T] and a group whose end precedes its
// start is empty, so invalid offsets can never send the GEMM outside its buffers (overlapping groups would compute
// some rows twice; the result is then unspecified but in bounds).
// fprop: a [T,K], b [G,N,K], d [T,N].  wgrad: a = dy_t [N,Tp], b = x_t [K,Tp], d [G,N,K], T = Tp.
struct GroupedSetupArgs {
  int const* offsets;
  int G;
  int64_t T;
  int N, K;
  char const* a;
  char const* b;
  char* d;
  int d_bytes;
  char const* zeros;        // wgrad: 16 * max(N, K) zero bytes (empty groups reduce over them)
  GroupedLeaves leaves;
  void const** leaf_ptrs;
  char* clear;              // CUTLASS's workspace, set to zero first when asked for (sm90::workspace_bytes_to_zero)
  int64_t clear_bytes;
  char* zero_buf;           // wgrad's zero buffer when carved from the workspace (then `zeros`), set to zero first
  int64_t zero_buf_bytes;
  int64_t tail_row_bytes;   // fprop: > 0 also zeroes d's rows past the groups (rows of tail_row_bytes)
};

// Group g's problem, pointers, strides and leaf pointers from its rows [start, end) (clamped, end >= start) and,
// for wgrad, its padded column start pstart.
template <class ProblemShape, class StrideA, class StrideB, class StrideD, GroupedKind kKind>
__device__ void setup_group(GroupedSetupArgs const& s, int g, int64_t start, int64_t end, int64_t pstart,
                            ProblemShape* problems, void const** ptr_a, void const** ptr_b, void** ptr_d,
                            StrideA* stride_a, StrideB* stride_b, StrideD* stride_d) {
  int const N = s.N, K = s.K;
  int m = int(end - start);
  if constexpr (kKind == GroupedKind::kWgrad) {
    // Reduction over the group's m tokens. An empty group still has to write dW_g = 0: give it a
    // 16-long reduction over a zero buffer (CUTLASS leaves the accumulators unset when K = 0).
    int64_t Tp = s.T;
    bool empty = m == 0 || pstart + m > Tp;
    problems[g] = {N, K, empty ? 16 : m};
    ptr_a[g] = empty ? s.zeros : s.a + pstart;
    ptr_b[g] = empty ? s.zeros : s.b + pstart;
    StrideA sa{};  cute::get<0>(sa) = empty ? 16 : Tp;
    StrideB sb{};  cute::get<0>(sb) = empty ? 16 : Tp;
    stride_a[g] = sa;
    stride_b[g] = sb;
    stride_d[g] = cutlass::make_cute_packed_stride(StrideD{}, cute::make_shape(N, K, 1));
    ptr_d[g] = s.d + int64_t(g) * N * K * s.d_bytes;
  } else {
    char const* a_g = s.a + start * K;                       // e4m3: one byte per element
    char const* b_g = s.b + int64_t(g) * N * K;
    if constexpr (kKind == GroupedKind::kSwapFprop) {
      problems[g] = {N, m, K};
      ptr_a[g] = b_g; ptr_b[g] = a_g;
      stride_a[g] = cutlass::make_cute_packed_stride(StrideA{}, cute::make_shape(N, K, 1));
      stride_b[g] = cutlass::make_cute_packed_stride(StrideB{}, cute::make_shape(m, K, 1));
      stride_d[g] = cutlass::make_cute_packed_stride(StrideD{}, cute::make_shape(N, m, 1));
    } else {
      problems[g] = {m, N, K};
      ptr_a[g] = a_g; ptr_b[g] = b_g;
      stride_a[g] = cutlass::make_cute_packed_stride(StrideA{}, cute::make_shape(m, K, 1));
      stride_b[g] = cutlass::make_cute_packed_stride(StrideB{}, cute::make_shape(N, K, 1));
      stride_d[g] = cutlass::make_cute_packed_stride(StrideD{}, cute::make_shape(m, N, 1));
    }
    ptr_d[g] = s.d + start * int64_t(N) * s.d_bytes;
  }
  GroupedLeaves const& leaves = s.leaves;
  for (int i = 0; i < leaves.count; ++i) {
    char const* base = static_cast<char const*>(leaves.base[i]);
    int64_t off = 0;
    switch (leaves.mode[i]) {
      case kLeafPerRow: off = start; break;
      case kLeafPerGroupVec: off = int64_t(g) * leaves.group_stride[i]; break;
      case kLeafPerGroup: off = g; break;
      default: off = 0;
    }
    s.leaf_ptrs[int64_t(i) * s.G + g] = base ? base + off * leaves.elem_bytes[i] : nullptr;
  }
}

constexpr int kSetupThreads = 128;

// The setup kernel: optional clears (CUTLASS's workspace, wgrad's zero buffer, fprop's rows past the groups) over
// the whole grid, then the per-group arrays: fprop one thread per group (each reads only its own two offsets:
// decode MoE pays nothing per earlier group), wgrad in block 0, kSetupThreads groups at a time, with its padded
// column starts p_g = sum_{j<g} ceil(m_j/16)*16 (m_j from the running maximum of the clamped offsets) as a block
// scan carried from chunk to chunk.
template <class ProblemShape, class StrideA, class StrideB, class StrideD, GroupedKind kKind>
__global__ void __launch_bounds__(kSetupThreads) grouped_gemm_setup(GroupedSetupArgs s, ProblemShape* problems,
                                                                    void const** ptr_a, void const** ptr_b,
                                                                    void** ptr_d, StrideA* stride_a,
                                                                    StrideB* stride_b, StrideD* stride_d) {
  int64_t const thread = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, threads = int64_t(gridDim.x) * blockDim.x;
  group_offsets::zero_bytes(s.clear, s.clear_bytes, thread, threads);
  group_offsets::zero_bytes(s.zero_buf, s.zero_buf_bytes, thread, threads);
  if constexpr (kKind != GroupedKind::kWgrad) {
    if (s.tail_row_bytes > 0)  // the same for every thread: the helper's block barriers are safe
      group_offsets::zero_rows_past_groups(s.d, s.T, s.tail_row_bytes, s.offsets, s.G, thread, threads);
    int g = int(thread);
    if (g >= s.G) return;
    int64_t start = g == 0 ? 0 : group_offsets::clamp_offset(s.offsets[g - 1], s.T);
    int64_t end = group_offsets::clamp_offset(s.offsets[g], s.T);
    setup_group<ProblemShape, StrideA, StrideB, StrideD, kKind>(s, g, start, end < start ? start : end, 0, problems,
                                                                ptr_a, ptr_b, ptr_d, stride_a, stride_b, stride_d);
  } else {
    if (blockIdx.x != 0) return;
    __shared__ int64_t scan_scratch[2][kSetupThreads / 32];
    __shared__ int64_t runs[kSetupThreads];
    __shared__ int64_t chunk_cols;
    int64_t carry_run = 0, carry_cols = 0;  // running max and padded columns of the groups before the chunk
    for (int base = 0; base < s.G; base += kSetupThreads) {
      int const t = int(threadIdx.x), g = base + t;
      int64_t const e = g < s.G ? group_offsets::clamp_offset(s.offsets[g], s.T) : 0;
      int64_t run = group_offsets::block_scan<kSetupThreads>(e, group_offsets::MaxOp{}, scan_scratch[0]).inclusive;
      run = run > carry_run ? run : carry_run;
      runs[t] = run;
      __syncthreads();
      int64_t const prev = t == 0 ? carry_run : runs[t - 1];
      int64_t const cols = (run - prev + 15) / 16 * 16;  // 0 past G: the running max stops there
      int64_t const incl = group_offsets::block_scan<kSetupThreads>(cols, group_offsets::SumOp{}, scan_scratch[1]).inclusive;
      if (g < s.G) {
        int64_t const start = g == 0 ? 0 : group_offsets::clamp_offset(s.offsets[g - 1], s.T);
        setup_group<ProblemShape, StrideA, StrideB, StrideD, kKind>(s, g, start, e < start ? start : e,
                                                                    carry_cols + incl - cols, problems, ptr_a, ptr_b,
                                                                    ptr_d, stride_a, stride_b, stride_d);
      }
      if (t == kSetupThreads - 1) chunk_cols = incl;
      __syncthreads();
      carry_run = runs[kSetupThreads - 1];
      carry_cols += chunk_cols;
      __syncthreads();  // runs[] and chunk_cols are rewritten by the next chunk
    }
  }
}

template <class ElementA_, class ElementB_, class ElementD_, class LayoutD_, class TileShape_,
          class ClusterShape_, class MainloopSchedule, class EpilogueSchedule, class Evt,
          bool kWgrad_ = false, class ElementC_ = void>
struct Sm90GroupedGemm {
  using ElementA = ElementA_;
  using ElementB = ElementB_;
  using ElementD = ElementD_;
  using LayoutD = LayoutD_;
  using TileShape = TileShape_;
  using ClusterShape = ClusterShape_;
  static constexpr bool kSwap = cute::is_same_v<LayoutD, cutlass::layout::ColumnMajor>;
  static constexpr GroupedKind kKind = kWgrad_ ? GroupedKind::kWgrad
                                       : kSwap ? GroupedKind::kSwapFprop : GroupedKind::kFprop;
  static constexpr int kAlignA = 128 / cutlass::sizeof_bits<ElementA>::value;
  static constexpr int kAlignB = 128 / cutlass::sizeof_bits<ElementB>::value;
  static constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;
  using ElementC = ElementC_;
  static_assert(cute::is_void_v<ElementC> || cute::is_same_v<ElementC, ElementD>,
                "a grouped GEMM's Source is its output: ElementC must be ElementD");
  using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;

  using BuiltEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, ElementC, LayoutD*, kAlignD,
      ElementD, LayoutD*, kAlignD, EpilogueSchedule, Evt>::CollectiveOp;
  // A kernel that reads a 16-bit output (accumulation into bf16 / fp16) loads it into buffers of its own
  // (own_source_buffers_t). An fp32 C keeps the builder's shared buffers: D's own would take 32 KB more of shared
  // memory from the mainloop's stages (16 KB for bf16), and that was not measured.
  static constexpr bool kOwnSourceBuffers = [] {
    if constexpr (cute::is_void_v<ElementC>) return false;
    else return cutlass::sizeof_bits<ElementC>::value == 16;
  }();
  using CollectiveEpilogue = cute::conditional_t<kOwnSourceBuffers, sm90::own_source_buffers_t<BuiltEpilogue>,
                                                 BuiltEpilogue>;

  // MainloopSchedule as in Sm90Gemm (a CUTLASS schedule or sm90::Fp8ChunkedPromotion).
  using CollectiveMainloop = sm90::mainloop_t<typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, cutlass::layout::RowMajor*,
      kAlignA, ElementB, cutlass::layout::ColumnMajor*, kAlignB, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      sm90::builder_schedule_t<MainloopSchedule>>::CollectiveOp, MainloopSchedule>;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;
  using Problem = typename ProblemShape::UnderlyingProblemShape;

  static constexpr int64_t align16(int64_t x) { return (x + 15) / 16 * 16; }

  // The C pointer array: D's own (accumulate into the output), or none.
  static auto source(void** ptr_d) {
    if constexpr (cute::is_void_v<ElementC>)
      return nullptr;
    else
      return const_cast<ElementC const**>(reinterpret_cast<ElementC**>(ptr_d));
  }

  // Device arrays the setup kernel writes, carved from the caller's workspace, and (zero_bytes > 0) the zero
  // buffer it clears for wgrad's empty groups.
  struct Arrays {
    Problem* problems; void const** ptr_a; void const** ptr_b; void** ptr_d;
    StrideA* stride_a; StrideB* stride_b; StrideD* stride_d; void const** leaf_ptrs;
    char* zeros; char* rest; int64_t bytes;
  };
  static Arrays carve(void* workspace, int G, int64_t zero_bytes) {
    Arrays r;
    char* p = static_cast<char*>(workspace);
    auto take = [&](int64_t n) { char* q = p; p += align16(n); return q; };
    r.problems = reinterpret_cast<Problem*>(take(sizeof(Problem) * G));
    r.ptr_a = reinterpret_cast<void const**>(take(sizeof(void*) * G));
    r.ptr_b = reinterpret_cast<void const**>(take(sizeof(void*) * G));
    r.ptr_d = reinterpret_cast<void**>(take(sizeof(void*) * G));
    r.stride_a = reinterpret_cast<StrideA*>(take(sizeof(StrideA) * G));
    r.stride_b = reinterpret_cast<StrideB*>(take(sizeof(StrideB) * G));
    r.stride_d = reinterpret_cast<StrideD*>(take(sizeof(StrideD) * G));
    r.leaf_ptrs = reinterpret_cast<void const**>(take(sizeof(void*) * G * kMaxLeaves));
    r.zeros = zero_bytes > 0 ? take(zero_bytes) : nullptr;
    // CUTLASS keeps per-group TMA descriptors in its workspace: give it 256-byte alignment.
    int64_t used = p - static_cast<char*>(workspace);
    r.bytes = (used + 255) / 256 * 256;
    r.rest = static_cast<char*>(workspace) + r.bytes;
    return r;
  }

  // The launcher's GroupedGemmArgs (leaf_count <= kMaxLeaves, checked by the caller) -> the setup
  // kernel's leaves, the per-group arrays in the workspace, and the grouped GEMM.
  static int run(GroupedGemmArgs const& p,
                 typename Evt::Arguments (*make_evt_args)(void const* const*, int64_t const*)) {
    GroupedLeaves leaves{};
    leaves.count = int(p.leaf_count);
    for (int i = 0; i < leaves.count; ++i) {
      leaves.base[i] = p.leaf_base[i];
      leaves.mode[i] = int(p.leaf_mode[i]);
      leaves.elem_bytes[i] = int(p.leaf_elem_bytes[i]);
      leaves.group_stride[i] = p.leaf_group_stride[i];
    }
    void const* a = p.a;
    void const* b = p.b;
    void* d = p.d;
    int const* offsets = static_cast<int const*>(p.offsets);
    int const G = int(p.groups);
    int64_t const T = p.tokens;
    int const N = int(p.n), K = int(p.k);
    void* workspace = p.workspace;
    int64_t const workspace_bytes = p.workspace_bytes;
    int const device = int(p.device);
    cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
    cudaError_t err = cudaSetDevice(device);
    if (err != cudaSuccess) return static_cast<int>(err);
    // wgrad without the caller's zero buffer: one carved from the workspace, cleared by the setup kernel
    int64_t const carved_zeros = kKind == GroupedKind::kWgrad && p.zeros == nullptr ? 16 * int64_t(std::max(N, K)) : 0;
    Arrays arr = carve(workspace, G, carved_zeros);
    if (arr.bytes > workspace_bytes) return kWorkspaceTooSmall;
    void const* leaf_arrays[kMaxLeaves];
    int64_t vec[kMaxLeaves];
    for (int i = 0; i < kMaxLeaves; ++i) {
      bool present = i < leaves.count && leaves.mode[i] != kLeafNull;
      leaf_arrays[i] = present ? static_cast<void const*>(arr.leaf_ptrs + int64_t(i) * G) : nullptr;
      vec[i] = i < leaves.count && leaf_is_vector(leaves.mode[i]);
    }
    auto const hw = sm90::hardware_info(device);
    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGrouped,
        {G, arr.problems, nullptr},  // problem shapes live on the device only
        {reinterpret_cast<ElementA const**>(arr.ptr_a), arr.stride_a,
         reinterpret_cast<ElementB const**>(arr.ptr_b), arr.stride_b},
        {make_evt_args(leaf_arrays, vec), source(arr.ptr_d), arr.stride_d,
         reinterpret_cast<ElementD**>(arr.ptr_d), arr.stride_d},
        hw};
    int64_t const cutlass_bytes = static_cast<int64_t>(Gemm::get_workspace_size(args));
    if (cutlass_bytes > workspace_bytes - arr.bytes) return kWorkspaceTooSmall;
    GroupedSetupArgs s{};
    s.offsets = offsets; s.G = G; s.T = T; s.N = N; s.K = K;
    s.a = static_cast<char const*>(a); s.b = static_cast<char const*>(b); s.d = static_cast<char*>(d);
    s.d_bytes = int(sizeof(ElementD));
    s.zeros = carved_zeros > 0 ? arr.zeros : static_cast<char const*>(p.zeros);
    s.leaves = leaves; s.leaf_ptrs = arr.leaf_ptrs;
    s.clear = arr.rest; s.clear_bytes = sm90::workspace_bytes_to_zero(cutlass_bytes);
    s.zero_buf = arr.zeros; s.zero_buf_bytes = carved_zeros;
    s.tail_row_bytes = kKind != GroupedKind::kWgrad && p.zero_rows_past_groups ? int64_t(N) * s.d_bytes : 0;
    // One thread per fprop group; enough blocks to clear the workspace / zero buffer 16 bytes a thread in at most
    // 8 rounds; and for the rows past the groups (usually none: each block finds that out and exits) up to 4
    // blocks per SM. The GEMM reads what setup writes (stream order).
    auto rounds8 = [](int64_t bytes) { return (bytes + 16 * 8 * kSetupThreads - 1) / (16 * 8 * kSetupThreads); };
    int64_t const tail_blocks = s.tail_row_bytes > 0 ? std::min<int64_t>((T * s.tail_row_bytes + 16 * kSetupThreads - 1) /
                                                                             (16 * kSetupThreads),
                                                                         4 * int64_t(hw.sm_count))
                                                     : 0;
    int const blocks = int(std::max<int64_t>(
        {(G + kSetupThreads - 1) / kSetupThreads, rounds8(s.clear_bytes), rounds8(carved_zeros), tail_blocks, 1}));
    grouped_gemm_setup<Problem, StrideA, StrideB, StrideD, kKind><<<blocks, kSetupThreads, 0, stream>>>(
        s, arr.problems, arr.ptr_a, arr.ptr_b, arr.ptr_d, arr.stride_a, arr.stride_b, arr.stride_d);
    err = cudaGetLastError();
    if (err != cudaSuccess) return static_cast<int>(err);
    return sm90::launch<Gemm>(args, arr.rest, workspace_bytes - arr.bytes, stream);
  }
};

}  // namespace scalemm
