// One SM90 NVFP4-weight GEMM for few tokens (scalemm/sm90/nvfp4_skinny.cuh), rendered by scalemm.gemm.
#include "scalemm/sm90/nvfp4_skinny.cuh"

extern "C" int scalemm_nvfp4_skinny_gemm(scalemm::Nvfp4SkinnyGemmArgs const* a) {
  return scalemm::sm90::skinny::launch<{{ELEMENT_X}}, {{X_NVFP4}}, {{ELEMENT_D}}, {{TOKEN_TILES}}, {{MAINLOOP}}, {{ACTIVATION}}>(*a);
}

// The split count that call would use (its splits = 0 resolved), without launching.
extern "C" int scalemm_nvfp4_skinny_splits(scalemm::Nvfp4SkinnySplitsArgs const* a) {
  return scalemm::sm90::skinny::resolve_splits<{{ELEMENT_X}}, {{X_NVFP4}}, {{ELEMENT_D}}, {{TOKEN_TILES}}, {{MAINLOOP}},
                                               {{ACTIVATION}}>(*a);
}
