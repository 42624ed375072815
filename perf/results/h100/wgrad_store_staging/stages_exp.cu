// EXPERIMENT (perf/results/h100/wgrad_store_staging/; not part of scalemm): the grouped GEMM of
// grouped_gemm_sm90.cu with the 16-bit source's epilogue staging (StagesC, StagesD, ReuseSmemC) set by the
// rendering, in place of own_source_buffers_t's (the builder's 4 and 2, own C buffers).
{{PRELUDE}}#include "scalemm/sm90/grouped_gemm.cuh"

namespace scalemm::sm90 {
// More specialized than own_source_buffers' own: the builder's policy for a 128x256 tile's bf16 C = D.
template <int FragmentSize, bool DelayTmaStore, int EpilogueWarpGroups, class... Rest>
struct own_source_buffers<cutlass::epilogue::collective::CollectiveEpilogue<
    cutlass::epilogue::Sm90PtrArrayTmaWarpSpecialized<4, 2, FragmentSize, true, DelayTmaStore, EpilogueWarpGroups>,
    Rest...>> {
  using type = cutlass::epilogue::collective::CollectiveEpilogue<
      cutlass::epilogue::Sm90PtrArrayTmaWarpSpecialized<{{EXP_STAGES_C}}, {{EXP_STAGES_D}}, FragmentSize,
                                                        {{EXP_REUSE_C}}, DelayTmaStore, EpilogueWarpGroups>,
      Rest...>;
};
}  // namespace scalemm::sm90

using TileShape = cute::Shape<cute::_{{TILE_M}}, cute::_{{TILE_N}}, cute::_{{TILE_K}}>;
using ClusterShape = cute::Shape<cute::_{{CLUSTER_M}}, cute::_{{CLUSTER_N}}, cute::_1>;
using Evt = {{EVT_TYPE}};
using Gemm = scalemm::Sm90GroupedGemm<{{ELEMENT_A}}, {{ELEMENT_B}}, {{ELEMENT_D}}, {{LAYOUT_D}}, TileShape,
                                      ClusterShape, {{MAINLOOP_SCHEDULE}}, {{EPILOGUE_SCHEDULE}}, Evt,
                                      {{WGRAD}}, {{ELEMENT_C}}>;
static_assert(Gemm::CollectiveEpilogue::DispatchPolicy::StagesD == {{EXP_STAGES_D}} &&
              Gemm::CollectiveEpilogue::DispatchPolicy::StagesC == {{EXP_STAGES_C}},
              "the experiment's staging did not take");
// mainloop stages x 100 + StagesC x 10 + StagesD (read by ab.py through ctypes)
extern "C" int scalemm_exp_stages() {
  using P = Gemm::CollectiveEpilogue::DispatchPolicy;
  return Gemm::CollectiveMainloop::DispatchPolicy::Stages * 100 + P::StagesC * 10 + P::StagesD;
}

static Evt::Arguments make_evt_args(void const* const* ptrs, int64_t const* vec) {
  return {{EVT_ARGS}};
}

extern "C" int scalemm_grouped_gemm(scalemm::GroupedGemmArgs const* a) {
  if (a->leaf_count > scalemm::kMaxLeaves) return scalemm::kCannotImplement;
  return Gemm::run(*a, &make_evt_args);
}
