"""GEMM kernel configurations as data: tile, cluster, schedule -> template parameters and a name.

`default_config(M, N, K, ...)` is the readable heuristic scalemm.gemm uses; pass a
`GemmConfig` explicitly to override it (perf/gemm_sweep.py --tune compares several).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..epilogues import CPP_TYPES, Emitted, dtype_name

ELEMENTS = {"e4m3": "cutlass::float_e4m3_t", "bf16": "cutlass::bfloat16_t"}


@dataclass(frozen=True)
class GemmConfig:
    """One SM90 kernel shape. All fields are compile-time in the generated kernel."""
    tile_m: int = 128
    tile_n: int = 128
    tile_k: int = 128
    cluster_m: int = 2
    cluster_n: int = 1
    schedule: str = "cooperative"        # "cooperative" (2 consumer warpgroups share a tile) | "pingpong"
    swap_ab: bool = False                # compute D^T = B A^T: small M goes on the narrow tile side
    stream_k: bool = False               # stream-K / split-K tile scheduler (small grids)
    # Run-time scheduling knobs (not compiled in, not part of the kernel): tile raster order
    # ("auto" = CUTLASS's heuristic, "m", "n") and the swizzle width of the tile order (1, 2, 4, 8).
    raster: str = "auto"
    swizzle: int = 1

    def __post_init__(self):
        if self.schedule not in ("cooperative", "pingpong"):
            raise ValueError(f"schedule must be 'cooperative' or 'pingpong', got {self.schedule!r}")
        if self.schedule == "cooperative" and self.tile_m % 128:
            raise ValueError("the cooperative schedule needs tile_m a multiple of 128")
        if self.tile_m % 64 or self.tile_n % 16 or self.tile_n > 256 or self.tile_k % 64:
            raise ValueError(f"unsupported tile {self.tile_m}x{self.tile_n}x{self.tile_k}")
        if self.stream_k and self.schedule != "cooperative":
            raise ValueError("stream-K needs the cooperative schedule")
        if self.raster not in ("auto", "m", "n") or self.swizzle not in (1, 2, 4, 8):
            raise ValueError(f"raster must be auto/m/n and swizzle 1/2/4/8, got {self.raster!r}, {self.swizzle}")

    def key(self) -> str:
        """The compiled kernel's name part (run-time knobs excluded)."""
        s = f"t{self.tile_m}x{self.tile_n}x{self.tile_k}_c{self.cluster_m}x{self.cluster_n}_{self.schedule[:4]}"
        return s + ("_swap" if self.swap_ab else "") + ("_sk" if self.stream_k else "")

    def label(self) -> str:
        """key() plus the run-time knobs when they differ from the defaults (for sweep tables)."""
        extra = (f"_r{self.raster}" if self.raster != "auto" else "") + (f"_s{self.swizzle}" if self.swizzle != 1 else "")
        return self.key() + extra

    def compiled(self) -> "GemmConfig":
        """The same kernel with default run-time knobs (what the JIT keys on)."""
        return replace(self, raster="auto", swizzle=1)

    def cpp(self, *, fast_accum: bool, out_dtype, epilogue: Emitted, element="e4m3",
            grouped: bool = False, wgrad: bool = False) -> dict[str, str]:
        """Template parameters for cutlass_kernels/templates/gemm_sm90.cu (grouped_gemm_sm90.cu)."""
        coop = self.schedule == "cooperative"
        fp8 = element == "e4m3"
        array = "PtrArray" if grouped else ""
        mainloop = f"cutlass::gemm::Kernel{array}TmaWarpSpecialized" + ("Cooperative" if coop else "Pingpong")
        if fp8 and fast_accum:
            mainloop += "FP8FastAccum"
        if fp8 and not fast_accum and self.tile_k > 128:
            # CUTLASS promotes FP8 wgmma accumulators to fp32 every 4 MMAs (128 k-elements); a k-tile
            # must hold a divisor of that many MMAs.
            raise ValueError(f"FP8 without fast accumulation needs tile_k <= 128, got {self.tile_k} ({self.key()})")
        if grouped and self.stream_k:
            raise ValueError("grouped GEMMs use CUTLASS's grouped persistent scheduler, not stream-K")
        # The swapped kernel's output [N, M] column-major is our [M, N] row-major.
        layout = "cutlass::layout::ColumnMajor" if self.swap_ab else "cutlass::layout::RowMajor"
        return {
            "TILE_M": str(self.tile_m), "TILE_N": str(self.tile_n), "TILE_K": str(self.tile_k),
            "CLUSTER_M": str(self.cluster_m), "CLUSTER_N": str(self.cluster_n),
            "ELEMENT_A": ELEMENTS[element], "ELEMENT_B": ELEMENTS[element],
            "ELEMENT_D": CPP_TYPES[dtype_name(out_dtype)], "LAYOUT_D": layout,
            "ELEMENT_C": CPP_TYPES[epilogue.source_dtype] if epilogue.source_dtype else "void",
            "MAINLOOP_SCHEDULE": mainloop,
            "EPILOGUE_SCHEDULE": (f"cutlass::epilogue::{array}TmaWarpSpecialized"
                                  + ("Cooperative" if coop else ("Pingpong" if grouped else ""))),
            "TILE_SCHEDULER": "cutlass::gemm::StreamKScheduler" if self.stream_k else "void",
            "EVT_TYPE": epilogue.evt_type, "EVT_ARGS": epilogue.args_expr,
            **({"WGRAD": "true" if wgrad else "false"} if grouped else {}),
        }


def nvfp4_cpp(config: GemmConfig, *, act_dtype, out_dtype, epilogue: Emitted, grouped: bool = False) -> dict[str, str]:
    """Template parameters for cutlass_kernels/templates/nvfp4_gemm_sm90.cu (nvfp4_grouped_gemm_sm90.cu):
    the swapped NVFP4-weight kernel (weights on the tile's M side, 128 rows x 64 K per tile: one
    scale atom each)."""
    if (config.tile_m, config.tile_k) != (128, 64) or not config.swap_ab:
        raise ValueError(f"NVFP4 kernels use swapped 128 x tile_n x 64 tiles, got {config.key()}")
    coop = config.schedule == "cooperative"
    array = "PtrArray" if grouped else ""
    params = {
        "TILE_M": "128", "TILE_N": str(config.tile_n), "TILE_K": "64",
        "CLUSTER_M": str(config.cluster_m), "CLUSTER_N": str(config.cluster_n),
        "ELEMENT_B": CPP_TYPES[dtype_name(act_dtype)], "ELEMENT_D": CPP_TYPES[dtype_name(out_dtype)],
        "MAINLOOP_SCHEDULE": f"cutlass::gemm::Kernel{array}TmaWarpSpecialized" + ("Cooperative" if coop else "Pingpong"),
        "EPILOGUE_SCHEDULE": (f"cutlass::epilogue::{array}TmaWarpSpecialized"
                              + ("Cooperative" if coop else ("Pingpong" if grouped else ""))),
        "EVT_TYPE": epilogue.evt_type, "EVT_ARGS": epilogue.args_expr,
    }
    if not grouped:
        params["TILE_SCHEDULER"] = "cutlass::gemm::StreamKScheduler" if config.stream_k else "void"
    return params


def _pow2_at_least(x: int, lo: int, hi: int) -> int:
    p = lo
    while p < x and p < hi:
        p *= 2
    return p


def default_config(M: int, N: int, K: int, *, fast_accum: bool = True, num_sms: int = 132) -> GemmConfig:
    """Tile heuristic for FP8 on H100/H200, from perf/gemm_sweep.py --tune on an H200.

    - Decode-like M (<= 64): swap A and B so the weight's N fills the 64-row wgmma side and
      the few tokens sit on the narrow side (16/32/64); ping-pong overlaps one warpgroup's
      epilogue with the other's mainloop. (Stream-K lost here: its fix-up costs more than
      the idle SMs it fills.)
    - M <= 128: ping-pong 64x128.
    - M <= 1024 with a wide N and moderate K: ping-pong 64x256 (more tiles in flight).
    - Otherwise cooperative 128x256 when M and N are both large, else 128x128, in clusters
      of 2 along M (TMA multicast of B).
    - Full (non-fast) accumulation never uses 256-wide tiles: CUTLASS's FP8 promotion keeps a
      second fp32 accumulator and a 128x256 tile spills (0.3x of the 128x128 tile, measured).
    """
    if M <= 64:
        tile_n = _pow2_at_least(M, 16, 64)
        deep_k = fast_accum and tile_n <= 32  # full accumulation promotes every 128 k: tile_k <= 128
        return GemmConfig(64, tile_n, 256 if deep_k else 128, 1, 1, "pingpong", swap_ab=True)
    if M <= 128:
        return GemmConfig(64, 128, 128, 1, 1, "pingpong")
    if not fast_accum:
        # Full accumulation keeps a second fp32 accumulator per thread: 256-wide tiles spill.
        return GemmConfig(128, 128, 128, 2, 1, "cooperative")
    if M <= 1024 and N >= 5120 and K <= 8192:
        return GemmConfig(64, 256, 128, 1, 1, "pingpong")
    if M >= 2048 and N >= 2048:
        return GemmConfig(128, 256, 128, 2, 1, "cooperative")
    return GemmConfig(128, 128, 128, 2, 1, "cooperative")


def default_grouped_config(T: int, G: int, N: int, K: int, *, fast_accum: bool = True) -> GemmConfig:
    """Tile heuristic for grouped (MoE) FP8 GEMMs from the mean rows per expert, T / G (known on
    the host from shapes alone), from perf/grouped_sweep.py --tune on an H200:
      < 2 rows per expert: swap-AB ping-pong 64x16 (the weights stream once, tokens ride along);
      <= 16: swap-AB cooperative 128x32;  <= 64: ping-pong 64x128;
      more: cooperative 128x256 (128x128 with full accumulation, where 256-wide tiles spill)."""
    per_group = T / max(G, 1)
    if per_group < 2:
        return GemmConfig(64, 16, 256 if fast_accum else 128, 1, 1, "pingpong", swap_ab=True)
    if per_group <= 16:
        return GemmConfig(128, 32, 128, 1, 1, "cooperative", swap_ab=True)
    if per_group <= 64:
        return GemmConfig(64, 128, 128, 1, 1, "pingpong")
    return GemmConfig(128, 256 if fast_accum else 128, 128, 1, 1, "cooperative")


def default_wgrad_config(N: int, K: int, *, fast_accum: bool = False) -> GemmConfig:
    """Grouped weight-gradient GEMM: each group's output dW_g [N, K] is large; the reduction
    (tokens) is whatever the routing gave it. Cooperative 128x128 (128x256 with fast accumulation)."""
    return GemmConfig(128, 256 if fast_accum and K >= 256 else 128, 128, 1, 1, "cooperative")


# Grouped alternatives perf/grouped_sweep.py --tune times beside the heuristic (fast accumulation).
GROUPED_TUNING_CANDIDATES = [
    GemmConfig(64, 16, 256, 1, 1, "pingpong", swap_ab=True), GemmConfig(64, 32, 256, 1, 1, "pingpong", swap_ab=True),
    GemmConfig(64, 64, 128, 1, 1, "pingpong", swap_ab=True), GemmConfig(128, 32, 128, 1, 1, "cooperative", swap_ab=True),
    GemmConfig(128, 64, 128, 1, 1, "cooperative", swap_ab=True), GemmConfig(64, 128, 128, 1, 1, "pingpong"),
    GemmConfig(128, 128, 128, 1, 1, "cooperative"), GemmConfig(128, 256, 128, 1, 1, "cooperative"),
    GemmConfig(128, 128, 128, 2, 1, "cooperative"),
]


# What `python -m scalemm build` compiles ahead of time: one kernel per heuristic branch,
# bf16 output, the default epilogue, both accumulation modes.
def default_build_set() -> list[tuple[GemmConfig, bool]]:
    return sorted({(default_config(M, N, 4096, fast_accum=fa), fa) for M in (1, 16, 32, 64, 128, 4096)
                   for N in (1024, 4096, 16384) for fa in (True, False)}, key=lambda c: (c[0].key(), c[1]))


# Alternatives perf/gemm_sweep.py --tune times against the heuristic's pick (one per bucket).
TUNING_CANDIDATES = {
    "decode": [GemmConfig(64, 16, 256, 1, 1, "pingpong", swap_ab=True),
               GemmConfig(64, 32, 256, 1, 1, "pingpong", swap_ab=True),
               GemmConfig(64, 32, 128, 1, 1, "pingpong", swap_ab=True),
               GemmConfig(64, 64, 128, 1, 1, "pingpong", swap_ab=True),
               GemmConfig(128, 16, 128, 1, 1, "cooperative", swap_ab=True)],
    "mid": [GemmConfig(64, 128, 128, 1, 1, "pingpong"), GemmConfig(128, 128, 128, 1, 1, "cooperative", swap_ab=True),
            GemmConfig(64, 256, 128, 1, 1, "pingpong")],
    "large": [GemmConfig(128, 128, 128, 2, 1, "cooperative"), GemmConfig(128, 256, 128, 2, 1, "cooperative"),
              GemmConfig(128, 256, 128, 1, 2, "cooperative"), GemmConfig(64, 256, 128, 1, 1, "pingpong"),
              GemmConfig(128, 256, 128, 2, 1, "cooperative", swizzle=2),
              GemmConfig(128, 256, 128, 2, 1, "cooperative", swizzle=4),
              GemmConfig(128, 256, 128, 2, 1, "cooperative", raster="m", swizzle=2),
              GemmConfig(128, 256, 128, 2, 1, "cooperative", raster="n", swizzle=2)],
}


# (N, K) of real models' linear layers (nn.Linear weight [N, K]): what perf/gemm_sweep.py times.
MODEL_LINEAR_SHAPES = {
    "llama3-8b.qkv": (6144, 4096), "llama3-8b.o": (4096, 4096),
    "llama3-8b.gate_up": (28672, 4096), "llama3-8b.down": (4096, 14336),
    "llama3-70b.qkv": (10240, 8192), "llama3-70b.o": (8192, 8192),
    "llama3-70b.gate_up": (57344, 8192), "llama3-70b.down": (8192, 28672),
    "dsv3.q_a": (1536, 7168), "dsv3.q_b": (24576, 1536), "dsv3.kv_a": (576, 7168), "dsv3.o": (7168, 16384),
    "dsv3.shared_gate_up": (4096, 7168), "dsv3.shared_down": (7168, 2048),
    "qwen3-30b-a3b.qkv": (5120, 2048), "qwen3-30b-a3b.o": (2048, 4096),
    "qwen3-235b-a22b.qkv": (9216, 4096), "qwen3-235b-a22b.expert_gate_up": (3072, 4096),
}
DECODE_M = (1, 16, 32, 64, 128)
PREFILL_M = (1024, 4096, 16384)


def sweep_points(max_flop: float = 4e12):
    """(label, M, N, K) over the model shapes, plus the 8192^3 anchor; skips points over max_flop."""
    pts = [(f"{name}", M, N, K) for name, (N, K) in MODEL_LINEAR_SHAPES.items()
           for M in DECODE_M + PREFILL_M if 2 * M * N * K <= max_flop]
    return pts + [("square", 8192, 8192, 8192)]


def sweep_configs() -> list[tuple[GemmConfig, bool]]:
    """(config, fast_accum) pairs the heuristic picks over the sweep."""
    return sorted({(default_config(M, N, K, fast_accum=fa), fa) for _, M, N, K in sweep_points() for fa in (True, False)},
                  key=lambda c: (c[0].key(), c[1]))
