"""Hopper (sm_90a: H100, H200) kernel configurations and heuristics.

A `GemmConfig` is one SM90 CUTLASS kernel shape as data: tile, cluster, schedule -> template
parameters (cutlass_kernels/templates/*_sm90.cu) and a name. The heuristics pick one from the
problem's shape alone: `default_config` (dense FP8), `default_grouped_config` /
`default_wgrad_config` (grouped FP8), `default_nvfp4_config` / `default_nvfp4_grouped_config`
(NVFP4 weights). `tuning_candidates` lists what `scalemm.tune` times against the heuristic's pick;
the winners it stores (scalemm/tuning.py) take precedence over the heuristic, and an explicit
`config=` over both.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from ... import abi
from ...epilogues import CPP_TYPES, Emitted, dtype_name
from ...formats.layout import SF_TILE_ROWS, round_up
from .shapes import sweep_points

ARCH = "sm90"          # the name scalemm.arch.kernel_arch gives a compute capability 9.0 GPU
NVCC_ARCH = "sm90a"    # the KernelSpec target (nvcc -gencode) these configs' kernels build for
REFERENCE_SMS = 132    # H100 SXM / H200: the GPUs the heuristics' thresholds were measured on

ELEMENTS = {"e4m3": "cutlass::float_e4m3_t", "bf16": "cutlass::bfloat16_t"}
# The tile widths (N) of CUTLASS's standard SM90 wgmma atoms. Any other multiple of 8 (40, 48, 72, 80, 112, 144, 160,
# 224, ...) is one of its extended shapes, off by default: without them its builder gives such a width the largest
# standard atom that divides it (m64n32 for 160 / 224, m64n16 for 48 / 80, m64n8 for 40 / 72). The kernels of those
# widths (every template's PRELUDE) are compiled with the define before any CUTLASS header. The define does not change
# the atoms of the standard widths (perf/NOTES.md); it is left out of their kernels all the same, so their sources and
# cache keys stay as they were.
STANDARD_MMA_WIDTHS = (8, 16, 32, 64, 96, 128, 192, 256)
EXTENDED_MMA_DEFINE = "#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED\n"


def mma_prelude(tile_n: int) -> str:
    """The source a dense kernel of this tile width starts with: the extended-shapes define, or nothing."""
    return "" if tile_n in STANDARD_MMA_WIDTHS else EXTENDED_MMA_DEFINE


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
    # Full (non-fast) FP8 accumulation only (dense and grouped): 0 = CUTLASS's promotion (a second accumulator as large as
    # the tile's); n >= 1 = scalemm's mainloop promoting N in n slices (scalemm/sm90/fp8_promotion.hpp),
    # which keeps 128x256 tiles within the registers.
    promotion_chunks: int = 0
    # With promotion_chunks even: two temporaries, so that a chunk's adds run while the next chunk's wgmmas do; with
    # one chunk: two temporaries of the whole tile, alternating over pairs of k-tiles (fp8_promotion.hpp; twice the
    # temporaries' registers).
    promotion_overlap: bool = False
    # Run-time scheduling knobs (not compiled in, not part of the kernel): tile raster order
    # ("auto" = CUTLASS's heuristic, "m", "n") and the swizzle width of the tile order (1, 2, 4, 8).
    raster: str = "auto"
    swizzle: int = 1

    def __post_init__(self):
        if self.schedule not in ("cooperative", "pingpong"):
            raise ValueError(f"schedule must be 'cooperative' or 'pingpong', got {self.schedule!r}")
        if self.schedule == "cooperative" and self.tile_m % 128:
            raise ValueError("the cooperative schedule needs tile_m a multiple of 128")
        if self.tile_m % 64 or self.tile_n % 8 or not 0 < self.tile_n <= 256 or self.tile_k % 64:
            raise ValueError(f"unsupported tile {self.tile_m}x{self.tile_n}x{self.tile_k}")
        if self.stream_k and self.schedule != "cooperative":
            raise ValueError("stream-K needs the cooperative schedule")
        if self.promotion_chunks < 0 or (self.promotion_chunks and (self.tile_k != 128 or self.tile_n % (
                8 * self.promotion_chunks))):
            raise ValueError(f"promotion_chunks={self.promotion_chunks} needs tile_k = 128 and tile_n a multiple of "
                             f"8 x promotion_chunks, got tile {self.tile_m}x{self.tile_n}x{self.tile_k}")
        if self.promotion_overlap and (self.promotion_chunks < 1 or self.promotion_chunks % 2 and self.promotion_chunks != 1):
            raise ValueError(f"promotion_overlap needs promotion_chunks = 1 (k-tile pairs) or an even count, got "
                             f"{self.promotion_chunks}")
        if self.raster not in ("auto", "m", "n") or self.swizzle not in (1, 2, 4, 8):
            raise ValueError(f"raster must be auto/m/n and swizzle 1/2/4/8, got {self.raster!r}, {self.swizzle}")

    def key(self) -> str:
        """The compiled kernel's name part (run-time knobs excluded)."""
        s = f"t{self.tile_m}x{self.tile_n}x{self.tile_k}_c{self.cluster_m}x{self.cluster_n}_{self.schedule[:4]}"
        return (s + ("_swap" if self.swap_ab else "") + ("_sk" if self.stream_k else "")
                + (f"_pc{self.promotion_chunks}" if self.promotion_chunks else "")
                + ("o" if self.promotion_overlap else ""))

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
        if element not in ELEMENTS:
            raise ValueError(f"element must be one of {tuple(ELEMENTS)}, got {element!r}")
        coop = self.schedule == "cooperative"
        fp8 = element == "e4m3"
        array = "PtrArray" if grouped else ""
        mainloop = f"cutlass::gemm::Kernel{array}TmaWarpSpecialized" + ("Cooperative" if coop else "Pingpong")
        if fast_accum and not fp8:
            raise ValueError(f"fast accumulation is an FP8 wgmma mode; {element} kernels take fast_accum=False")
        if self.promotion_chunks and (fast_accum or not fp8):
            raise ValueError(f"promotion_chunks is for FP8 GEMMs with full accumulation ({self.key()})")
        if fp8 and fast_accum:
            mainloop += "FP8FastAccum"
        if self.promotion_chunks:
            overlap = ", true" if self.promotion_overlap else ""
            mainloop = f"scalemm::sm90::Fp8ChunkedPromotion<{mainloop}FP8FastAccum, {self.promotion_chunks}{overlap}>"
        if fp8 and not fast_accum and self.tile_k > 128:
            # CUTLASS promotes FP8 wgmma accumulators to fp32 every 4 MMAs (128 k-elements); a k-tile
            # must hold a divisor of that many MMAs.
            raise ValueError(f"FP8 without fast accumulation needs tile_k <= 128, got {self.tile_k} ({self.key()})")
        if grouped and self.stream_k:
            raise ValueError("grouped GEMMs use CUTLASS's grouped persistent scheduler, not stream-K")
        # The swapped kernel's output [N, M] column-major is our [M, N] row-major.
        layout = "cutlass::layout::ColumnMajor" if self.swap_ab else "cutlass::layout::RowMajor"
        return {
            "PRELUDE": mma_prelude(self.tile_n) + epilogue.includes,
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
    scale atom each). act_dtype: a float dtype (name), or "nvfp4" (W4A4: the mainloop decodes the activations'
    codes and scales itself; nvfp4_decodes_activations says which configs can).
    swap_ab=False (dense only): tokens on A, W4A4 with the NVFP4 activations on the tile's M side decoded in
    registers and the weights' exact bf16 decode as B (act_dtype "bf16", the B operand's type; nvfp4_mainloop.hpp)."""
    if (config.tile_m, config.tile_k) != (128, 64) or config.tile_n % 16:
        raise ValueError(f"NVFP4 kernels use 128 x tile_n x 64 tiles, tile_n a multiple of 16, got {config.key()}")
    if not config.swap_ab and (grouped or act_dtype == "nvfp4" or dtype_name(act_dtype) != "bf16"):
        raise ValueError(f"NVFP4 kernels with tokens on A (swap_ab=False) are dense, with the weights decoded to bf16 "
                         f"as B, got {config.key()} with {act_dtype} B{' (grouped)' if grouped else ''}")
    x4 = act_dtype == "nvfp4"
    if x4 and not nvfp4_decodes_activations(config):
        raise ValueError(f"NVFP4 activations are decoded by cooperative kernels with tile_n a multiple of 128, got "
                         f"{config.key()}")
    coop = config.schedule == "cooperative"
    array = "PtrArray" if grouped else ""
    params = {
        "PRELUDE": mma_prelude(config.tile_n),
        "TILE_M": "128", "TILE_N": str(config.tile_n), "TILE_K": "64",
        "CLUSTER_M": str(config.cluster_m), "CLUSTER_N": str(config.cluster_n),
        "ELEMENT_B": "scalemm::sm90::Nvfp4Activations" if x4 else CPP_TYPES[dtype_name(act_dtype)],
        "ELEMENT_D": CPP_TYPES[dtype_name(out_dtype)],
        "MAINLOOP_SCHEDULE": f"cutlass::gemm::Kernel{array}TmaWarpSpecialized" + ("Cooperative" if coop else "Pingpong"),
        "EPILOGUE_SCHEDULE": (f"cutlass::epilogue::{array}TmaWarpSpecialized"
                              + ("Cooperative" if coop else ("Pingpong" if grouped else ""))),
        "EVT_TYPE": epilogue.evt_type, "EVT_ARGS": epilogue.args_expr,
    }
    if not grouped:
        params["TILE_SCHEDULER"] = "cutlass::gemm::StreamKScheduler" if config.stream_k else "void"
        params["TOKENS_ON_A"] = "false" if config.swap_ab else "true"
    return params


def nvfp4_decodes_activations(config: GemmConfig) -> bool:
    """Whether the NVFP4 kernel of `config` can take NVFP4 activations (W4A4) and decode them in its
    mainloop (nvfp4_mainloop.hpp): cooperative, token tiles of whole 128-row scale atoms. Other W4A4
    configs run on the activations decoded to bf16 by a separate pass."""
    return config.schedule == "cooperative" and config.tile_n % 128 == 0


def nvfp4_mainloop_decode_config(config: GemmConfig) -> GemmConfig:
    """The default config's stand-in for W4A4 with activation_decode="mainloop": itself where its mainloop can decode
    NVFP4 activations, else the same tile with its tokens widened to 128 or 256 (the default's 64-, 160-, 192- and
    224-wide token tiles cannot: their token tiles are not whole 128-row scale atoms)."""
    if nvfp4_decodes_activations(config):
        return config
    return replace(config, tile_n=128 if config.tile_n <= 128 else 256, schedule="cooperative")


def _check_sms(num_sms) -> None:
    if isinstance(num_sms, bool) or not isinstance(num_sms, int) or num_sms <= 0:
        raise ValueError(f"num_sms must be a positive int, got {num_sms!r}")


def _pow2_at_least(x: int, lo: int, hi: int) -> int:
    p = lo
    while p < x and p < hi:
        p *= 2
    return p


# M > 128, cooperative tiles 128 x tile_n, fast accumulation: a tile's time relative to a 128x128 one
# (default_config weighs these against the waves each width needs). 192: 1.5x the work at ~1.12x the
# efficiency (first fitted to scalemm.tune's winners over the sweep's prefill points on an H100, with
# CUTLASS's full accumulation); 256: 2x the work at ~1.15x.
TILE_COST = {128: 1.0, 192: 1.34, 256: 1.74}
# The same for full accumulation above 128 tokens (full_tile_config: the chunked promotion, overlapped at 128 and
# 192 wide), fitted on an H100 by `perf/fp8_prefill_model.py --full --points both --fit`: a grid search on the
# sweep's 53 prefill points, checked on 61 points of four models outside the sweep, all in one run (with the bias
# leaf as gemm.bias_leaf then planned it, none on the 192 and 256 wide kernels): sweep 0.981x -> 0.996x of torch
# rowwise in full accumulation, held-out models 0.994x -> 1.018x; the new costs alone 0.985x / 1.008x (the values
# before: 1.28, 1.70; perf/NOTES.md, "The full-accumulation rule refitted"). Refitted again after the 128-wide kernel
# changed (one chunk over k-tile pairs, no bias leaf): the same values; the rule 1.015x / 1.024x in that run.
TILE_COST_FULL = {128: 1.0, 192: 1.25, 256: 1.72}


def _tile_n_by_waves(M: int, N: int, num_sms: int, widths, tile_cost=TILE_COST) -> int:
    """The tile width (of `widths`) with the least waves x tile_cost for an M x N output of 128-row tiles;
    ties go to the narrower tile."""
    def cost(tile_n):
        return -(-(-(-M // 128) * -(-N // tile_n)) // num_sms) * tile_cost[tile_n]
    return min(sorted(widths), key=cost)


# PREFILL_MIN_TOKENS+ tokens (fitted at 1024+), fast accumulation: each candidate's time as waves x (a x K + b) + c
# microseconds, where waves = ceil(tiles / SMs) with the M tiles rounded up to whole clusters (a cluster of 2 along M is
# scheduled whole, so an odd count runs one more). a, b, c were fitted per kernel (least squares in relative error) to
# its own times at perf/gemm_sweep.py's 53 prefill points on an H100, all kernels in one run (`perf/fp8_prefill_model.py
# --points both --fit --extra ...`, perf/results/h100/fp8_prefill_160/), and checked on 61 points of four models outside
# the sweep. A ping-pong tile is one consumer warpgroup's: its epilogue runs while the other warpgroup's mainloop keeps
# the tensor cores busy, so its per-wave cost b is a tenth of the cooperative tile's of the same width at the same per-K
# cost a. Ping-pong wins where K is short (the epilogue a larger share of a tile) and the cooperative 128x256 where its
# waves fit better. The 160 and 224 widths (CUTLASS's extended wgmma shapes: mma_prelude) fill N = 2880, 5120,
# 5760, 6400, ... in whole tiles: with them the rule went from 0.994x to 1.008x of torch._scaled_mm rowwise on the sweep
# (min 0.903 -> 0.932) and from 0.997x to 1.012x held out (min 0.939 -> 0.950) in that run (perf/NOTES.md, "FP8 prefill:
# 160- and 224-wide tiles"). Only the order of the predicted times matters; the absolute values are that GPU's.
PREFILL_TILE_MODEL = (
    # (config, a: us per wave per unit of K, b: us per wave, c: us)
    (GemmConfig(128, 128, 128, 2, 1, "pingpong"), 3.4926e-3, 0.193, -1.108),
    (GemmConfig(128, 160, 128, 2, 1, "pingpong"), 4.1523e-3, 0.242, -0.058),
    (GemmConfig(128, 192, 128, 2, 1, "pingpong"), 4.9025e-3, 0.538, -0.680),
    (GemmConfig(128, 128, 128, 2, 1, "cooperative"), 3.4506e-3, 2.200, -3.101),
    (GemmConfig(128, 192, 128, 2, 1, "cooperative"), 4.9036e-3, 3.201, -4.223),
    (GemmConfig(128, 224, 128, 2, 1, "cooperative"), 5.7197e-3, 3.689, -5.075),
    (GemmConfig(128, 256, 128, 2, 1, "cooperative"), 6.5259e-3, 3.945, -5.198),
)


def tile_count(config: GemmConfig, M: int, N: int) -> int:
    """Tiles of an M x N output under `config` (swap-AB puts N on the tile's M side), each side's tiles rounded up to
    whole clusters (a cluster is scheduled whole)."""
    def whole_clusters(extent, tile, cluster):
        tiles = -(-extent // tile)
        return -(-tiles // cluster) * cluster
    rows, cols = (N, M) if config.swap_ab else (M, N)
    return whole_clusters(rows, config.tile_m, config.cluster_m) * whole_clusters(cols, config.tile_n, config.cluster_n)


def tile_waves(config: GemmConfig, M: int, N: int, num_sms: int) -> int:
    """Rounds of `num_sms` tiles an M x N output takes under `config` (tile_count)."""
    return -(-tile_count(config, M, N) // num_sms)


def predicted_prefill_us(config: GemmConfig, a: float, b: float, c: float, M: int, N: int, K: int,
                         num_sms: int) -> float:
    """PREFILL_TILE_MODEL's time for one of its entries."""
    return tile_waves(config, M, N, num_sms) * (a * K + b) + c


def prefill_config(M: int, N: int, K: int, num_sms: int, model=PREFILL_TILE_MODEL) -> GemmConfig:
    """The entry of `model` (PREFILL_TILE_MODEL's form) with the least predicted time (ties: the first), ping-pong
    only with more tiles than SMs: a ping-pong CTA hides one warpgroup's epilogue behind the other's mainloop only when
    it has two tiles (in the run the model was fitted on, its one pick with fewer, 128x160 ping-pong for DeepSeek-V3's
    kv_a at 4096 tokens, 128 tiles, took 1.09x the cooperative 128x192's time)."""
    entries = [e for e in model if e[0].schedule != "pingpong" or tile_count(e[0], M, N) > num_sms]
    return min(entries, key=lambda e: predicted_prefill_us(*e, M, N, K, num_sms))[0]


# PREFILL_MIN_TOKENS+ tokens, fast accumulation, outputs of at most one wave of 128x128 tiles (narrow layers: unfused k
# / v projections, MLA's down projections; or 1024 tokens of N <= 2048): (the tile where 128x128 would busy at most half
# the SMs, the tile otherwise), both cooperative in clusters of 1. With one tile per CTA nothing hides a CTA's prologue
# and epilogue, and the model's clusters of 2 lost there: on an H100 (`perf/fp8_prefill_model.py --points narrow`, 32
# points of 8 such layers at 1024-8192 tokens, perf/results/h100/fp8_prefill_narrow/), over torch._scaled_mm rowwise,
# 128x128 in clusters of 1 ran 0.96-1.01x where the model's 128x128 in clusters of 2 ran 0.81-0.96x, and 128x64 in
# clusters of 1 ran 1.18-1.46x at 1024 tokens (32-64 tiles of 128x128) where the model ran 0.94-0.98x (in clusters of 2:
# 1.11-1.29x; 128x96 behind both).
PREFILL_ONE_WAVE_TILES = (GemmConfig(128, 64, 128, 1, 1, "cooperative"), GemmConfig(128, 128, 128, 1, 1, "cooperative"))


def one_wave_prefill_config(M: int, N: int, num_sms: int) -> GemmConfig | None:
    """For an M x N output of at most num_sms tiles of 128x128: PREFILL_ONE_WAVE_TILES' 128x64 where 128x128 tiles would
    number at most num_sms / 2 (and the 128x64 ones fit one wave), else its 128x128; None for larger outputs
    (PREFILL_TILE_MODEL decides)."""
    narrow, square = PREFILL_ONE_WAVE_TILES
    tiles = tile_count(square, M, N)
    if tiles > num_sms:
        return None
    return narrow if 2 * tiles <= num_sms and tile_count(narrow, M, N) <= num_sms else square


# 17-128 tokens, fast accumulation: the time of a tile half as wide along the tokens relative to the full-width one
# (two token tiles instead of one, so twice the tiles). Fitted to perf/gemm_sweep.py --tune over the sweep's 18 layers
# at 32, 64 and 128 tokens on an H100 and an H200 (perf/results/h100/fp8_decode_tiles/): two tiles win where one
# leaves SMs idle or a costly last wave, and lose where both land in the same waves.
TWO_TOKEN_TILES_COST = 0.575
# (one token tile, two token tiles) for up to 32, 64 and 128 tokens: the weight's N on the 64-row side (swap-AB),
# except ping-pong 64x128 (tokens on its M side, two 64-row halves) for one tile of 65-128 tokens
_DECODE_TILES = {
    32: (GemmConfig(64, 32, 256, 1, 1, "pingpong", swap_ab=True), GemmConfig(64, 16, 256, 1, 1, "pingpong", swap_ab=True)),
    64: (GemmConfig(64, 64, 128, 1, 1, "pingpong", swap_ab=True), GemmConfig(64, 32, 256, 1, 1, "pingpong", swap_ab=True)),
    128: (GemmConfig(64, 128, 128, 1, 1, "pingpong"), GemmConfig(64, 64, 128, 1, 1, "pingpong", swap_ab=True)),
}


def _token_tiles_config(M: int, N: int, num_sms: int) -> GemmConfig:
    """17-128 tokens, fast accumulation: one token tile, or two half as wide when ceil(tiles / SMs) x
    TWO_TOKEN_TILES_COST says they finish sooner (ceil(N / 64) tiles against twice as many). On the points of its
    fit (18 layers at 32, 64 and 128 tokens, H100 and H200): geomean 1.02-1.09x over always one tile, 0.99-1.06x over
    always two; per point at least 0.96x of the better of the two except one (0.87x: Llama-3-8B gate_up, N = 28672,
    at 64 tokens on the H100, where two tiles won by 1.15x but only 1.04x on the H200)."""
    def waves(tiles: int) -> int:
        return -(-tiles // num_sms)
    one, two = _DECODE_TILES[32 if M <= 32 else 64 if M <= 64 else 128]
    tiles = -(-N // 64)
    return two if waves(2 * tiles) * TWO_TOKEN_TILES_COST < waves(tiles) else one


# 33-128 tokens, fast accumulation (thirty-seventh session, H100, perf/results/h100/fp8_decode_widths/, README.txt
# there): tiles with the tokens on the wgmma's M side (ping-pong 64 x w, one warpgroup per 64-token tile, or
# cooperative 128 x w for 65-128 tokens in one tile) and the weights on its N side, w any of DECODE_WIDTHS, so that the
# output is one wave of tiles. cuBLASLt's per-tensor kernels do the same (perf/cublas_kernels.py --points decode: 72 x
# 64 tiles for N = 9216 at 64 tokens, 144 x 64 at 128). Two things decide against _token_tiles_config's picks:
# - busy SMs: N = 6144 at 64 tokens runs 96 tiles of 64 rows (73% of the SMs) there, 128 of 48 rows here;
# - the token tiles of one weight tile must be about equally full. A weight tile is read from HBM once only while the
#   CTAs of its token tiles stream it side by side; a CTA with a nearly empty token tile loads fewer bytes per k-step,
#   runs ahead, and the others then miss in L2. At 65-96 tokens the previous picks (a full and a nearly empty tile of
#   64) ran 1.2-1.85x slower than at 128 tokens (Llama-3-405B qkv 212 us at 65 tokens, 123 at 128), whatever the raster
#   order or swizzle. The imbalance of a config: (w + token rows of a full tile) / (w + token rows of the last tile).
# So: one wave of the narrowest width (at least DECODE_ONE_TILE_MIN_WIDTH with one token tile;
# DECODE_TWO_TILES_MIN_WIDTH with two, whose imbalance is at most DECODE_NEW_MAX_IMBALANCE, else one cooperative
# 128-token tile), where it busies DECODE_BUSY_MARGIN more of the SMs than _token_tiles_config's swap-AB pick, or
# (65-128 tokens) that pick's imbalance exceeds DECODE_OLD_MAX_IMBALANCE and the one-wave tile busies
# DECODE_UNBALANCED_MIN_BUSY of the SMs. At 65-128 tokens _token_tiles_config's ping-pong 64x128 (tokens on M) is
# replaced only for imbalance: on long-K layers of N = 5120-7168 its fewer, wider tiles beat the one-wave narrower ones
# at 76-100 tokens (0.83-0.95x for those in check run 1). Fitted on 228 points (33 layers at 48 / 64 / 96 / 128 tokens,
# 8 of them at 12 token counts from 33 to 128): 1.052x the previous rule's speed, 1.24-1.40x at 65-80 tokens, min
# 0.951x; then 16 other layers at 11 other token counts (check run 1, which set the two 65-128-token changes above:
# in-sample for them) 1.022x; 12 more layers at 10 token counts (check run 2, out of sample): README.txt there.
DECODE_WIDTHS = (32, 40, 48, 56, 64, 72, 80, 96, 112, 128, 144, 160, 192, 224, 256)
DECODE_ONE_TILE_MIN_WIDTH = 48
DECODE_TWO_TILES_MIN_WIDTH = 64
DECODE_NEW_MAX_IMBALANCE = 1.5
DECODE_OLD_MAX_IMBALANCE = 1.4
DECODE_BUSY_MARGIN = 0.05
# ... and an imbalance alone counts only where the one-wave tile busies this much of the SMs: on narrow layers
# (DeepSeek-V3 kv_a / q_a, N = 576 / 1536, and N = 2048) at 65-80 tokens its 10-38 tiles ran 0.80-0.95x of the swap-AB
# pick's 18-64 (narrow_65_88.log there; set after that run, which is in-sample for it)
DECODE_UNBALANCED_MIN_BUSY = 1 / 3
DECODE_ONE_WAVE_MIN_TOKENS = 33


def busy_fraction(config: GemmConfig, M: int, N: int, num_sms: int) -> float:
    """The SMs' mean occupancy over the waves of `config`'s tiles: tiles / (waves x num_sms)."""
    return tile_count(config, M, N) / (tile_waves(config, M, N, num_sms) * num_sms)


def token_imbalance(config: GemmConfig, M: int) -> float:
    """(weight rows + token rows) of a full tile over those of the last token tile's (1: one token tile, or all full):
    how much faster the CTA of the last token tile streams a weight tile than its neighbours (the comment before
    DECODE_WIDTHS)."""
    weights, tokens = (config.tile_m, config.tile_n) if config.swap_ab else (config.tile_n, config.tile_m)
    if M <= tokens:
        return 1.0
    last = M - (token_tile_count(config, M) - 1) * tokens
    return (weights + tokens) / (weights + last)


def token_tile_count(config: GemmConfig, M: int) -> int:
    """Token tiles of M tokens under `config` (the tokens sit on the kernel's N side with swap-AB, on its M side
    otherwise)."""
    return -(-M // (config.tile_n if config.swap_ab else config.tile_m))


def one_wave_decode_config(M: int, N: int, num_sms: int) -> GemmConfig | None:
    """33-128 tokens: the one-wave tile of the comment before DECODE_WIDTHS (ping-pong 64 x w or, for 65-128 tokens,
    cooperative 128 x w), or None where no width of DECODE_WIDTHS puts the output in one wave."""
    if M <= 64:
        candidates = [GemmConfig(64, w, 128, 1, 1, "pingpong") for w in DECODE_WIDTHS if w >= DECODE_ONE_TILE_MIN_WIDTH]
    else:
        candidates = [c for c in (GemmConfig(64, w, 128, 1, 1, "pingpong") for w in DECODE_WIDTHS)
                      if c.tile_n >= DECODE_TWO_TILES_MIN_WIDTH and token_imbalance(c, M) <= DECODE_NEW_MAX_IMBALANCE]
        candidates += [GemmConfig(128, w, 128, 1, 1, "cooperative") for w in DECODE_WIDTHS
                       if w >= DECODE_TWO_TILES_MIN_WIDTH]
    return next((c for c in candidates if tile_count(c, M, N) <= num_sms), None)


# 33-128 tokens, fast accumulation (thirty-eighth session, H100, perf/results/h100/fp8_decode_clusters/, README.txt
# there): where the pick's two token tiles are unbalanced, the same tile in clusters of 2 along the tokens, so that
# TMA multicasts each weight tile to both token tiles' CTAs and they stream it in step. ncu confirmed the comment
# before DECODE_WIDTHS: Llama-3-405B qkv (302 MB of weights) read 519 MB from DRAM at 65 tokens in the swap-AB 64x64
# kernel, 312 MB at 128 tokens, 306 MB at 65 tokens in clusters of 2 along the tokens. Fitted on 247 points (49
# layers of 19 models at 65-128 tokens): 1.022x, the 92 changed points 1.060x (up to 1.62x: Llama-3-70B gate_up at 65
# tokens). Below DECODE_CLUSTER_MIN_IMBALANCE the clusters gained 0.97-1.05x; on small layers (their weights held in
# L2) with fewer tiles than half the SMs they lost up to 0.92x. Checked on 12 other layers at 9 other token counts:
# 1.011x with half the SMs as the bound, the 31 changed points 1.042x, min 0.94x (GLM-4-9B qkv, 72 tiles); the bound
# was then raised to DECODE_CLUSTER_MIN_BUSY (in-sample for that run: 1.012x, 28 points 1.050x, min 0.975x).
# Then 33-64 tokens (swap-AB 64x32 picks with two token tiles), the bounds unchanged: 61 layers at 33 / 40 / 48 / 56
# tokens, 20 changed points 1.062x, min 0.985x (up to 1.20x at 33 tokens). At 17-32 tokens two 16-token tiles never
# reach the imbalance bound.
DECODE_CLUSTER_MIN_IMBALANCE = 1.25
DECODE_CLUSTER_MIN_BUSY = 0.6


def token_cluster(config: GemmConfig) -> GemmConfig:
    """`config` in clusters of 2 along the tokens (the weights' tile multicast to both token tiles' CTAs): along the
    kernel's N with swap-AB, along its M otherwise."""
    return replace(config, cluster_m=1, cluster_n=2) if config.swap_ab else replace(config, cluster_m=2, cluster_n=1)


def _decode_config(M: int, N: int, num_sms: int) -> GemmConfig:
    """17-128 tokens, fast accumulation: _token_tiles_config's pick, or from DECODE_ONE_WAVE_MIN_TOKENS the one-wave
    tile (one_wave_decode_config) where the comment before DECODE_WIDTHS says it wins; in clusters of 2 along the
    tokens where the comment before DECODE_CLUSTER_MIN_IMBALANCE says so."""
    pick = _token_tiles_config(M, N, num_sms)
    if M < DECODE_ONE_WAVE_MIN_TOKENS:
        return pick
    wave = one_wave_decode_config(M, N, num_sms)
    if wave is not None:
        busier = busy_fraction(wave, M, N, num_sms) >= busy_fraction(pick, M, N, num_sms) + DECODE_BUSY_MARGIN
        if M > 64 and not pick.swap_ab:  # ping-pong 64x128 with the tokens on M: kept unless unbalanced
            busier = False
        unbalanced = (M > 64 and token_imbalance(pick, M) > DECODE_OLD_MAX_IMBALANCE
                      and tile_count(wave, M, N) >= DECODE_UNBALANCED_MIN_BUSY * num_sms)
        pick = wave if busier or unbalanced else pick
    if (token_imbalance(pick, M) >= DECODE_CLUSTER_MIN_IMBALANCE
            and tile_count(pick, M, N) >= DECODE_CLUSTER_MIN_BUSY * num_sms):
        return token_cluster(pick)
    return pick


def decode_tiles() -> tuple[GemmConfig, ...]:
    """The tiles the decode rules pick beside the swap-AB token tiles of _DECODE_TILES: one_wave_decode_config's
    (ping-pong 64 x w, cooperative 128 x w), the ping-pong 64 x w (two token tiles) and swap-AB 64x64 / 64x32 in
    clusters of 2 along the tokens (token_cluster), and few_tokens_config's cooperative 128x16. The GPU tests run
    each; build set 'tests' prebuilds them."""
    ping = [GemmConfig(64, w, 128, 1, 1, "pingpong") for w in DECODE_WIDTHS if w >= DECODE_ONE_TILE_MIN_WIDTH]
    coop = [GemmConfig(128, w, 128, 1, 1, "cooperative") for w in DECODE_WIDTHS if w >= DECODE_TWO_TILES_MIN_WIDTH]
    clustered = [token_cluster(c) for c in ping if c.tile_n >= DECODE_TWO_TILES_MIN_WIDTH]
    clustered += [token_cluster(GemmConfig(64, 64, 128, 1, 1, "pingpong", swap_ab=True)),
                  token_cluster(GemmConfig(64, 32, 256, 1, 1, "pingpong", swap_ab=True))]
    return (*ping, *coop, *clustered, GemmConfig(128, 16, 256, 1, 1, "cooperative", swap_ab=True))


# Up to 16 tokens, fast accumulation (thirty-eighth session, same results): the swap-AB 64x16 tiles, except where their
# count passes one wave by at most DECODE_TAIL_MAX_FRACTION of the SMs. Their last wave then streams a few 64-row
# tiles with the other SMs idle; the cooperative 128x16 tile streams the same rows in one wave of half as many CTAs.
# 134 timings at 1 and 16 tokens (49 layers): at 144 and 160 tiles (N = 9216 / 10240: 4 layers) the 128-row tile
# ran 1.02-1.13x (geomean 1.065x); in one wave or less 0.75-1.02x (0.956x); at 192 tiles and more 0.94-1.17x (0.983x;
# the one outlier Phi-3-mini gate_up at 1 token, 0.99x at 16). Not measured at 17-32 tokens.
DECODE_TAIL_MAX_FRACTION = 0.25


def few_tokens_config(N: int, num_sms: int) -> GemmConfig:
    """Fast accumulation up to 16 tokens: the comment before DECODE_TAIL_MAX_FRACTION."""
    tiles = -(-N // 64)
    if num_sms < tiles <= num_sms * (1 + DECODE_TAIL_MAX_FRACTION):
        return GemmConfig(128, 16, 256, 1, 1, "cooperative", swap_ab=True)
    return GemmConfig(64, 16, 256, 1, 1, "pingpong", swap_ab=True)


# Fast accumulation from this many tokens (on REFERENCE_SMS SMs): one_wave_prefill_config, else (below 1024 tokens, wide
# N and moderate K) ping-pong 64x256, else PREFILL_TILE_MODEL. Was 1024 until they were timed at 256-768 tokens (H100,
# two runs, perf/results/h100/fp8_mid_tokens/): 1.15-1.17x of torch rowwise where the earlier rules for 129-1023 tokens
# ran 0.96-0.97x, never more than 3% slower than them at a point. 129-255 tokens keep those rules: at 144-192 tokens the
# 128-row tiles of these rules ran up to 1.6x slower than them (the second row of tiles mostly empty).
PREFILL_MIN_TOKENS = 256


def default_config(M: int, N: int, K: int, *, fast_accum: bool = True, num_sms: int = REFERENCE_SMS) -> GemmConfig:
    """Tile heuristic for FP8 on H100/H200, from perf/gemm_sweep.py --tune on an H200.

    - Decode-like M (<= 128): swap A and B so the weight's N fills the 64-row wgmma side and
      the few tokens sit on the narrow side: one 64 x 16 x 256 tile up to 16 tokens (the cooperative
      128 x 16 x 256 where the 64-row tiles pass one wave by a little: `few_tokens_config`); above, one
      token tile (64 x 32 x 256, 64 x 64 x 128, or ping-pong 64x128 unswapped at 65-128 tokens) or
      two half as wide, whichever needs fewer waves at TWO_TOKEN_TILES_COST (`_decode_config`: two
      tiles on the small-N layers and where one leaves a costly last wave). Ping-pong overlaps one
      warpgroup's epilogue with the other's mainloop. (Stream-K lost here: its fix-up costs more than
      the idle SMs it fills.)
    - Fast accumulation from here (full accumulation: the last point):
    - From PREFILL_MIN_TOKENS (256), outputs of at most one wave of 128x128 tiles: the cooperative 128x128 in
      clusters of 1, or 128x64 where 128x128 would busy at most half the SMs (`one_wave_prefill_config`: with one
      tile per CTA a cluster partner costs more than its multicast saves).
    - Otherwise, below 1024 tokens with a wide N and moderate K (N >= 5120, K <= 8192): ping-pong 64x256 in clusters
      of 1 (more tiles in flight; the prefill model's clusters of 2 lost up to 1.4x there at 384 tokens, where 3 tiles
      of 128 tokens run as 4).
    - Otherwise, from 256 tokens: the ping-pong 128 x (128, 160, 192) or cooperative 128 x (128, 192, 224, 256) tile
      (clusters of 2 along M) with the least time by PREFILL_TILE_MODEL (waves x a per-K and a per-wave cost;
      ping-pong only with more tiles than SMs: `prefill_config`). Ping-pong hides each tile's epilogue behind the
      other warpgroup's mainloop. H100, the rule as the default: 1.010x of torch._scaled_mm rowwise over the sweep's
      53 prefill points and 1.016x at 61 held-out points (perf/NOTES.md, "160- and 224-wide tiles"). The one-wave
      rule and the model were fitted and chosen on 1024+ tokens, then timed at 256-768 tokens (perf/NOTES.md, "FP8 at
      256-768 tokens"): over 104 points of the sweep's and the narrow layers there, 1.15x of torch rowwise where the
      earlier rules for 129-1023 tokens ran 0.96x, and at no point more than 3% slower than them.
    - 129-255 tokens otherwise: the cooperative 128 x (128, 192 or 256) tile with the least waves x its TILE_COST (a
      wider tile only where it saves enough waves), in clusters of 2 along M (TMA multicast of B).
    - Full accumulation at 17-128 tokens: swap-AB cooperative 128 x 32/64 with the chunked promotion (ping-pong
      has one warpgroup in the mainloop, so nothing fills the tensor cores while it promotes).
    - Full (non-fast) accumulation above 128 tokens: scalemm's chunked promotion (`full_accumulation`;
      CUTLASS's keeps a second accumulator as large as the tile, so its 128x256 spills) on cooperative
      128 x (128, 192, 256) tiles by the waves x TILE_COST_FULL rule (`full_tile_config`; H100, one run: 1.015x
      of torch._scaled_mm rowwise in full accumulation over the sweep's 53 prefill points and 1.024x over 61
      held-out points, where CUTLASS's 128x128 / 128x192 gave 0.83x / 0.88x on the sweep; perf/NOTES.md), in
      clusters of 2, or of 1 for one wave of tiles or an odd count of 128-token tiles below 1024 tokens
      (`full_cluster_m`). Ping-pong 64x256 is not used there (0.6x of the cooperative 128x256).
    - `num_sms`: the M threshold of the prefill rule (PREFILL_MIN_TOKENS) was measured on 132 SMs, and what decides
      it is the number of tiles per SM; it scales with num_sms / 132, so a GPU with fewer SMs (H100 PCIe
      114, H20 78, a MIG slice) moves to the prefill tiles sooner. The waves of every rule count its SMs.
    """
    _check_sms(num_sms)
    if not fast_accum and 16 < M <= 128:
        # swap-AB cooperative 128 x 32/64 with the chunked promotion: more tiles (32-wide) while they fit in
        # one wave (perf/results/h100/fp8_full_accum/small_m.*: 1.01-1.32x of torch rowwise at 32-64 tokens on
        # the qkv / gate_up / 4096^2 layers, where the ping-pong tiles ran 0.85-1.30x; 0.76-1.23x at 128 tokens,
        # was 0.68-0.95x)
        wide = M > 64 or -(-N // 128) * -(-M // 32) > num_sms
        return full_accumulation(GemmConfig(128, 64 if wide else 32, 128, 1, 1, "cooperative", swap_ab=True))
    if M <= 16:  # full accumulation promotes every 128 k: tile_k <= 128
        return few_tokens_config(N, num_sms) if fast_accum else GemmConfig(64, 16, 128, 1, 1, "pingpong", swap_ab=True)
    if M <= 128:  # fast accumulation here (full accumulation: above)
        return _decode_config(M, N, num_sms)
    per_sm = num_sms / REFERENCE_SMS
    if not fast_accum:  # chunked promotion (full_accumulation); ping-pong 64x256 lost there (0.6x of 128x256)
        tile_n = _tile_n_by_waves(M, N, num_sms, tuple(TILE_COST_FULL), TILE_COST_FULL)
        return full_tile_config(tile_n, full_cluster_m(M, N, tile_n, num_sms))
    mid_pingpong = (GemmConfig(64, 256, 128, 1, 1, "pingpong") if M < 1024 * per_sm and N >= 5120 and K <= 8192
                    else None)
    if M >= PREFILL_MIN_TOKENS * per_sm:
        return one_wave_prefill_config(M, N, num_sms) or mid_pingpong or prefill_config(M, N, K, num_sms)
    return mid_pingpong or GemmConfig(128, _tile_n_by_waves(M, N, num_sms, (128, 192, 256)), 128, 2, 1, "cooperative")


# The NVFP4 dispatch rules that every call without a config asks (default_nvfp4_skinny_config, default_nvfp4_config,
# nvfp4_w4a16_on_a, default_nvfp4_tokens_on_a_config, default_nvfp4_w4a16_on_a_config) are pure functions of the
# shape and this module's constants: cached per shape, as an eager call on a narrow layer asked them for ~60 us of host
# time (2-core CPU machine) before. Code that edits one of the constants at run time must call clear_dispatch_caches()
# (rule A/B scripts).
_per_shape = functools.lru_cache(maxsize=4096)


def clear_dispatch_caches() -> None:
    """Forget the cached NVFP4 dispatch decisions (_per_shape), after this module's constants were edited."""
    for f in (default_nvfp4_config, default_nvfp4_tokens_on_a_config, nvfp4_w4a16_on_a, default_nvfp4_w4a16_on_a_config,
              default_nvfp4_skinny_config):
        f.cache_clear()


@_per_shape
def default_nvfp4_config(M: int, N: int, K: int, *, num_sms: int = REFERENCE_SMS) -> GemmConfig:
    """Tiles for the swapped NVFP4 kernel: 128 weight rows x tile_n tokens x 64, cooperative.
    Few tokens get a narrow tile_n (up to 128 tokens: one token tile, but see below); more tokens take 256-wide
    tiles (0.95-0.97x of cuBLAS bf16 at 4096 tokens on an H100, against 0.72x for 128), or 160 / 192 / 224 where those
    hold the tokens in as many tiles, except where those leave SMs idle or a short last wave
    (_nvfp4_mid_tokens_config). Up to 128 tokens, when the tiles cannot fill the GPU (fewer
    than num_sms), stream-K splits K (1.3-2x faster than data-parallel at decode). At 65-128 tokens with N <= 4096
    two 64-token tiles instead of one of 128 (H100, stream-K both: 2048 x 4096 at 128 tokens 19.7 against 27.5 us, 4096^2 23.7 against 25.2; from 6144 rows on the second
    decode of every weight tile costs more: 0.73-0.82x, perf/results/h100/nvfp4_two_tiles.txt). Stream-K configs take
    the tile raster along M (the weight rows; a run-time knob, the same kernel): 1-3% faster than CUTLASS's own pick
    (along N) at 64 and 128 tokens on three of four layer shapes and within 1% on the fourth, in three H100 runs, and
    equal or faster on all four at 16 and 32 tokens (perf/results/h100/nvfp4_tenth/)."""
    _check_sms(num_sms)
    if M <= 128:
        tile_n = 16 if M <= 16 else 32 if M <= 32 else 64 if M <= 64 or N <= 4096 else 128
        stream_k = -(-N // 128) * -(-M // tile_n) < num_sms
        return _nvfp4_tile(tile_n, stream_k)
    return _nvfp4_mid_tokens_config(M, N, K, num_sms, prefill=M >= NVFP4_STREAM_K_PREFILL_TOKENS)


# W4A4 with the tokens on A (gemm_nvfp4's activation_decode "registers"): the weights go through the bf16 decode pass
# (N x K elements) instead of the activations (M x K), and the kernel decodes the tokens in registers. Taken by
# default from NVFP4_TOKENS_ON_A_MIN_TOKENS tokens where M >= NVFP4_TOKENS_ON_A_RATIO x N (the weights' pass at most
# 1 / RATIO of the activations'). Its tiles are default_nvfp4_config's with the roles exchanged: 128 tokens x tile_n
# weight rows, at least NVFP4_TOKENS_ON_A_MIN_WIDTH wide: the 16- and 32-wide tiles the swapped rule gives up to 32
# "tokens" have never run with the tokens on A on a GPU, so layers of fewer than that many rows keep the pass by
# default (an explicit "registers" runs them on the 64-wide tile, partly empty).
NVFP4_TOKENS_ON_A_MIN_TOKENS = 1024
NVFP4_TOKENS_ON_A_RATIO = 2
NVFP4_TOKENS_ON_A_MIN_WIDTH = 64
NVFP4_TOKENS_ON_A_STREAM_K_MIN_K = 2560  # default_nvfp4_tokens_on_a_config
# The weight-tile widths the tokens-on-A tile narrows to (_fitted_weight_width): the narrowest of these that tiles N
# weight rows in as many tiles as the rule's width (576 rows: 4 x 144, not 4 x 160 with the last one 96 rows full).
# Only widths that have run on a GPU (tests/test_nvfp4_gemm_gpu.py's fitted-width tests); 144 / 208 / 240 are CUTLASS's
# extended wgmma shapes (mma_prelude). H200, perf/results/h200/nvfp4_tokens_on_a/: W4A4 1.025x the unfitted tile's
# speed (1.002-1.086x) at all 15 points it changed of 6 layers at 3000-16384 tokens (widths.log), and 1.022x
# (1.004-1.038x) at all 6 held-out points of 5 other layers (rule.log).
NVFP4_TOKENS_ON_A_WIDTHS = (64, 96, 128, 144, 160, 192, 208, 224, 240, 256)
# W4A16 with the tokens on A (nvfp4_w4a16_on_a): the weights decoded exactly to bf16 by the pass (N x K, a temporary),
# then a bf16 x bf16 GEMM on the tokens-on-A tile, where the tokens-on-A rule holds and the swapped kernel's default is
# data-parallel with token tiles at most this wide: there the swapped kernel decodes each 128-row weight tile for
# few tokens (0.52-0.81x of bf16 at the measured points) or pads the weight rows.
NVFP4_W4A16_ON_A_MAX_TOKEN_TILE = 160
# ... or where the swapped kernel's 128-row weight tiles pad the weight rows by NVFP4_W4A16_ON_A_MIN_ROW_PADDING or
# more (ceil(N / 128) x 128 / N, from NVFP4_W4A16_ON_A_PADDED_MIN_ROWS rows: 256-511 rows can pad that much; the
# fitted tokens-on-A tile pads nothing there, 288 rows in 2 x 144) and a waves model says the tokens on A cost less
# (_w4a16_waves_cost: waves x tile area, a stream-K launch's waves fractional plus
# NVFP4_W4A16_STREAM_K_WAVE_COST). H200, perf/results/h200/nvfp4_tokens_on_a/ (padded.log, flip.log, flip2.log:
# 97 points of 14 layers of 256-511 rows at 2048-24064 tokens, both W4A16 kernels timed in one process):
# - the padding term alone (1.25 from MiniCPM3's kv_a in widths.log, then 1.2 from padded.log: 272-400 rows won
#   on A at all 21 points of 8192-16384 tokens) lost at 11008 and 20480 tokens on 272-320 rows (0.76-0.97x), where
#   the swapped kernel's 128 x 256 tiles fill one or two whole waves without stream-K;
# - with the waves model as its gate: 1.113x the swapped kernel's speed over the 97 points (geomean, the rule's
#   picks), against 1.098x for the term alone and 1.123x for the faster of the two at every point (the model takes
#   the stream-K penalty, 0.5 wave, from these points).
# Held out (held_padded.log: 6 other layers of 264-416 rows and MiniCPM3's kv_a at 9000-28000 tokens, 49 points):
# 1.043x the swapped kernel, the term alone 0.992x, the tile condition alone 1.000x, the faster at every point
# 1.059x; the model overruled the term at 12 points, rightly at all 12 (the swapped kernel 1.00-1.34x faster there);
# it still loses 5-19% at 10240 and 18000 tokens on 264-296 rows, where the tokens on A run stream-K over 1.2 / 2.1
# waves (stream-K on that tile costs more than half a wave there).
# The stream-K penalty went from 0.5 to 0.7 wave in the forty-eighth session (with W4A16's own tile, below): 0.6-0.8
# score the same on every run above (97 points 1.131x, held_dp.log's 36 1.065x), and 0.5 had picked the tokens on A
# wrongly at three of held_padded.log's points (10240 tokens on 264-288 rows, 0.81-0.95x), where the swapped kernel's
# tiles fill one whole wave and the tokens on A run stream-K over 1.03-1.27 waves. Held out (held_wave.log: the 15
# points of 5 layers of 264-288 rows at 8704 / 10112 / 10624 tokens where 0.5 and 0.7 differ, timed before the
# change): the swapped kernel was 1.09-1.30x faster at all 15, so 0.7 takes 1.19x there (held_padded.log now 1.052x).
# DeepSeek-V3's kv_a (576 rows, 1.11) lost on A at 3000, 6144 and 8192 tokens (stream_k_w4a16_on_a.log), hence the
# row bound above it. Layers of fewer than 256 rows were never timed on A with bf16 activations (the weights' pass is
# then a launch of its own for a few microseconds of GEMM): not taken there.
NVFP4_W4A16_ON_A_MIN_ROW_PADDING = 1.2
NVFP4_W4A16_STREAM_K_WAVE_COST = 0.7
NVFP4_W4A16_ON_A_PADDED_MIN_ROWS = 256
# W4A16's tokens-on-A tile (default_nvfp4_w4a16_on_a_config) drops the stream-K that default_nvfp4_tokens_on_a_config
# takes where its weight tiles are at most NVFP4_W4A16_ON_A_DP_MAX_WIDTH wide and its data-parallel last wave would be
# more than NVFP4_W4A16_ON_A_DP_LAST_WAVE full. H200, perf/results/h200/nvfp4_tokens_on_a/ (flip.log, flip2.log: the
# same tile with stream-K flipped, W4A16 on A, one process): on 272-320 rows (two weight tiles of 144 / 160) data-
# parallel was 1.02-1.21x faster at all 16 points of 1.42-2.42 waves (last wave 0.42-0.50 full: 12000, 12288, 12672
# and 20480 tokens) and 0.92-0.95x at three of four at 1.30 waves (0.30 full, 11008 tokens); on 400 rows (208-wide
# tiles) stream-K stayed faster at 4 of 5 (0.83-0.92x). Held out (held_dp.log: 4 other widths and depths of 264-320
# rows at 11520-28672 tokens, last waves 0.36-0.50 full): 1.125x at the 20 points it changed, faster at 17 (1.02-1.30x;
# 0.89-0.99x at three of the four at 1.36 waves). W4A4 shares the tile and keeps its stream-K (flip.log's W4A4
# timings were not taken; W4A4's longer per-tile k-loop, decoding the tokens, was not re-measured without it).
NVFP4_W4A16_ON_A_DP_MAX_WIDTH = 160
NVFP4_W4A16_ON_A_DP_LAST_WAVE = 0.35


def nvfp4_tokens_on_a(M: int, N: int, K: int) -> bool:
    """Whether W4A4 on the CUTLASS kernel runs with the tokens on A by default (NVFP4_TOKENS_ON_A_RATIO, from
    NVFP4_TOKENS_ON_A_MIN_WIDTH weight rows)."""
    return M >= NVFP4_TOKENS_ON_A_MIN_TOKENS and M >= NVFP4_TOKENS_ON_A_RATIO * N and N >= NVFP4_TOKENS_ON_A_MIN_WIDTH


@_per_shape
def default_nvfp4_tokens_on_a_config(M: int, N: int, K: int, *, num_sms: int = REFERENCE_SMS) -> GemmConfig:
    """The tokens-on-A kernel's tile: default_nvfp4_config's for N "tokens" on M rows, unswapped, except that
    stream-K's last-wave bound is the prefill one (NVFP4_STREAM_K_LAST_WAVE_PREFILL) where the real token count M
    is NVFP4_STREAM_K_PREFILL_TOKENS or more and K at least NVFP4_TOKENS_ON_A_STREAM_K_MIN_K, else the other one,
    whatever N (reading N as the tokens left 1.4-1.5 waves without stream-K on layers of fewer than 1024 rows).
    H200, perf/results/h200/nvfp4_tokens_on_a/ (stream_k_w4a16_on_a.log, changed.log): with the bound from the real
    token count alone, stream-K ran 1.00-1.17x as fast (geomean 1.071x) at all 11 points it changed with
    K >= 2560 (four narrow layers at 1.4-3.4 waves: DeepSeek-V3's kv_a, Qwen2.5-7B's and GLM-4-9B's k/v, MiniCPM3's
    kv_a) and 0.85-0.99x at all 8 with K <= 2048 (DeepSeek-V2-Lite's kv_a, Llama-3.2-1B's k/v, Qwen2-0.5B's q); the
    K bound was set from those, and is not yet checked on other layers. It also takes stream-K away (not measured
    either way) from layers of 1024 rows or more with K < 2560, and from explicit "registers" calls of fewer than 1024
    tokens, wherever their last wave is 0.3-0.5 full below 8 waves."""
    _check_sms(num_sms)
    if N <= 128:
        cfg = default_nvfp4_config(N, M, K, num_sms=num_sms)
    else:
        prefill = M >= NVFP4_STREAM_K_PREFILL_TOKENS and K >= NVFP4_TOKENS_ON_A_STREAM_K_MIN_K
        cfg = _nvfp4_mid_tokens_config(N, M, K, num_sms, prefill=prefill)
    return replace(cfg, tile_n=_fitted_weight_width(N, max(cfg.tile_n, NVFP4_TOKENS_ON_A_MIN_WIDTH)), swap_ab=False)


def _fitted_weight_width(N: int, tile_n: int) -> int:
    """The narrowest of NVFP4_TOKENS_ON_A_WIDTHS, up to tile_n, that tiles N weight rows in as many tiles as tile_n."""
    return next(w for w in NVFP4_TOKENS_ON_A_WIDTHS if w == tile_n or (w < tile_n and -(-N // w) == -(-N // tile_n)))


@_per_shape
def nvfp4_w4a16_on_a(M: int, N: int, K: int, *, num_sms: int = REFERENCE_SMS) -> bool:
    """Whether W4A16 (bf16 activations) on the CUTLASS kernel runs with the tokens on A by default: the weights'
    exact bf16 decode, then a bf16 x bf16 GEMM on default_nvfp4_tokens_on_a_config's tile (NVFP4_W4A16_ON_A_MAX_TOKEN_TILE).
    H200 (perf/results/h200/nvfp4_tokens_on_a/, stream_k_w4a16_on_a.log and widths.log): at the 11 points of the two
    runs where this holds, 1.15x the swapped kernel's speed (0.98-1.45x: DeepSeek-V3 kv_a at 4096 tokens 0.77x ->
    0.88x of bf16, Qwen2.5-7B k/v at 2048-4096 tokens, MiniCPM3 kv_a); where the swapped kernel ran wider or
    stream-K tiles the tokens on A lost at 35 of 45 points. Held out (rule.log: 18 points of 12 other narrow layers at
    2048-8192 tokens): 1.066x (0.93-1.36x, below 1.0x at 4: MiniCPM3 q_a at 3000 tokens, Qwen2-0.5B q at 2048,
    0.93x; two layers of 256 rows at 8192 tokens, 0.98x / 1.00x). Also on A where the rule holds, the swapped kernel
    would pad the weight rows by NVFP4_W4A16_ON_A_MIN_ROW_PADDING or more and _w4a16_waves_cost says the tokens on A
    cost less (see the constants: MiniCPM3 kv_a at 8192-16384 tokens 0.61-0.74x -> 0.66-0.89x of bf16)."""
    if not nvfp4_tokens_on_a(M, N, K):
        return False
    swapped = default_nvfp4_config(M, N, K, num_sms=num_sms)
    if not swapped.stream_k and swapped.tile_n <= NVFP4_W4A16_ON_A_MAX_TOKEN_TILE:
        return True
    if N < NVFP4_W4A16_ON_A_PADDED_MIN_ROWS or _weight_row_padding(N) < NVFP4_W4A16_ON_A_MIN_ROW_PADDING:
        return False
    on_a = default_nvfp4_w4a16_on_a_config(M, N, K, num_sms=num_sms)
    return _w4a16_waves_cost(on_a, M, N, num_sms) < _w4a16_waves_cost(swapped, M, N, num_sms)


@_per_shape
def default_nvfp4_w4a16_on_a_config(M: int, N: int, K: int, *, num_sms: int = REFERENCE_SMS) -> GemmConfig:
    """W4A16's tile with the tokens on A: default_nvfp4_tokens_on_a_config's, data-parallel where that takes stream-K
    on weight tiles at most NVFP4_W4A16_ON_A_DP_MAX_WIDTH wide whose data-parallel last wave would be more than
    NVFP4_W4A16_ON_A_DP_LAST_WAVE full (see the constants)."""
    cfg = default_nvfp4_tokens_on_a_config(M, N, K, num_sms=num_sms)
    last = _last_wave_fill(tile_count(cfg, M, N), num_sms)
    if cfg.stream_k and cfg.tile_n <= NVFP4_W4A16_ON_A_DP_MAX_WIDTH and not 0 < last <= NVFP4_W4A16_ON_A_DP_LAST_WAVE:
        return replace(cfg, stream_k=False, raster="auto")
    return cfg


def _w4a16_waves_cost(cfg: GemmConfig, M: int, N: int, num_sms: int) -> float:
    """nvfp4_w4a16_on_a's model of a launch's time for an M x N output under `cfg`: its waves (tile_waves; a stream-K
    launch's fractional ones plus NVFP4_W4A16_STREAM_K_WAVE_COST) x its tile's area."""
    if cfg.stream_k:
        waves = tile_count(cfg, M, N) / num_sms + NVFP4_W4A16_STREAM_K_WAVE_COST
    else:
        waves = tile_waves(cfg, M, N, num_sms)
    return waves * cfg.tile_m * cfg.tile_n


def _weight_row_padding(N: int) -> float:
    """How much the swapped kernel's weight tiles, one scale tile of SF_TILE_ROWS = 128 rows each (the mainloop's
    kScaleAtomRows), pad N weight rows: ceil(N / 128) x 128 / N."""
    return round_up(N, SF_TILE_ROWS) / N


# Above 128 tokens (perf/results/h100/nvfp4_mid_tokens/, H100, 48 points of 8 layer shapes at 192-1024 tokens): a wave of
# 128 x n tiles takes about a x K + b whatever n's share of it holds tokens (K = 4096: ~26 / 31 / 44 us for n = 64 /
# 128 / 256), so where 128x256 tiles would leave SMs idle a narrower tile filling one wave is faster, up to K of
# NVFP4_ONE_WAVE_MAX_K (longer K: stream-K over 128x256 tiles was faster); and where fewer than
# NVFP4_STREAM_K_MAX_WAVES waves of 128x256 tiles end in a last wave at most NVFP4_STREAM_K_LAST_WAVE full, stream-K
# evens the waves. Over those points: 1.055x the previous rule (always 128x256, stream-K below one wave), min 0.995x.
# Held out (70 points of 14 other layers at other token counts): 1.076x, min 0.937x, the two losses (0.94-0.95x) at
# 10.2 waves, where the rule without the wave bound took stream-K: the bound was set from them after that run.
# Two refinements (thirty-fourth session, H100, perf/results/h100/nvfp4_narrow/: the saved timings above and narrow
# layers such as DeepSeek-V3's kv_a / q_a, 576 / 1536 x 7168, at 1024-16384 tokens):
# - from NVFP4_STREAM_K_PREFILL_TOKENS tokens stream-K takes last waves up to NVFP4_STREAM_K_LAST_WAVE_PREFILL full:
#   at 0.39-0.45 it was 1.05-1.16x faster at all five such points of four shapes from 1024 tokens (6144 x 4096,
#   14336 x 4096, 1536 x 7168, 576 x 7168 / 5120); below 1024 tokens one shape lost 11-13% there (28672 x 4096 at
#   384 tokens, a half-empty token tile), so 0.3 stays;
# - stream-K below one wave runs 128-token tiles where the 128x256 tiles would number at most num_sms /
#   NVFP4_STREAM_K_NARROW and hold at most NVFP4_STREAM_K_NARROW_K elements of K per SM: each tile's K is split over
#   fewer SMs, with half as large partial sums to fix up. At 0.36 wave and more 128x256 was faster (0.84-0.97x);
#   below it, 1.09-1.73x at 24 points of K 4096-16384 (rule_ab_run1.txt there), but 0.88-0.98x where each SM's share
#   of K was 3500-4000 (3584 x 18944 at 160 tokens, 4096 x 14336 at 192-256, 1024 x 16384 at 1024).
# Held out (rule_ab.txt there: k / v and MLA projections of nine other models at 192-12288 tokens, every point where
# the rules differ, same process): W4A16 1.41x the previous rule's speed (min 1.05x, 32 points), W4A4 1.35x (min
# 0.97x); the sweep's five changed points 1.05-1.42x.
NVFP4_ONE_WAVE_MAX_K = 6144
NVFP4_STREAM_K_LAST_WAVE = 0.3
NVFP4_STREAM_K_LAST_WAVE_PREFILL = 0.5
NVFP4_STREAM_K_PREFILL_TOKENS = 1024
NVFP4_STREAM_K_MAX_WAVES = 8
NVFP4_STREAM_K_NARROW = 4
NVFP4_STREAM_K_NARROW_K = 3072
# Token-tile widths (thirty-sixth session, H100, perf/results/h100/nvfp4_mid_widths/, README.txt there). A token count
# that is not a multiple of the tile width leaves the last token tile partly empty, computed whole (384 tokens in two
# tiles of 256 compute 512). So every 128x256 pick takes the narrowest of NVFP4_WIDE_TOKEN_WIDTHS with as many token
# tiles (_fitted_width: 2 x 192 for 384 tokens, 1 x 160 for 129-160): the same tiles and waves, a quarter fewer MMAs;
# on 86 points of 17 layers at 160-896 tokens 1.22x the 256-wide pick's speed (min 1.09x). A one-wave 256 pick takes
# the narrowest wide width whose tiles still fit one wave (a wave costs less the narrower its tiles: Llama-3-8B o at
# 640 tokens, 4 x 160 in 128 tiles, 1.19x over 3 x 224 in 96); and with K above NVFP4_ONE_WAVE_MAX_K, where stream-K
# ran, one wave of the narrowest wide width whose tiles busy NVFP4_ONE_WAVE_LONG_K_FILL of the SMs (DeepSeek-V3 kv_a,
# 576 x 7168, at 4096 tokens: 130 tiles of 128x160 1.39x faster than stream-K over 80 of 128x256; Kimi-K2 q_a at 2048
# tokens: 120 of 128x224, 1.14x). Held out (16 layers of other models at 15 other token counts, 78 changed points):
# W4A16 1.39x, W4A4 1.38x the previous rule's speed, min 1.03x.
NVFP4_WIDE_TOKEN_WIDTHS = (160, 192, 224, 256)  # 160 and 224: CUTLASS's extended wgmma shapes
NVFP4_ONE_WAVE_LONG_K_FILL = 0.9
NVFP4_TOKEN_TILE_FILL = 0.9  # ... where a narrower width's extra token tiles are this full (not 192 tokens in 2 x 160)


def _nvfp4_tile(tile_n: int, stream_k: bool) -> GemmConfig:
    """The swapped NVFP4 kernel's cooperative 128 x tile_n x 64 tile, clusters of 1; stream-K configs raster along the
    weight rows (default_nvfp4_config's docstring)."""
    return GemmConfig(128, tile_n, 64, 1, 1, "cooperative", swap_ab=True, stream_k=stream_k,
                      raster="m" if stream_k else "auto")


def _last_wave_fill(tiles: int, num_sms: int) -> float:
    """How full the last wave of `tiles` tiles on num_sms SMs is, as a fraction of the SMs: 0 when the waves are
    whole (the stream-K rules' measure)."""
    return tiles / num_sms % 1


def _fitted_width(M: int) -> int:
    """The narrowest of NVFP4_WIDE_TOKEN_WIDTHS that tiles M tokens in as many token tiles as 256 does."""
    return next(w for w in NVFP4_WIDE_TOKEN_WIDTHS if -(-M // w) == -(-M // 256))


def _one_wave_width(M: int, rows: int, num_sms: int, fill: float) -> int | None:
    """The narrowest of NVFP4_WIDE_TOKEN_WIDTHS whose tiles (rows x token tiles) fit one wave and busy `fill` of the
    SMs, and whose token tiles hold tokens in NVFP4_TOKEN_TILE_FILL of their columns or are as few as 256's; or None."""
    def fits(w):
        tiles = -(-M // w)
        full = M >= NVFP4_TOKEN_TILE_FILL * tiles * w or tiles == -(-M // 256)
        return full and fill * num_sms <= rows * tiles <= num_sms
    return next((w for w in NVFP4_WIDE_TOKEN_WIDTHS if fits(w)), None)


def _nvfp4_mid_tokens_config(M: int, N: int, K: int, num_sms: int, *, prefill: bool) -> GemmConfig:
    """default_nvfp4_config above 128 tokens: the rule in the comments before NVFP4_ONE_WAVE_MAX_K and
    NVFP4_WIDE_TOKEN_WIDTHS. prefill: whether the call has NVFP4_STREAM_K_PREFILL_TOKENS tokens or more (stream-K's
    last-wave bound; M here, or the tokens-on-A kernel's rows)."""
    rows = -(-N // 128)
    wide = rows * -(-M // 256)
    if wide >= num_sms:
        last = _last_wave_fill(wide, num_sms)
        bound = NVFP4_STREAM_K_LAST_WAVE_PREFILL if prefill else NVFP4_STREAM_K_LAST_WAVE
        return _nvfp4_tile(_fitted_width(M), 0 < last <= bound and wide < NVFP4_STREAM_K_MAX_WAVES * num_sms)
    if K <= NVFP4_ONE_WAVE_MAX_K:
        for tile_n in (256, 128, 64):  # the widest tile that busies half the SMs or more in one wave ...
            tiles = rows * -(-M // tile_n)
            if num_sms <= 2 * tiles <= 2 * num_sms:  # ... then for 256 the narrowest wide one still in one wave
                return _nvfp4_tile(_one_wave_width(M, rows, num_sms, 0.5) if tile_n == 256 else tile_n, False)
    else:
        tile_n = _one_wave_width(M, rows, num_sms, NVFP4_ONE_WAVE_LONG_K_FILL)
        if tile_n is not None:
            return _nvfp4_tile(tile_n, False)
    narrow = NVFP4_STREAM_K_NARROW * wide <= num_sms and wide * K <= NVFP4_STREAM_K_NARROW_K * num_sms
    return _nvfp4_tile(128 if narrow else _fitted_width(M), True)


@dataclass(frozen=True)
class SkinnyConfig:
    """The NVFP4-weight kernel for few tokens (scalemm/sm90/nvfp4_skinny.cuh): mma.sync over 64 weight
    rows per CTA, up to 8 * token_tiles tokens (compiled), K split over `splits` CTAs of one cluster (a
    run-time knob: 0 lets the launcher fit the grid to the GPU's occupancy, 1..SKINNY_MAX_SPLITS fixes it).
    mainloop (compiled), how the weights stream: "stepped" (the default: a ring of chunks in registers
    with no predicates over the chunks inside K, per-lane pointers stepped once per iteration, whole
    128-byte lines fetched into L2), "lean" (the previous default, the measured baseline: the same
    loads addressed from the chunk index; 1.01-1.18x the time on an H100), "wgmma" (W's prepared copy, its
    scales and the bf16/fp16 tokens streamed through a ring in shared memory, one warpgroup wgmma per k16
    step whatever the token count; NVFP4 activations reach it decoded exactly to bf16 by one pass), "resident" (one
    token tile: "stepped" with the CTA's tokens over its split of K held in shared memory, copied, or for NVFP4
    activations decoded once per CTA, before the loop; bit-identical to "stepped"; a split's tokens must fit
    abi.kSkinnyResidentTokenBytes: with splits=0, at the split the launcher picks). perf/NOTES.md has the loops that
    were measured and lost."""
    token_tiles: int = 1
    splits: int = 0
    mainloop: str = "stepped"

    def __post_init__(self):
        if self.token_tiles not in SKINNY_TOKEN_TILES:
            raise ValueError(f"token_tiles must be one of {SKINNY_TOKEN_TILES}, got {self.token_tiles!r}")
        if isinstance(self.splits, bool) or not isinstance(self.splits, int) or not 0 <= self.splits <= SKINNY_MAX_SPLITS:
            raise ValueError(f"splits must be an int in [0, {SKINNY_MAX_SPLITS}] (0: automatic), got {self.splits!r}")
        if not isinstance(self.mainloop, str) or self.mainloop not in SKINNY_MAINLOOPS:
            raise ValueError(f"mainloop must be one of {tuple(SKINNY_MAINLOOPS)}, got {self.mainloop!r}")
        if self.mainloop == "resident" and self.token_tiles != 1:
            raise ValueError(f"mainloop 'resident' holds one token tile (8 tokens), got token_tiles={self.token_tiles}")

    @property
    def max_tokens(self) -> int:
        return 8 * self.token_tiles

    def key(self) -> str:
        return f"skinny_t{self.token_tiles}" + ("" if self.mainloop == SKINNY_DEFAULT_MAINLOOP else f"_{self.mainloop}")

    def label(self) -> str:
        return self.key() + (f"_s{self.splits}" if self.splits else "")

    def compiled(self) -> "SkinnyConfig":
        return replace(self, splits=0)


SKINNY_TOKEN_TILES = (1, 2, 4, 8)         # compiled token tiles of 8 (the MMA's N)
# SkinnyConfig.mainloop -> its constant in nvfp4_skinny.cuh
SKINNY_MAINLOOPS = {"stepped": "kLoopStepped", "lean": "kLoopLean", "wgmma": "kLoopWgmma", "resident": "kLoopResident"}
SKINNY_DEFAULT_MAINLOOP = SkinnyConfig.mainloop
SKINNY_TILE_ROWS = 64  # weight rows per CTA (nvfp4_skinny.cuh's kTileN); the grid holds at most 65535 tiles of them
SKINNY_MAX_SPLITS = abi.kSkinnyMaxSplits  # a portable cluster


def skinny_config_for_tokens(M: int) -> SkinnyConfig | None:
    """The skinny kernel with the fewest 8-token tiles that hold M tokens (None above 64). The launcher
    splits K to fill the GPU from the device's own occupancy (decode streams the weights: every SM must
    have loads in flight), so no SM count is needed here."""
    if M > 8 * SKINNY_TOKEN_TILES[-1]:
        return None
    return SkinnyConfig(next(t for t in SKINNY_TOKEN_TILES if M <= 8 * t))


# NVFP4 activations of up to 8 tokens: the resident loop (decoded once per CTA) where the launcher's split leaves a CTA
# at least this many chunks of K plus one per token (`resident_pays`: the staging is a cost per CTA that grows with
# the tokens, the saving grows with the chunks). H100, 13 layer shapes at 1-8 tokens (perf/NOTES.md, "the resident
# loop"): at 1 token 2-16% faster than the stepped loop from 16 chunks per CTA, -5% to +6% at 7-11; at 8 tokens
# +2% at 19-22 chunks, -5% to 0% at 16.
SKINNY_RESIDENT_MIN_CHUNKS = 12


def resident_pays(tokens: int, chunks_per_split: int) -> bool:
    """Whether the resident loop beats the stepped one for NVFP4 activations (SKINNY_RESIDENT_MIN_CHUNKS)."""
    return chunks_per_split >= SKINNY_RESIDENT_MIN_CHUNKS + tokens


SKINNY_DEFAULT_MAX_TOKENS = 8   # the skinny kernel by default up to here (one token tile, stepped loop), then
SKINNY_WGMMA_ANY_SHAPE_MAX_TOKENS = 16  # its wgmma loop up to here for any shape, up to 32 tokens where
SKINNY_WGMMA_MAX_NK_32 = 1 << 26  # N * K <= this (8192^2 and smaller), and up to 64 tokens where
SKINNY_WGMMA_MAX_NK = 1 << 25    # N * K <= this (6144 x 4096 and smaller), or at 33-64 tokens on larger layers
SKINNY_WGMMA_WIDE_MAX_K = 12288  # with K <= this and N <= SKINNY_WGMMA_WIDE_MAX_N (thirty-fifth session, below);
SKINNY_WGMMA_WIDE_MAX_N = 24576  # the CUTLASS kernel elsewhere
# NVFP4 activations at 9-16 tokens on small layers (N * K <= this): the stepped loop decoding them in its registers
# rather than the bf16 decode pass + the wgmma loop. The pass is a fixed ~1.5-2 us launch; the stepped loop's cost of
# decoding the tokens in every warp grows with N * K (fortieth session, H200, perf/results/h200/nvfp4_w4a4_16/:
# 1.01-1.30x on all 22 layer shapes up to 12 x 2^20 weights at 9-16 tokens, mixed above: 0.91-1.10x up to 2^24,
# 0.74-1.06x beyond; the bound was set after the held-out run, which had 3584 x 3584 at 0.954x just above it. On an H100
# sweep's layers at 16 tokens the same comparison gave 0.97-1.20x inside the bound,
# perf/results/h100/sweeps_2026-11-28b/).
SKINNY_X4_STEPPED_MAX_NK = 12 << 20


# Above 64 tokens: the wgmma loop in blocks of 32 (up to 96 tokens) or 64 tokens side by side, where its CTAs (64 weight
# rows x one block each) number at most SKINNY_BLOCKS_MAX_WAVES x the SMs and the weights it streams over all blocks
# (blocks x N x K elements; L2 serves the repeats) at most SKINNY_BLOCKS_MAX_NK. Fitted on the sweep's 18 layers at
# 65, 128, 192 and 256 tokens (H100, perf/results/h100/nvfp4_token_blocks/, README.txt there): there the CUTLASS
# kernel's few 128-row tiles ran stream-K over long chains of fix-ups (DeepSeek-V3's kv_a at 128 tokens 28 us, 9.7 us
# in two blocks), and lost wherever the blocks' CTAs fit about one and a half waves and stream at most 2^26 weights
# (22 points changed, 1.02-3.9x). On 14 other models' layers at 65-1024 tokens (held out) the 48 changed points ran
# 1.68x the CUTLASS kernel's speed (W4A16; W4A4 1.56x), all but one at 0.98x or more: Kimi-K2's q_a (1536 x 7168)
# at 384 tokens, 6 blocks streaming 66 x 2^20 weights, 0.84x. The bound was lowered to 60 x 2^20 after that run.
SKINNY_BLOCKS_MAX_WAVES = 1.5
SKINNY_BLOCKS_MAX_NK = 60 << 20
SKINNY_BLOCKS_SMALL_MAX_TOKENS = 96  # blocks of 32 tokens up to here (65 tokens: 3 of 32, not a nearly empty 64)


def skinny_block_tiles(M: int) -> int:
    """Above 64 tokens: the 8-token tiles of each block the skinny kernel runs side by side (blocks of 32 tokens up to
    SKINNY_BLOCKS_SMALL_MAX_TOKENS, then of 64)."""
    return 4 if M <= SKINNY_BLOCKS_SMALL_MAX_TOKENS else 8


def skinny_blocks_config(M: int, N: int, K: int, num_sms: int = REFERENCE_SMS) -> SkinnyConfig | None:
    """Above 64 tokens: the skinny kernel's wgmma loop in blocks of tokens, where the comment before
    SKINNY_BLOCKS_MAX_WAVES says it beats the CUTLASS kernel, else None."""
    _check_sms(num_sms)
    tiles = skinny_block_tiles(M)
    blocks = -(-M // (8 * tiles))
    ctas = -(-N // SKINNY_TILE_ROWS) * blocks
    if ctas <= SKINNY_BLOCKS_MAX_WAVES * num_sms and blocks * N * K <= SKINNY_BLOCKS_MAX_NK:
        return SkinnyConfig(tiles, mainloop="wgmma")
    return None


@_per_shape
def default_nvfp4_skinny_config(M: int, N: int, K: int, nvfp4_activations: bool = False,
                                num_sms: int = REFERENCE_SMS) -> SkinnyConfig | None:
    """What a dense NVFP4 GEMM without a config runs: the skinny kernel, or None (the CUTLASS kernel's tiles).
    Measured on an H100 (perf/NOTES.md, "skinny kernel: measured", "the default at 9-16 tokens" and "the
    wgmma main loop"):
    - up to 8 tokens the one-tile kernel (stepped loop, NVFP4 activations decoded in its registers) beat the
      CUTLASS kernel on every measured layer shape, and its wgmma loop by 1.1-1.3x;
    - 9-16 tokens: the wgmma loop on every shape (0.65-0.94x the CUTLASS kernel's time at 16 tokens on seven
      layer shapes, level at 28672 x 8192; 0.75x the stepped loop's at 4096^2);
    - 17-32 tokens with N * K <= 2^26 and 33-64 with N * K <= 2^25: the wgmma loop (at 32 / 64 tokens 11.8 /
      14.6 us at 4096^2 and 14.5 / 18.2 at 6144 x 4096 against the CUTLASS kernel's 17.2 / 18.9 and 18.3 /
      20.3; at 32 tokens 25.3 us at 8192^2 against 29.4, within 3% at 14336 x 4096 and 4096 x 14336); on
      larger layers the CUTLASS kernel (at 64 tokens level at 8192^2 and 1.13-1.18x faster at 14336 x 4096,
      4096 x 14336 and 28672 x 8192, in an earlier session; since: "33-64 tokens also" below);
    - NVFP4 activations above 8 tokens take the same kernels: the wgmma loop and the CUTLASS kernel both read
      them decoded exactly to bf16 by one pass (decoding them in every CTA of the wgmma loop ran up to 2x
      slower than pass + loop; pass + loop against the stepped loop's in-register decode at 16 tokens:
      0.75x the time at 8192^2, 0.92x at 4096 x 14336, within 3% at 4096^2, 2048 x 4096 and 14336 x 4096);
    - NVFP4 activations up to 8 tokens: the resident loop (the tokens decoded once per CTA into shared memory
      instead of in every warp and chunk). The caller keeps it where the launcher's split leaves each CTA enough
      chunks of K (resident_pays) and its tokens fit; else the stepped loop;
    - NVFP4 activations at 9-16 tokens on small layers (N * K <= SKINNY_X4_STEPPED_MAX_NK): the stepped loop, the
      tokens decoded in its registers (no bf16 pass: 1.01-1.30x on an H200 there). The caller asks for NVFP4
      activations only without their quantizer's exact rows (quantize.EXACT_ROWS_MIN / MAX): with them the call
      runs as W4A16 on those rows, with no pass either;
    - 33-64 tokens also where K <= 12288 and N <= 24576 (thirty-fifth session, H100, after the wgmma loop stopped
      copying a partial block's last token row into the rows past it, perf/results/h100/nvfp4_token_blocks/: on
      its 32 layers at 33, 48 and 64 tokens the 18 changed points ran 1.17x the CUTLASS kernel's speed,
      1.06-1.27x; longer K (14336-28672) and wider N (28672) stayed 3-9% faster on the CUTLASS kernel);
    - above 64 tokens: the wgmma loop in blocks of 32 or 64 tokens on small layers (skinny_blocks_config);
    - otherwise the CUTLASS kernel."""
    _check_sms(num_sms)
    if M <= SKINNY_DEFAULT_MAX_TOKENS:
        if nvfp4_activations:
            return SkinnyConfig(1, mainloop="resident")
        return skinny_config_for_tokens(M)
    if nvfp4_activations and M <= SKINNY_WGMMA_ANY_SHAPE_MAX_TOKENS and N * K <= SKINNY_X4_STEPPED_MAX_NK:
        return skinny_config_for_tokens(M)
    if M > 8 * SKINNY_TOKEN_TILES[-1]:
        return skinny_blocks_config(M, N, K, num_sms)
    wide = M > 32 and K <= SKINNY_WGMMA_WIDE_MAX_K and N <= SKINNY_WGMMA_WIDE_MAX_N
    small = wide or N * K <= (SKINNY_WGMMA_MAX_NK_32 if M <= 32 else SKINNY_WGMMA_MAX_NK)
    if M <= SKINNY_WGMMA_ANY_SHAPE_MAX_TOKENS or small:
        return replace(skinny_config_for_tokens(M), mainloop="wgmma")
    return None


def skinny_config_for_groups(T: int, G: int) -> SkinnyConfig | None:
    """The skinny kernel for grouped decode (T rows over G experts): up to 16 rows per expert on average
    (None above), token tiles for 4x the mean (routing is skewed; a group with more rows runs in several
    blocks, each streaming its weights again). What a grouped call without a config runs up to
    GROUPED_SKINNY_MAX_ROWS_PER_EXPERT (default_nvfp4_grouped_skinny_config); above that, explicit config= only."""
    per = -(-T // max(G, 1))
    if per > 16:
        return None
    return SkinnyConfig(next(t for t in SKINNY_TOKEN_TILES if 8 * t >= min(64, 4 * per)))


GROUPED_SKINNY_MAX_ROWS_PER_EXPERT = 4  # grouped calls take the skinny kernel by default up to this mean
GROUPED_SKINNY_WGMMA_MIN_ROWS = 24  # ... with the wgmma main loop from this many rows (T) ...
GROUPED_SKINNY_WGMMA_MIN_EXPERT = 1 << 23  # ... where an expert has at least this many weights (N * K), or T >= 2 G


def default_nvfp4_grouped_skinny_config(T: int, G: int, N: int, K: int) -> SkinnyConfig | None:
    """What a grouped NVFP4 GEMM without a config runs at decode (T rows over G experts of [N, K]): the skinny
    kernel while the experts average at most GROUPED_SKINNY_MAX_ROWS_PER_EXPERT rows (known on the host: T / G),
    else None (the CUTLASS grouped kernel). Its wgmma main loop from GROUPED_SKINNY_WGMMA_MIN_ROWS rows where
    the experts are large (N * K >= GROUPED_SKINNY_WGMMA_MIN_EXPERT) or hold 2 rows each on average, the stepped
    loop otherwise: the wgmma loop's CTAs cost more to start and finish (its ring's prologue, a barrier per
    chunk, for W4A4 the decode pass), which pays off over long weight streams or with more rows per block.
    H100, perf/grouped_sweep.py --phases decode, both loops pinned in one build, DeepSeek-V3 (N * K = 29M and
    15M), Qwen3-30B-A3B (3.1M, 1.6M) and Llama-4-Scout (84M, 42M) experts at 1-64 tokens (60 points, T = 1-512;
    perf/NOTES.md, twelfth session): the stepped loop won below 16 rows but on three Llama-4-Scout points, and at
    16 rows on DeepSeek-V3 and Qwen3 (by 2-14%); from 24 rows the wgmma loop won the large experts (by up to
    22%) and Qwen3 from T = 2 G. This rule takes the slower loop on 9 of the 60 points (those three by 8-31%,
    six by 3-7%), the picked loop 1.3% slower than the faster one on geomean (W4A4 1.1%), where "wgmma from 16
    rows" was 2.2% (W4A4 4.1%). Earlier (seventh session): at 8 rows per expert the CUTLASS kernel was 1.7x
    faster than the skinny kernel."""
    if T > GROUPED_SKINNY_MAX_ROWS_PER_EXPERT * max(G, 1):
        return None
    cfg = skinny_config_for_groups(T, G)
    wgmma = T >= GROUPED_SKINNY_WGMMA_MIN_ROWS and (N * K >= GROUPED_SKINNY_WGMMA_MIN_EXPERT or T >= 2 * G)
    return replace(cfg, mainloop="wgmma") if cfg is not None and wgmma else cfg


def skinny_cpp(config: SkinnyConfig, *, act_dtype, out_dtype, activation: str | None) -> dict[str, str]:
    """Template parameters for cutlass_kernels/templates/nvfp4_skinny_sm90.cu; act_dtype a float dtype (name)
    or "nvfp4"."""
    from ...epilogues import OPS
    act = OPS["identity" if activation in (None, "none") else activation][0]
    x4 = act_dtype == "nvfp4"  # NVFP4 activations (W4A4), decoded in the kernel to bf16 operands
    return {"ELEMENT_X": CPP_TYPES["bf16" if x4 else dtype_name(act_dtype)], "X_NVFP4": "true" if x4 else "false",
            "ELEMENT_D": CPP_TYPES[dtype_name(out_dtype)], "TOKEN_TILES": str(config.token_tiles),
            "MAINLOOP": f"scalemm::sm90::skinny::{SKINNY_MAINLOOPS[config.mainloop]}", "ACTIVATION": f"{act}<float>"}


def default_nvfp4_grouped_config(T: int, G: int, N: int, K: int) -> GemmConfig:
    """Tiles for the grouped NVFP4 kernel from the mean rows per expert (known on the host from shapes alone)."""
    per = T / max(G, 1)
    tile_n = 16 if per <= 16 else 32 if per <= 32 else 64 if per <= 64 else 128 if per <= 128 else 256
    return GemmConfig(128, tile_n, 64, 1, 1, "cooperative", swap_ab=True)


def default_grouped_config(T: int, G: int, N: int, K: int, *, fast_accum: bool = True) -> GemmConfig:
    """Tile heuristic for grouped (MoE) FP8 GEMMs from the mean rows per expert, T / G (known on
    the host from shapes alone), from perf/grouped_sweep.py --tune on an H200 and an H100:
      < 2 rows per expert: swap-AB ping-pong 64x16 (the weights stream once, tokens ride along);
      <= 16: swap-AB cooperative 128x32;
      fast accumulation from 32: ping-pong 128x192 where K <= 4096 (one warpgroup per tile, its epilogue
        hidden behind the other's mainloop), else cooperative 128x256. H100, the tuner's timings at 42 prefill
        points of 7 MoE models (perf/results/h100/fp8_grouped_pingpong/): above 64 rows per expert geomean
        1.374x of torch._scaled_grouped_mm against 1.315x for cooperative 128x256 everywhere (the best
        candidate per point 1.383x); at 32-64 rows 1.034x against 1.000x for ping-pong 64x128;
      otherwise up to 64: ping-pong 64x128;
      more (full accumulation): cooperative 128x256 in scalemm's chunked promotion (1.15-1.20x CUTLASS's 128x128
        on MoE training shapes, H100, perf/fp8_full_accum.py --grouped)."""
    per_group = T / max(G, 1)
    if per_group < 2:
        return GemmConfig(64, 16, 256 if fast_accum else 128, 1, 1, "pingpong", swap_ab=True)
    if per_group <= 16:
        return GemmConfig(128, 32, 128, 1, 1, "cooperative", swap_ab=True)
    if fast_accum and per_group >= 32:
        if K <= 4096:
            return GemmConfig(128, 192, 128, 1, 1, "pingpong")
        return GemmConfig(128, 256, 128, 1, 1, "cooperative")
    if per_group <= 64:
        return GemmConfig(64, 128, 128, 1, 1, "pingpong")
    wide = GemmConfig(128, 256, 128, 1, 1, "cooperative")
    return wide if fast_accum else full_accumulation(wide)


def default_wgrad_config(N: int, K: int, *, fast_accum: bool = False) -> GemmConfig:
    """Grouped weight-gradient GEMM: each group's output dW_g [N, K] is large; the reduction
    (tokens) is whatever the routing gave it. Cooperative 128x256 where K >= 256 (with full accumulation
    in scalemm's chunked promotion: 1.15-1.30x CUTLASS's 128x128 on MoE training shapes, H100,
    perf/fp8_full_accum.py --grouped), else 128x128.
    The 128x256 tile with more than one 128-row tile of N runs in clusters of 2 along N (dW's rows, the kernel's
    M): the pair shares each k-tile of X^T by TMA multicast. H100, same process
    (perf/results/h100/grouped_wgrad_tiles/): full accumulation at 28 expert layers of 7 MoE models (2048 and 8192
    tokens), bit-identical, 1.03-1.26x the cluster of 1, one tie (0.996x, gpt-oss-120b's down at 2048 tokens: 23
    tiles of N, so one cluster half-empty); fast accumulation at 8 layers of 4 models (8192 tokens) 1.03-1.24x.
    Clusters of 4x1, 1x2 and 2x2, and ping-pong 64-row tiles, lost to 2x1. The gain comes with skewed routing
    (many experts of a few dozen tokens, one-k-tile tiles): with 128 uniform groups of 512 tokens the two cluster
    shapes ran alike (609 / 607 us); why was not established. The 128x128 tile (K < 256) was not measured in
    clusters and keeps clusters of 1."""
    wide = K >= 256
    cfg = GemmConfig(128, 256 if wide else 128, 128, 2 if wide and N > 128 else 1, 1, "cooperative")
    return cfg if fast_accum else full_accumulation(cfg)


# Grouped alternatives perf/grouped_sweep.py --tune times beside the heuristic (fast accumulation).
GROUPED_TUNING_CANDIDATES = [
    GemmConfig(64, 16, 256, 1, 1, "pingpong", swap_ab=True), GemmConfig(64, 32, 256, 1, 1, "pingpong", swap_ab=True),
    GemmConfig(64, 64, 128, 1, 1, "pingpong", swap_ab=True), GemmConfig(128, 32, 128, 1, 1, "cooperative", swap_ab=True),
    GemmConfig(128, 64, 128, 1, 1, "cooperative", swap_ab=True), GemmConfig(64, 128, 128, 1, 1, "pingpong"),
    GemmConfig(128, 128, 128, 1, 1, "cooperative"), GemmConfig(128, 256, 128, 1, 1, "cooperative"),
    GemmConfig(128, 128, 128, 2, 1, "cooperative"),
    # between 128 and 256 (with full accumulation grouped_tuning_candidates also adds every cooperative tile
    # with the chunked promotion; chunked 128x192 timed grouped: perf/results/h100/fp8_full_accum/grouped.*)
    GemmConfig(128, 192, 128, 1, 1, "cooperative"),
    # ping-pong 128-row tiles (one warpgroup's tile each: its epilogue overlaps the other's mainloop; the dense
    # prefill rule's winners at short K, perf/results/h100/fp8_prefill_pingpong/)
    GemmConfig(128, 128, 128, 1, 1, "pingpong"), GemmConfig(128, 192, 128, 1, 1, "pingpong"),
    GemmConfig(128, 128, 128, 2, 1, "pingpong"),
]


# What `python -m scalemm build` compiles ahead of time: one kernel per heuristic branch,
# bf16 output, the default epilogue, both accumulation modes.
def default_build_set() -> list[tuple[GemmConfig, bool]]:
    return sorted({(default_config(M, N, 4096, fast_accum=fa), fa) for M in (1, 16, 32, 64, 128, 512, 1024, 4096)
                   for N in (1024, 4096, 16384) for fa in (True, False)}, key=lambda c: (c[0].key(), c[1]))


# Alternatives perf/gemm_sweep.py --tune times against the heuristic's pick (one per bucket).
TUNING_CANDIDATES = {
    "decode": [GemmConfig(64, 16, 256, 1, 1, "pingpong", swap_ab=True),
               GemmConfig(64, 32, 256, 1, 1, "pingpong", swap_ab=True),
               GemmConfig(64, 32, 128, 1, 1, "pingpong", swap_ab=True),
               GemmConfig(64, 64, 128, 1, 1, "pingpong", swap_ab=True),
               GemmConfig(128, 16, 128, 1, 1, "cooperative", swap_ab=True)],
    "mid": [GemmConfig(64, 128, 128, 1, 1, "pingpong"), GemmConfig(128, 128, 128, 1, 1, "cooperative", swap_ab=True),
            GemmConfig(64, 256, 128, 1, 1, "pingpong"), GemmConfig(64, 64, 128, 1, 1, "pingpong", swap_ab=True),
            GemmConfig(128, 64, 128, 1, 1, "cooperative", swap_ab=True)],
    "large": [GemmConfig(128, 128, 128, 2, 1, "cooperative"), GemmConfig(128, 192, 128, 2, 1, "cooperative"),
              GemmConfig(128, 256, 128, 2, 1, "cooperative"),
              GemmConfig(128, 256, 128, 1, 2, "cooperative"), GemmConfig(64, 256, 128, 1, 1, "pingpong"),
              GemmConfig(128, 256, 128, 2, 1, "cooperative", swizzle=2),
              GemmConfig(128, 256, 128, 2, 1, "cooperative", swizzle=4),
              GemmConfig(128, 256, 128, 2, 1, "cooperative", raster="m", swizzle=2),
              GemmConfig(128, 256, 128, 2, 1, "cooperative", raster="n", swizzle=2),
              GemmConfig(128, 128, 128, 2, 1, "pingpong"), GemmConfig(128, 192, 128, 2, 1, "pingpong"),
              GemmConfig(128, 160, 128, 2, 1, "pingpong"), GemmConfig(128, 224, 128, 2, 1, "cooperative"),
              GemmConfig(128, 64, 128, 1, 1, "cooperative"), GemmConfig(128, 128, 128, 1, 1, "cooperative"),
              GemmConfig(128, 128, 128, 1, 1, "pingpong")],
}


# ---------------------------------------------------------------------------------------
# tuning: what scalemm.tune times for a shape (dense FP8)
# ---------------------------------------------------------------------------------------

def accumulator_registers(config: GemmConfig, *, fast_accum: bool) -> int:
    """fp32 accumulator registers per consumer thread: the tile over 128 threads per warpgroup (a
    cooperative tile is split between two warpgroups, a ping-pong warpgroup holds a whole tile), plus,
    without fast accumulation, the promotion's temporary: CUTLASS's is as large as the tile's, scalemm's
    chunked promotion's one chunk (tile / promotion_chunks), two with promotion_overlap."""
    per_thread = config.tile_m * config.tile_n // (128 * (2 if config.schedule == "cooperative" else 1))
    if fast_accum:
        return per_thread
    return per_thread + (2 if config.promotion_overlap else 1) * per_thread // (config.promotion_chunks or 1)


# The most accumulator registers a tile may need and still compile without spills. 128 everywhere,
# except where ptxas gives the consumer warpgroups up to 232-240 registers and the kernel keeps one accumulator:
# - the cooperative kernels with full accumulation: 128x160 and 128x192 (160 / 192 accumulator registers)
#   compile without spills (ptxas -v, sm_90a, nvcc 13.0: 0 bytes, stream-K too; the grouped fprop and wgrad
#   kernels at 128x192 too), and so does 128x256 with the chunked promotion in 2 chunks (128 + 64; dense,
#   grouped fprop and wgrad), while CUTLASS's 128x256 (256) spills 892 bytes and ran at 0.3x of 128x128 on an
#   H100;
# - the ping-pong kernels with fast accumulation: 128x192 (one warpgroup's tile, 192 registers) compiles without
#   spills (the same ptxas check, dense; the grouped kernel spills 8 bytes, and was measured at that).
# (The mainloop's own budget, kAccumulatorRegisterBudget in scalemm/sm90/fp8_promotion.hpp, is the 128.)
MAX_ACCUMULATOR_REGISTERS = 128
MAX_ACCUMULATOR_REGISTERS_WIDE = 192


def usable(config: GemmConfig, *, fast_accum: bool) -> bool:
    """Whether `config` is worth timing for FP8 in this accumulation mode (no spilling tile, and
    tile_k <= 128 without fast accumulation, which the promotion interval needs; promotion_chunks only
    with full accumulation)."""
    wide = (config.schedule == "cooperative") != fast_accum  # cooperative full, or ping-pong fast
    limit = MAX_ACCUMULATOR_REGISTERS_WIDE if wide else MAX_ACCUMULATOR_REGISTERS
    if fast_accum and config.promotion_chunks:
        return False
    return accumulator_registers(config, fast_accum=fast_accum) <= limit and (fast_accum or config.tile_k <= 128)


# full_accumulation(overlap=True): the widths that take promotion_overlap, and in how many chunks (128: one chunk,
# two whole-tile temporaries alternating over pairs of k-tiles; 192: two overlapped chunks of 96)
OVERLAP_CHUNKS = {128: 1, 192: 2}


def full_accumulation(config: GemmConfig, *, overlap: bool = False) -> GemmConfig:
    """The kernel that runs `config`'s tile with full accumulation: cooperative tiles of 128 rows (swap-AB ones
    too) take scalemm's chunked promotion (scalemm/sm90/fp8_promotion.hpp) with the fewest chunks whose
    accumulators fit (up to 128x192: 1, 128x256: 2); ping-pong tiles keep CUTLASS's promotion. On an H100
    (perf/fp8_full_accum.py, 10 prefill shapes) the chunked kernels were bit-identical to CUTLASS's and
    faster: 128x128 1.07x CUTLASS's 128x128, and 128x256, which CUTLASS cannot run, 0.94x of torch rowwise
    against 0.87x for CUTLASS's best (128x192).
    overlap (the dense GEMMs): `promotion_overlap` on the unswapped 128x192 tile in 2 chunks (one chunk's adds
    beside the other's wgmmas; 192 registers; H100, bit-identical and 1.022x faster than 1 chunk over the sweep's
    53 prefill points, perf/results/h100/fp8_promotion_overlap/) and on 128x128 in 1 chunk with two whole-tile
    temporaries over pairs of k-tiles (192 registers; H100, bit-identical, without the bias leaf 1.020x faster than
    2 overlapped chunks with it over 114 prefill points, perf/results/h100/fp8_full_rule/). 128x256 has no
    registers for a second temporary of 64, and in 4 chunks with overlap it ran 0.97x of 2 chunks (n64 wgmmas read
    A twice as often); the grouped kernels were not measured with overlap."""
    if config.schedule != "cooperative" or config.tile_m != 128 or config.tile_k != 128 or config.promotion_chunks:
        return config
    if overlap and not config.swap_ab and config.tile_n in OVERLAP_CHUNKS:
        return replace(config, promotion_chunks=OVERLAP_CHUNKS[config.tile_n], promotion_overlap=True)
    chunks = next(c for c in (1, 2, 4) if usable(replace(config, promotion_chunks=c), fast_accum=False))
    return replace(config, promotion_chunks=chunks)


def full_tile_config(tile_n: int, cluster_m: int = 2) -> GemmConfig:
    """The kernel of the full-accumulation rule above 128 tokens for a tile width of TILE_COST_FULL: cooperative
    128 x tile_n in clusters of `cluster_m` (2, or 1: full_cluster_m) along M with the chunked promotion, overlapped
    where the width takes it (OVERLAP_CHUNKS)."""
    return full_accumulation(GemmConfig(128, tile_n, 128, cluster_m, 1, "cooperative"), overlap=True)


def full_cluster_m(M: int, N: int, tile_n: int, num_sms: int) -> int:
    """The full-accumulation rule's cluster along M for a 128 x tile_n tile: 1 where the output is at most one wave of
    such tiles (one tile per CTA: nothing to share), or below 1024 tokens (scaled by num_sms / 132) with an odd count
    of 128-token tiles (a cluster of 2 runs one more), else 2 (TMA multicast of B). H100, one run of
    `perf/fp8_prefill_model.py --full --clusters 2x1,1x1` (perf/results/h100/fp8_full_one_wave/), over
    torch._scaled_mm rowwise in full accumulation: 32 narrow-layer points at 1024-8192 tokens 0.951x -> 0.983x (min
    0.823x -> 0.900x), 104 points at 256-768 tokens 0.944x -> 1.008x (min 0.497x at 384 tokens -> 0.907x)."""
    one_wave = tile_count(full_tile_config(tile_n, 1), M, N) <= num_sms
    return 1 if one_wave or (M < 1024 * num_sms / REFERENCE_SMS and -(-M // 128) % 2) else 2


def bias_free_full_kernel(config: GemmConfig) -> bool:
    """Whether `config` is a full-accumulation kernel measured faster without the preset's null bias leaf, so that
    a call without a bias compiles the preset without it (scalemm.gemm's bias_leaf): the full-accumulation rule's
    three kernels (full_tile_config), in clusters of 2 and of 1. H100, 114 prefill points, each kernel against
    itself with the leaf in the same process: 128x128 in one chunk over k-tile pairs 0.999x / 1.026x in two runs,
    128x192 0.998-1.012x and 128x256 0.999-1.005x in four: small and not stable between runs, but never a loss
    beyond 0.2% on the geomean. (The earlier 128x128 kernel in two overlapped chunks ran 0.967-0.970x without it,
    the loss growing with K: how the epilogue changes the main loop's code was not looked into.) In clusters of 1 (136 narrow-layer and 256-768-token
    points, perf/results/h100/fp8_full_one_wave/): 1.004-1.019x. The kernels not measured keep the leaf."""
    return config.compiled() in {full_tile_config(n, c) for n in TILE_COST_FULL for c in (1, 2)}


def tuning_candidates(M: int, N: int, K: int, *, fast_accum: bool = True,
                      num_sms: int = REFERENCE_SMS) -> list[GemmConfig]:
    """The compiled kernels scalemm.tune times for an M x N x K FP8 GEMM, the heuristic's pick first
    (run-time knobs at their defaults: `runtime_variants` adds those for the fastest).

    Few tokens (M <= 128): swap-AB tiles whose narrow side holds all tokens (or half of them),
    ping-pong 64-row, cooperative 128-row and cooperative stream-K, plus deep-K (256) ping-pong
    with fast accumulation; the unswapped ping-pong 64x64 / 64x128; with fast accumulation from 33 tokens the
    one-wave tile (one_wave_decode_config), the pick in clusters of 1 and of 2 along the tokens where it has two token
    tiles (token_cluster), and up to 16 tokens the cooperative 128x16x256 (few_tokens_config).
    More tokens: cooperative 128x128 in clusters 2x1, 1x2, 1x1 and stream-K; cooperative 128x192 (2x1,
    stream-K); ping-pong 64x128; cooperative 128x256 (2x1, 1x2, stream-K); with fast accumulation also
    ping-pong 64x256, 128x128 (2x1, 1x2, 1x1), 128x160 and 128x192 (2x1), and cooperative 256x128, 128x224 and
    128x64 (1x1: more tiles where 128x128 ones leave SMs idle). With full accumulation the cooperative tiles take
    scalemm's chunked promotion (`full_accumulation`), and CUTLASS's 128x192 stays a candidate. Tiles that would spill in
    this accumulation mode are left out (`usable`)."""
    out = [default_config(M, N, K, fast_accum=fast_accum, num_sms=num_sms)]
    coop, pp = "cooperative", "pingpong"
    if M <= 128:
        narrow = _pow2_at_least(M, 16, 128)  # tokens on the narrow tile side: one tile, or two
        for n in sorted({narrow, max(16, narrow // 2)}):
            out += [GemmConfig(64, n, 128, 1, 1, pp, swap_ab=True), GemmConfig(128, n, 128, 1, 1, coop, swap_ab=True),
                    GemmConfig(128, n, 128, 1, 1, coop, swap_ab=True, stream_k=True)]
            if n <= 32:
                out.append(GemmConfig(64, n, 256, 1, 1, pp, swap_ab=True))
        out += [GemmConfig(64, 64, 128, 1, 1, pp), GemmConfig(64, 128, 128, 1, 1, pp)]
        if fast_accum and M >= DECODE_ONE_WAVE_MIN_TOKENS:  # the one-wave tile, whether or not the rule takes it
            out += [c for c in (one_wave_decode_config(M, N, num_sms),) if c is not None]
        flat = replace(out[0], cluster_m=1, cluster_n=1)
        if fast_accum and token_tile_count(flat, M) >= 2:  # the pick in clusters of 1 and of 2 along the tokens
            out += [flat, token_cluster(flat)]
        if fast_accum and M <= 16:  # both of few_tokens_config's tiles
            out += [GemmConfig(64, 16, 256, 1, 1, pp, swap_ab=True), GemmConfig(128, 16, 256, 1, 1, coop, swap_ab=True)]
    else:
        out += [GemmConfig(128, 128, 128, 2, 1, coop), GemmConfig(128, 128, 128, 1, 2, coop),
                GemmConfig(128, 128, 128, 1, 1, coop), GemmConfig(128, 128, 128, 1, 1, coop, stream_k=True),
                GemmConfig(128, 192, 128, 2, 1, coop), GemmConfig(128, 192, 128, 1, 1, coop, stream_k=True),
                GemmConfig(64, 128, 128, 1, 1, pp),
                GemmConfig(128, 256, 128, 2, 1, coop), GemmConfig(128, 256, 128, 1, 2, coop),
                GemmConfig(128, 256, 128, 1, 1, coop, stream_k=True), GemmConfig(64, 256, 128, 1, 1, pp),
                GemmConfig(256, 128, 128, 2, 1, coop),
                GemmConfig(128, 128, 128, 2, 1, pp), GemmConfig(128, 128, 128, 1, 2, pp),
                GemmConfig(128, 192, 128, 2, 1, pp)]
        if fast_accum:  # the extended widths of PREFILL_TILE_MODEL; narrow outputs: clusters of 1
            out += [GemmConfig(128, 160, 128, 2, 1, pp), GemmConfig(128, 224, 128, 2, 1, coop),
                    GemmConfig(128, 64, 128, 1, 1, coop), GemmConfig(128, 128, 128, 1, 1, pp)]
    if not fast_accum:  # the cooperative tiles with scalemm's chunked promotion, and CUTLASS's 128x192
        out = [full_accumulation(c) for c in out] + ([GemmConfig(128, 192, 128, 2, 1, coop)] if M > 128 else [])
    return list(dict.fromkeys(c for c in out if usable(c, fast_accum=fast_accum)))


def grouped_tuning_candidates(T: int, G: int, N: int, K: int, *, fast_accum: bool = True) -> list[GemmConfig]:
    """The compiled kernels scalemm.tune times for a grouped FP8 GEMM of G groups, T rows in all (the
    heuristic's pick first): GROUPED_TUNING_CANDIDATES and, for few rows per group, swap-AB tiles
    whose narrow side holds them; with full accumulation the deep-K (256) tiles take tile_k 128, the
    cooperative tiles are also timed with scalemm's chunked promotion, and spilling tiles are left out.
    (Grouped kernels have no stream-K and no run-time tile order knobs.)"""
    out = [default_grouped_config(T, G, N, K, fast_accum=fast_accum)]
    narrow = _pow2_at_least(-(-T // max(G, 1)), 16, 128)
    extra = [GemmConfig(64, narrow, 128, 1, 1, "pingpong", swap_ab=True),
             GemmConfig(128, narrow, 128, 1, 1, "cooperative", swap_ab=True)]
    for c in GROUPED_TUNING_CANDIDATES + extra:
        out.append(c if fast_accum or c.tile_k <= 128 else replace(c, tile_k=128))
    if not fast_accum:  # and the cooperative tiles with scalemm's chunked promotion
        out += [full_accumulation(c) for c in out]
    return list(dict.fromkeys(c for c in out if usable(c, fast_accum=fast_accum)))


def runtime_variants(config: GemmConfig) -> list[GemmConfig]:
    """The same compiled kernel with the other run-time tile orders: raster along M or N (or
    CUTLASS's choice) and swizzle widths 1, 2, 4, 8 (how many tiles of the raster's cross
    direction run side by side, for L2 reuse). Worth timing when the tiles fill several waves."""
    base = config.compiled()
    return [replace(base, raster=r, swizzle=s) for r in ("auto", "m", "n") for s in (1, 2, 4, 8)
            if (r, s) != ("auto", 1)]


def sweep_configs() -> list[tuple[GemmConfig, bool]]:
    """(config, fast_accum) pairs the heuristic picks over perf/gemm_sweep.py's points."""
    return sorted({(default_config(M, N, K, fast_accum=fa), fa) for _, M, N, K in sweep_points() for fa in (True, False)},
                  key=lambda c: (c[0].key(), c[1]))
