"""Kernel configurations and heuristics, one module per GPU architecture.

  sm90.py    Hopper (H100, H200; nvcc target sm_90a): GemmConfig, the heuristics
             (default_config, default_grouped_config, default_wgrad_config, default_nvfp4_config,
             default_nvfp4_grouped_config), the candidates scalemm.tune times, the build sets
  shapes.py  model GEMM shapes and presets (no arch)

`for_arch(arch)` gives the module of an architecture name; the ops pick theirs through
`scalemm.arch.kernel_arch(device)`, the one capability check. A new architecture is a new module
here with the same names (GemmConfig, default_config, ...) and an entry in `_ARCHS` and in
scalemm/arch.py's KERNEL_ARCHS.

The names imported below are sm90's (the only architecture with kernels so far), so
`scalemm.cutlass_kernels.configs.default_config` and `scalemm.cutlass_kernels.GemmConfig` keep working.
"""
from __future__ import annotations

from types import ModuleType

from . import sm90
from .shapes import (DECODE_M, MODEL_LINEAR_SHAPES, MODEL_PRESETS, PREFILL_M, load_model, model_gemm_shapes,
                     model_linear_shapes, sweep_points)
from .sm90 import (ELEMENTS, GROUPED_TUNING_CANDIDATES, TUNING_CANDIDATES, GemmConfig, bias_free_full_kernel,
                   default_build_set,
                   default_config, default_grouped_config, default_nvfp4_config, default_nvfp4_grouped_config,
                   default_nvfp4_tokens_on_a_config, default_nvfp4_w4a16_on_a_config, nvfp4_tokens_on_a,
                   nvfp4_w4a16_on_a,
                   default_wgrad_config, grouped_tuning_candidates, nvfp4_cpp, nvfp4_decodes_activations, sweep_configs,
                   tuning_candidates,
                   SkinnyConfig, SKINNY_DEFAULT_MAINLOOP, SKINNY_MAINLOOPS, SKINNY_TILE_ROWS, NVFP4_WIDE_TOKEN_WIDTHS,
                   NVFP4_TOKENS_ON_A_WIDTHS,
                   default_nvfp4_skinny_config,
                   default_nvfp4_grouped_skinny_config, skinny_config_for_groups, skinny_config_for_tokens, skinny_cpp)

_ARCHS: dict[str, ModuleType] = {"sm90": sm90}


def archs() -> tuple[str, ...]:
    """The architectures scalemm has configs (and kernels) for."""
    return tuple(_ARCHS)


def for_arch(arch: str) -> ModuleType:
    """The configs module of `arch` ("sm90"); NotImplementedError for an architecture without one."""
    try:
        return _ARCHS[arch]
    except (KeyError, TypeError):
        raise NotImplementedError(f"scalemm has no kernel configs for {arch!r} yet (it has: "
                                  f"{', '.join(_ARCHS)})") from None


__all__ = ["for_arch", "archs", "sm90", "GemmConfig", "bias_free_full_kernel", "default_config", "default_grouped_config",
           "default_wgrad_config", "default_nvfp4_config", "default_nvfp4_grouped_config", "default_build_set",
           "nvfp4_cpp", "nvfp4_decodes_activations", "SkinnyConfig", "SKINNY_DEFAULT_MAINLOOP", "SKINNY_MAINLOOPS", "SKINNY_TILE_ROWS", "NVFP4_WIDE_TOKEN_WIDTHS", "default_nvfp4_skinny_config", "default_nvfp4_grouped_skinny_config", "skinny_config_for_groups", "skinny_config_for_tokens", "skinny_cpp", "tuning_candidates", "grouped_tuning_candidates", "TUNING_CANDIDATES", "GROUPED_TUNING_CANDIDATES", "ELEMENTS",
           "MODEL_LINEAR_SHAPES", "MODEL_PRESETS", "DECODE_M", "PREFILL_M", "sweep_points", "sweep_configs",
           "load_model", "model_linear_shapes", "model_gemm_shapes"]
