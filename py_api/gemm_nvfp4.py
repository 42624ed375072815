"""NVFP4-weight GEMMs on Hopper: exact emulation on bf16 tensor cores (docs/numerics.md section 4).

W4A16: y = epilogue(x @ dequant(W)^T) with x bf16/fp16 [M, K] and W an NVFP4Tensor [N, K].
W4A4:  x is an NVFP4Tensor too; the CUTLASS kernel takes its rows decoded exactly to bf16 first (code x
       block scale, one memory-bound pass), the skinny kernel decodes them in registers; its global
       scale joins W's in the epilogue.
Two kernels, both reading W's e4m3 scales exactly as the quantizer wrote them:
  - few tokens (decode), the skinny kernel (scalemm/sm90/nvfp4_skinny.cuh): mma.sync, W's
    codes in the quantizer's byte order, K split over a cluster of CTAs, up to 64 tokens per CTA (more
    in blocks side by side) (the default for calls the heuristic gives it, default_nvfp4_skinny_config;
    SCALEMM_NVFP4_SKINNY=0 turns that off); its wgmma main loop (by default 9-64 tokens by shape, and
    above on small layers; NVFP4 activations after the bf16 pass) streams W's prepared copy through
    shared memory;
  - otherwise the CUTLASS kernel (scalemm/sm90/nvfp4_mainloop.hpp): wgmma, W in a prepared byte
    order made once per weight and cached beside it (prepare_sm90_weight).
Global scales (alpha) are applied in fp32 on the accumulator, never to operands.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import weakref
from dataclasses import replace
from typing import Optional

import torch

from . import abi
from . import epilogues as epi
from .arch import configs_for, gpu_info, on_device
from .cutlass_kernels.configs import (NVFP4_WIDE_TOKEN_WIDTHS, SKINNY_DEFAULT_MAINLOOP, SKINNY_MAINLOOPS,
                                      SKINNY_TILE_ROWS, GemmConfig,
                                      SkinnyConfig, default_nvfp4_config, default_nvfp4_grouped_config,
                                      default_nvfp4_tokens_on_a_config, default_nvfp4_w4a16_on_a_config, nvfp4_cpp,
                                      NVFP4_TOKENS_ON_A_WIDTHS, nvfp4_w4a16_on_a,
                                      nvfp4_decodes_activations, skinny_cpp)
from .formats import GroupedNVFP4Tensor, NVFP4Tensor, layout
from .formats.base import check_host_offsets, version
from .formats.nvfp4 import dequantize_nvfp4_grouped, exact_rows
from .reference import dequantize_nvfp4, grouped_gemm_reference
from .checks import check_aligned, check_n, grouped_activation_offsets
from .gemm import gemm_kernel_spec, kernel_plan, launch_planned  # gemm_sm90.cu (W4A16, tokens on A)
from .checks import check_options as check_gemm_options
from .jit import KernelError, KernelSpec, build

__all__ = ["gemm_nvfp4", "prepare_sm90_weight", "nvfp4_gemm_kernel_spec", "default_nvfp4_config", "skinny_splits",
           "dequant_kernel_spec", "skinny_kernel_spec"]

CHUNK_K = 64  # elements of K per prepared chunk and per scale atom column group
_ACT_DTYPES = (torch.bfloat16, torch.float16)


# ---------------------------------------------------------------------------------------
# the prepared weight layout
# ---------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _chunk_permutation() -> tuple[int, ...]:
    """perm[p] = the element (0..63 of a 64-element chunk) stored at nibble p of the prepared
    chunk (byte p // 2, low nibble for even p). Thread t of the kernel's fragment layout reads
    bytes [8t, 8t + 8) as words w = 0, 1; nibble n of word w holds element
    16 * (2w + (n % 4) // 2) + 2t + 8 * (n % 2) + n // 4."""
    perm = []
    for p in range(64):
        byte = p // 2
        t, w, n = byte // 8, (byte % 8) // 4, 2 * (byte % 4) + p % 2
        perm.append(16 * (2 * w + (n % 4) // 2) + 2 * t + 8 * (n % 2) + n // 4)
    assert sorted(perm) == list(range(64))
    return tuple(perm)


def _capturing(device: torch.device) -> bool:
    """Whether work queued now on `device` goes into a CUDA graph being captured."""
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def _per_device(make):
    """make(device) -> tensor(s), cached per device, except when made inside a CUDA-graph capture:
    then its bytes exist only once the graph replays, so a cached copy would be read too early by a
    later eager call. `make` must use device ops only (no host-to-device copy: a capture refuses it)."""
    cache = {}

    @functools.wraps(make)
    def get(device: torch.device):
        hit = cache.get(device)
        if hit is None:
            hit = make(device)
            if not _capturing(device):
                cache[device] = hit
        return hit
    return get


@_per_device
def _byte_plan(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The permutation as byte operations: prepared byte j of a 32-byte chunk holds elements perm[2j]
    (low nibble) and perm[2j + 1] = perm[2j] + 8 (high nibble), which sit in the same nibble of the
    source bytes perm[2j] // 2 and perm[2j] // 2 + 4. Returns (those first source bytes, whether that
    nibble is the high one) for j = 0..31: _chunk_permutation's formula at p = 2j, in device ops
    (tests/test_nvfp4_gemm_api.py checks prepare_sm90_weight against the permutation)."""
    j = torch.arange(CHUNK_K // 2, device=device)
    lo = 16 * (2 * ((j % 8) // 4) + j % 2) + 2 * (j // 8) + (j % 4) // 2  # perm[2j]; perm[2j + 1] = lo + 8
    return lo // 2, lo % 2 == 1


def prepare_sm90_weight(qdata: torch.Tensor) -> torch.Tensor:
    """Packed e2m1 codes uint8 [..., N, K/2] (even element in the low nibble) -> the byte order
    the SM90 kernel reads, uint8 [..., N, K_pad/2] with K_pad = ceil(K/64)*64 (zero codes pad).
    CUDA tensors: one pass of scalemm/nvfp4_dequant.cuh's prepare_sm90 (a training step re-quantizes its
    weights, so it runs every step there); CPU tensors: the same bytes from two byte gathers and one
    select per chunk in torch ops (_prepare_sm90_torch)."""
    if not isinstance(qdata, torch.Tensor) or qdata.dtype != torch.uint8 or qdata.dim() < 2:
        raise ValueError(f"prepare_sm90_weight: qdata must be packed codes, uint8 [..., N, K/2], got "
                         f"{getattr(qdata, 'dtype', type(qdata).__name__)} {tuple(getattr(qdata, 'shape', ()))}")
    return _prepare_sm90_cuda(qdata) if qdata.is_cuda else _prepare_sm90_torch(qdata)


def _prepare_sm90_cuda(qdata: torch.Tensor) -> torch.Tensor:
    *lead, n, half = qdata.shape
    k_pad = -(-(half * 2) // CHUNK_K) * CHUNK_K
    q = qdata.contiguous()
    out = torch.empty((*lead, n, k_pad // 2), dtype=torch.uint8, device=q.device)
    rows = q.numel() // half if half else 0
    if rows:
        args = abi.Nvfp4PrepareArgs(qdata=q.data_ptr(), out=out.data_ptr(), rows=rows, half=half,
                                    stream=torch._C._cuda_getCurrentRawStream(q.device.index))
        with on_device(q.device):
            _dequant_fn("scalemm_nvfp4_prepare_sm90")(ctypes.byref(args))
    return out


def _prepare_sm90_torch(qdata: torch.Tensor) -> torch.Tensor:
    *lead, n, half = qdata.shape
    k_pad = -(-(half * 2) // CHUNK_K) * CHUNK_K
    if k_pad != half * 2:
        qdata = torch.nn.functional.pad(qdata, (0, k_pad // 2 - half))
    chunks = qdata.reshape(*lead, n, k_pad // CHUNK_K, CHUNK_K // 2)
    src, high = _byte_plan(qdata.device)
    a, b = chunks.index_select(-1, src), chunks.index_select(-1, src + 4)
    out = torch.where(high, (a >> 4) | (b & 0xF0), (a & 0x0F) | (b << 4))
    return out.reshape(*lead, n, k_pad // 2)


# id(qdata) -> (weak reference to qdata, its version, prepared copy). The copy lives as long as the
# weight (a finalizer drops it); an in-place change of the weight (a new version) re-prepares it.
# Keyed by identity: tensors compare elementwise, so they cannot be dictionary keys themselves.
# An inference tensor (made under torch.inference_mode) has no version counter: its copy is kept as long as it
# lives, so an in-place change of its codes is not seen (README, "NVFP4-weight GEMMs").
_prepared: dict[int, tuple[weakref.ref, Optional[int], torch.Tensor]] = {}


def _prepared_weight(qdata: torch.Tensor) -> torch.Tensor:
    key = id(qdata)
    hit = _prepared.get(key)
    if hit is not None and hit[0]() is qdata and hit[1] == version(qdata):
        return hit[2]
    prepared = prepare_sm90_weight(qdata)
    if _capturing(qdata.device):  # made by the graph: valid only when it replays, so not cached (_per_device)
        return prepared
    if hit is None or hit[0]() is not qdata:
        weakref.finalize(qdata, _prepared.pop, key, None)
    _prepared[key] = (weakref.ref(qdata), version(qdata), prepared)
    return prepared


# ---------------------------------------------------------------------------------------
# configs and kernels
# ---------------------------------------------------------------------------------------

def _act_name(act_dtype) -> str:
    return "nvfp4" if act_dtype == "nvfp4" else epi.dtype_name(act_dtype)


def nvfp4_gemm_kernel_spec(config: GemmConfig, *, act_dtype, out_dtype: torch.dtype,
                           epilogue: epi.Node) -> tuple[KernelSpec, epi.Emitted]:
    """act_dtype: torch.bfloat16 / torch.float16 (W4A16), or "nvfp4" (W4A4 decoded in the mainloop: configs
    with nvfp4_decodes_activations)."""
    return _spec(config, _act_name(act_dtype), epi.dtype_name(out_dtype), epilogue)


@functools.lru_cache(maxsize=None)
def _spec(config, act_name, out_name, tree):
    emitted = epi.emit(tree, out_name, swap_ab=config.swap_ab)  # swap_ab=False: tokens on A (nvfp4_cpp)
    digest = hashlib.sha256(emitted.evt_type.encode()).hexdigest()[:8]
    name = f"nvfp4_gemm_{config.key()}_{act_name}_{out_name}_evt{digest}"
    return KernelSpec(name=name, template="nvfp4_gemm_sm90.cu",
                      params=nvfp4_cpp(config, act_dtype=act_name, out_dtype=out_name, epilogue=emitted)), emitted


def dequant_kernel_spec() -> KernelSpec:
    return KernelSpec(name="nvfp4_dequant", template="nvfp4_dequant.cu")


@functools.lru_cache(maxsize=1024)
def skinny_kernel_spec(config: SkinnyConfig, *, act_dtype, out_dtype: torch.dtype,
                       activation: str | None = None) -> KernelSpec:
    """act_dtype: torch.bfloat16 / torch.float16 (W4A16) or "nvfp4" (W4A4: the kernel decodes the
    activations' codes and block scales itself). Cached: every decode call asks."""
    act_name = "nvfp4" if act_dtype == "nvfp4" else epi.dtype_name(act_dtype)
    return _skinny_spec(config.compiled(), act_name, epi.dtype_name(out_dtype), activation or "none")


@functools.lru_cache(maxsize=None)
def _skinny_spec(config, act_name, out_name, activation):
    return KernelSpec(name=f"nvfp4_{config.key()}_{act_name}_{out_name}_{activation}", template="nvfp4_skinny_sm90.cu",
                      params=skinny_cpp(config, act_dtype=act_name, out_dtype=out_name, activation=activation))


@functools.lru_cache(maxsize=None)
def _skinny_launcher(spec: KernelSpec):
    return build(spec).function("scalemm_nvfp4_skinny_gemm", [ctypes.POINTER(abi.Nvfp4SkinnyGemmArgs)])


@functools.lru_cache(maxsize=None)
def _skinny_splits_fn(spec: KernelSpec):
    return build(spec).function("scalemm_nvfp4_skinny_splits", [ctypes.POINTER(abi.Nvfp4SkinnySplitsArgs)])


SKINNY_ENV = "SCALEMM_NVFP4_SKINNY"


def skinny_by_default() -> bool:
    """Whether calls without a config may take the skinny kernel where the heuristic picks it (dense:
    default_nvfp4_skinny_config, up to 8 tokens, 16 or 64 by shape, more on small layers; grouped:
    default_nvfp4_grouped_skinny_config, up to 4 rows per expert on average): yes unless SCALEMM_NVFP4_SKINNY=0.
    config=SkinnyConfig(...) always selects it, dense or grouped."""
    value = os.environ.get(SKINNY_ENV, "1")
    if value not in ("0", "1"):
        raise ValueError(f"{SKINNY_ENV} must be 0 or 1, got {value!r}")
    return value == "1"


def skinny_problem(M: int, N: int, K: int, config: SkinnyConfig, tensors, groups: int | None = None) -> str | None:
    """Why the skinny kernel cannot take this problem (dense, or grouped with `groups` experts), or None
    when it can."""
    if groups is None and M > 65535 * config.max_tokens:
        return f"M = {M} tokens is more than 65535 blocks of the {config.key()} kernel's {config.max_tokens}"
    if config.mainloop == "resident" and K % 32 == 0:
        # the launcher's rule (resident_bytes in nvfp4_skinny.cuh): a split's token rows of (its chunks of 128 + 8)
        # 2-byte elements, + 16 of alignment, in abi.kSkinnyResidentTokenBytes. splits=0: the launcher's choice, at
        # most kSkinnyMaxSplits, so only the most splits are checked here (a refused choice: _gemm_skinny says so)
        rows = config.max_tokens if groups is not None else min(M, config.max_tokens)
        splits = config.splits or abi.kSkinnyMaxSplits
        per_split = -(-(-(-K // 128)) // splits)
        need = rows * (per_split * 128 + 8) * 2 + 16
        if need > abi.kSkinnyResidentTokenBytes:
            return (f"the resident loop's {rows} token rows of K = {K} in {splits} splits need {need} bytes of shared "
                    f"memory, more than its {abi.kSkinnyResidentTokenBytes} (more splits, fewer tokens, or another "
                    f"mainloop)")
    if groups is not None and groups > 65535:
        return f"{groups} groups are more than 65535"
    if K % 32:
        return f"K = {K} is not a multiple of 32 (its rows of FP4 codes are read 16 bytes at a time)"
    if N > 65535 * SKINNY_TILE_ROWS:
        return f"N = {N} is more than 65535 tiles of {SKINNY_TILE_ROWS} rows"
    if K > 1 << 30 or M > 1 << 30:
        return f"K = {K} or M = {M} is more than 2^30"
    for t, name in tensors:
        if t.data_ptr() % 16:
            return f"{name} does not start on a 16-byte boundary"
        if not t.is_contiguous():  # rows of K / 2 bytes (codes) or K elements back to back
            return f"{name} is not contiguous"
    return None


def _skinny_call(a, b, bias, out, cfg: SkinnyConfig, activation, offsets=None, out_dtype=None):
    """The skinny kernel's spec and arguments, dense (offsets None) or grouped (b stacked experts, offsets
    [G] on the device). a: bf16/fp16 [M, K] (W4A16) or an NVFP4Tensor / GroupedNVFP4Tensor (W4A4: the
    kernel decodes its codes and scales itself). out: the output, or None to plan a call writing out_dtype
    (d is null)."""
    K = b.shape[1]
    N = b.group_rows if offsets is not None else b.shape[0]
    M = a.shape[0]
    x4 = isinstance(a, (NVFP4Tensor, GroupedNVFP4Tensor))
    out_dtype = out.dtype if out is not None else out_dtype
    # NVFP4 tokens: every loop takes the exact bf16 rows their quantizer wrote (exact_rows; alpha_a stays for the
    # epilogue), as W4A16: 1.10-1.18x the mma.sync loops' in-register decode on an H200's grouped decode at 32-128 rows
    # and 1.08-1.38x at 2-8 rows (perf/NOTES.md "W4A4 without the decode pass", "Grouped W4A4 at 1-8 rows"). Without
    # those rows, the mma.sync loops decode them in registers and the wgmma loop takes them decoded by one pass
    # (decoding them in every CTA, as the mma.sync loops do, took 1.04-1.9x the time of pass + loop: perf/NOTES.md
    # "the wgmma main loop"). A call that only plans (out None: skinny_splits) runs no pass; the kernel then never
    # reads x.
    rows = exact_rows(a) if x4 else None
    x4_kernel = x4 and rows is None and cfg.mainloop != "wgmma"
    decoded = None
    if x4 and not x4_kernel and out is not None:
        decoded = rows if rows is not None else dequantize_rows_bf16(a, offsets=offsets)
    spec = skinny_kernel_spec(cfg, act_dtype="nvfp4" if x4_kernel else torch.bfloat16 if x4 else a.dtype,
                              out_dtype=out_dtype, activation=activation)
    device = b.qdata.device
    grouped = offsets is not None
    G = offsets.numel() if grouped else 1
    if x4:
        scale_a = a.alpha
        mode_a = (abi.kLeafPerRow if a.scaling == "token" else abi.kLeafPerGroup if grouped else abi.kLeafOne)
    else:
        scale_a, mode_a = _one(device), abi.kLeafOne
    if b.alpha.numel() == 1 and not grouped:
        mode_b = abi.kLeafOne
    else:
        mode_b = abi.kLeafPerGroupVec if b.scaling == "token" else abi.kLeafPerGroup
    mode_bias = abi.kLeafNull if bias is None else abi.kLeafPerGroupVec if bias.dim() == 2 else abi.kLeafShared
    # the wgmma loop reads the prepared byte order of the CUTLASS kernel (its A fragments), the others the quantizer's
    weight = _prepared_weight(b.qdata) if cfg.mainloop == "wgmma" else b.qdata
    args = abi.Nvfp4SkinnyGemmArgs(
        weight=weight.data_ptr(), weight_scales=b.scales.data_ptr(),
        x=(decoded if decoded is not None else a.qdata if x4 else a).data_ptr(),
        x_scales=a.scales.data_ptr() if x4_kernel else None,
        x_sf_offsets=a.sf_offsets.data_ptr() if (x4_kernel and grouped) else None,
        d=None if out is None else out.data_ptr(),
        offsets=offsets.data_ptr() if grouped else None, groups=G,
        scale_a=scale_a.data_ptr(), scale_a_mode=mode_a, scale_b=b.alpha.data_ptr(), scale_b_mode=mode_b,
        bias=None if bias is None else bias.data_ptr(), bias_mode=mode_bias, n=N, tokens=M, k=K,
        scale_cols=-(-(K // 16) // 4) * 4, splits=cfg.splits,
        device=device.index, stream=torch._C._cuda_getCurrentRawStream(device.index))
    return spec, args, (decoded, weight)  # (kept alive until the launch is queued: see gemm_nvfp4's weight)


@functools.lru_cache(maxsize=4096)
def _resident_chunks_per_split(spec: KernelSpec, n: int, tokens: int, k: int, device: int) -> int:
    """Chunks of K per CTA the launcher of the resident kernel `spec` plans for a dense W4A4 call of this shape on
    `device` (its split for splits=0; nothing is read or launched), 0 where it cannot run it; cached per shape."""
    call = abi.Nvfp4SkinnyGemmArgs(x_scales=1, groups=1, scale_a_mode=abi.kLeafOne, scale_b_mode=abi.kLeafOne,
                                   bias_mode=abi.kLeafNull, n=n, tokens=tokens, k=k, scale_cols=-(-(k // 16) // 4) * 4,
                                   splits=0, device=device)
    got = ctypes.c_int64(0)
    try:
        with on_device(device):
            _skinny_splits_fn(spec)(ctypes.byref(abi.Nvfp4SkinnySplitsArgs(call=ctypes.addressof(call),
                                                                           splits=ctypes.addressof(got))))
    except KernelError:
        return 0
    return -(-(-(-k // 128)) // got.value) if got.value > 0 else 0


@functools.lru_cache(maxsize=4096)
def _resident_where_it_pays(config: SkinnyConfig, M, N, K, out_dtype, activation, device: int, configs):
    """The default's resident loop (NVFP4 activations) where its tokens fit and it pays at the split its launcher
    plans (configs.resident_pays), else the stepped loop (the tokens decoded in the loop). Cached per call shape:
    an eager decode call pays one lookup (~4 us of host time uncached on a 2-core machine)."""
    if skinny_problem(M, N, K, config, []) is None:  # the shape rule; the caller checks the operands
        spec = skinny_kernel_spec(config, act_dtype="nvfp4", out_dtype=out_dtype, activation=activation)
        if configs.resident_pays(M, _resident_chunks_per_split(spec, N, M, K, device)):
            return config
    return replace(config, mainloop="stepped")


def _gemm_skinny(a, b, bias, out, cfg: SkinnyConfig, activation, offsets=None):
    """The skinny kernel, dense (offsets None) or grouped (b stacked experts, offsets [G] on the device)."""
    spec, args, _alive = _skinny_call(a, b, bias, out, cfg, activation, offsets)
    try:
        with on_device(out.device):
            _skinny_launcher(spec)(ctypes.byref(args))
    except KernelError as e:  # the resident loop's launcher refuses a split of its choice whose tokens do not fit
        if cfg.mainloop != "resident" or cfg.splits:
            raise
        raise ValueError(f"config={cfg.label()} cannot run this GEMM: at the split of K its launcher picks for this GPU "
                         f"a split's token rows need more than the resident loop's {abi.kSkinnyResidentTokenBytes} "
                         f"bytes of shared memory; pass splits= (up to {abi.kSkinnyMaxSplits}) to split K further, "
                         f"or take another mainloop ({e})") from None
    return out


def skinny_splits(a, b, config: SkinnyConfig, offsets=None, *, out_dtype=torch.bfloat16, epilogue=None) -> int:
    """How many CTAs split K when scalemm.gemm(a, b, config=config, out_dtype=..., epilogue=...) (or
    grouped_gemm with offsets) runs the skinny kernel on CUDA: config.splits, or for splits=0 the
    launcher's choice for this GPU (from the kernel's occupancy and the shape); 0 when there is nothing
    to compute. Nothing is launched. For studies of the split model (perf/nvfp4_explore.py prints it)."""
    if config is None:
        raise TypeError("config must be a SkinnyConfig, got NoneType")
    _check_options(None, None, epilogue, None, False, out_dtype, config, config_types=(SkinnyConfig,))
    device = b.qdata.device
    if device.type != "cuda":
        raise ValueError(f"skinny_splits needs the operands on a CUDA device, got b on {device}")
    x4 = isinstance(a, (NVFP4Tensor, GroupedNVFP4Tensor))
    a_device = a.qdata.device if x4 else a.device
    if a_device != device:
        raise ValueError(f"skinny_splits: a is on {a_device}, b on {device}")
    if offsets is not None and (offsets.device != device or offsets.dtype != torch.int32 or offsets.dim() != 1
                                or offsets.numel() < 1):
        raise ValueError(f"skinny_splits: offsets must be a non-empty int32 vector on {device}, got "
                         f"{offsets.dtype} {tuple(offsets.shape)} on {offsets.device}")
    M, K = a.shape[0], b.shape[1]
    N = b.group_rows if offsets is not None else b.shape[0]
    if not x4:
        _check_activation_rows(a, "a", K)
    operands = [(b.qdata, "b.qdata"), (b.scales, "b.scales")] + (
        [(a.qdata, "a.qdata"), (a.scales, "a.scales")] if x4 else [(a, "a")])
    why = skinny_problem(M, N, K, config, operands, groups=None if offsets is None else offsets.numel())
    if why:
        raise ValueError(f"config={config.label()} cannot run this GEMM: {why}")
    spec, args, _decoded = _skinny_call(a, b, None, None, config, epilogue, offsets, out_dtype=out_dtype)
    got = ctypes.c_int64(-1)
    query = abi.Nvfp4SkinnySplitsArgs(call=ctypes.addressof(args), splits=ctypes.addressof(got))
    with on_device(device):
        _skinny_splits_fn(spec)(ctypes.byref(query))
    return got.value


@functools.lru_cache(maxsize=None)
def _gemm_launcher(spec: KernelSpec):
    return build(spec).function("scalemm_nvfp4_gemm", [ctypes.POINTER(abi.Nvfp4GemmArgs)])


@functools.lru_cache(maxsize=4096)
def _gemm_workspace_bytes(spec: KernelSpec, n: int, tokens: int, k: int, device: int, raster: int, swizzle: int,
                          splits: int) -> int:
    """The workspace a stream-K launch of `spec` needs, as the kernel computes it (CUTLASS's partial sums and
    locks for this shape and GPU); host only, cached per shape."""
    call = abi.Nvfp4GemmArgs(n=n, tokens=tokens, k=k, device=device, raster=raster, swizzle=swizzle, splits=splits)
    with on_device(device):
        return abi.workspace_bytes(_gemm_workspace_fn(spec), call)


@functools.lru_cache(maxsize=None)
def _gemm_workspace_fn(spec: KernelSpec):
    return build(spec).function("scalemm_nvfp4_gemm_workspace", [ctypes.POINTER(abi.GemmWorkspaceArgs)])


# The nvfp4_dequant kernel library's entry points (templates/nvfp4_dequant.cu) and their argument structs.
_DEQUANT_ARGS = {"scalemm_nvfp4_dequant": abi.Nvfp4DequantArgs, "scalemm_nvfp4_prepare_sm90": abi.Nvfp4PrepareArgs,
                 "scalemm_nvfp4_wgrad_to_bf16": abi.Nvfp4WgradDecodeArgs,
                 "scalemm_nvfp4_wgrad_scale": abi.Nvfp4WgradScaleArgs}


@functools.lru_cache(maxsize=None)
def _dequant_fn(name: str):
    """An entry point of the nvfp4_dequant kernel library (dequant_kernel_spec)."""
    return build(dequant_kernel_spec()).function(name, [ctypes.POINTER(_DEQUANT_ARGS[name])])


def decode_wgrad_blocks_bf16(qdata: torch.Tensor, scales: torch.Tensor, base: torch.Tensor, local: torch.Tensor,
                             cp: torch.Tensor) -> torch.Tensor:
    """bf16 [K, W] = value(code) x block scale of an NVFP4 wgrad-layout copy's codes qdata uint8 [K, W/2] (CUDA),
    each 16-column block b's scale at byte base[b] + swizzle_offset(k, local[b], cp[b]) of `scales` (base[b] < 0:
    zeros). scalemm.training.decode_wgrad_bf16 builds the block arrays; exact (docs/numerics.md section 4)."""
    K, half = qdata.shape
    blocks = 2 * half // 16
    if not qdata.is_cuda or qdata.dtype != torch.uint8 or half % 8:
        raise ValueError(f"decode_wgrad_blocks_bf16: qdata must be CUDA uint8 [K, W/2] with W % 16 == 0, got "
                         f"{qdata.dtype} {tuple(qdata.shape)} on {qdata.device}")
    if any(t.numel() != blocks or t.device != qdata.device for t in (base, local, cp)):
        raise ValueError(f"decode_wgrad_blocks_bf16: base, local and cp need {blocks} entries on {qdata.device}")
    out = torch.empty((K, 2 * half), dtype=torch.bfloat16, device=qdata.device)
    if out.numel():
        q, s = qdata.contiguous(), scales.contiguous()
        b64, l32 = base.to(torch.int64).contiguous(), local.to(torch.int32).contiguous()
        c32 = cp.to(torch.int32).contiguous()
        args = abi.Nvfp4WgradDecodeArgs(qdata=q.data_ptr(), scales=s.data_ptr(), base=b64.data_ptr(),
                                        local=l32.data_ptr(), cp=c32.data_ptr(), out=out.data_ptr(), k=K, w=2 * half,
                                        stream=torch._C._cuda_getCurrentRawStream(q.device.index))
        with on_device(q.device):
            _dequant_fn("scalemm_nvfp4_wgrad_to_bf16")(ctypes.byref(args))
    return out


_OUT_KINDS = {torch.bfloat16: abi.kOutBf16, torch.float16: abi.kOutF16, torch.float32: abi.kOutF32}


def scale_grouped_wgrad(acc: torch.Tensor, alpha_dy: torch.Tensor, alpha_x: torch.Tensor, has_rows: torch.Tensor,
                        out_dtype: torch.dtype) -> torch.Tensor:
    """[G, N, K] of out_dtype = fl(fl(alpha_dy * alpha_x) * acc) rounded once, 0 where has_rows[g] is False, from
    a bf16 acc [G, N, K] (CUDA) and fp32 alpha_dy [G] or [G, N], alpha_x [G] or [G, K]: the NVFP4 grouped wgrad's
    global scales in one pass (in place for bf16 out)."""
    G, N, K = acc.shape
    if not acc.is_cuda or acc.dtype != torch.bfloat16 or out_dtype not in _OUT_KINDS:
        raise ValueError(f"scale_grouped_wgrad: acc must be a CUDA bf16 tensor and out_dtype one of "
                         f"{tuple(_OUT_KINDS)}, got {acc.dtype} on {acc.device}, {out_dtype}")
    for t, name, per in ((alpha_dy, "alpha_dy", N), (alpha_x, "alpha_x", K)):
        if tuple(t.shape) not in ((G,), (G, per)) or t.device != acc.device:
            raise ValueError(f"scale_grouped_wgrad: {name} must be [{G}] or [{G}, {per}] on {acc.device}, got "
                             f"{tuple(t.shape)} on {t.device}")
    if tuple(has_rows.shape) != (G,) or has_rows.device != acc.device:
        raise ValueError(f"scale_grouped_wgrad: has_rows must be [{G}] on {acc.device}, got {tuple(has_rows.shape)}")
    acc = acc.contiguous()
    out = acc if out_dtype == torch.bfloat16 else torch.empty(acc.shape, dtype=out_dtype, device=acc.device)
    if out.numel() == 0:
        return out
    a_dy, a_x = alpha_dy.float().contiguous(), alpha_x.float().contiguous()
    rows = has_rows.to(torch.uint8).contiguous()
    args = abi.Nvfp4WgradScaleArgs(acc=acc.data_ptr(), out=out.data_ptr(), alpha_dy=a_dy.data_ptr(),
                                   dy_vec=int(a_dy.dim() == 2), alpha_x=a_x.data_ptr(), x_vec=int(a_x.dim() == 2),
                                   has_rows=rows.data_ptr(), groups=G, n=N, k=K, out_kind=_OUT_KINDS[out_dtype],
                                   stream=torch._C._cuda_getCurrentRawStream(acc.device.index))
    with on_device(acc.device):
        _dequant_fn("scalemm_nvfp4_wgrad_scale")(ctypes.byref(args))
    return out


@_per_device
def _one(device: torch.device) -> torch.Tensor:
    return torch.ones((), dtype=torch.float32, device=device)


def _num_sms(device):
    return gpu_info(device).num_sms


def dequantize_rows_bf16(q, *, offsets=None, sf_offsets_table=None) -> torch.Tensor:
    """bf16 [M, K] = value(code) * block scale of an NVFP4 rowwise copy (no global scale), exact."""
    M, K = q.shape
    out = torch.empty((M, K), dtype=torch.bfloat16, device=q.qdata.device)
    if M == 0:
        return out
    G = 0 if offsets is None else offsets.numel()
    table = torch.empty(abi.group_table_ints(G), dtype=torch.int32, device=out.device) if G else None
    args = abi.Nvfp4DequantArgs(
        qdata=q.qdata.data_ptr(), scales=q.scales.data_ptr(), out=out.data_ptr(), rows=M, k=K,
        scale_cols=-(-(K // 16) // 4) * 4, offsets=None if offsets is None else offsets.data_ptr(), groups=G,
        table=None if table is None else table.data_ptr(),
        stream=torch._C._cuda_getCurrentRawStream(out.device.index))
    with on_device(out.device):
        _dequant_fn("scalemm_nvfp4_dequant")(ctypes.byref(args))
    return out


def bf16_rows(q, *, offsets=None) -> torch.Tensor:
    """The W4A16 kernels' bf16 operand for NVFP4 activations q: the exact rows its quantizer wrote beside it where
    they are valid (formats.nvfp4.exact_rows; quantize.EXACT_ROWS_MAX), else dequantize_rows_bf16's pass. Same bits."""
    rows = exact_rows(q)
    return rows if rows is not None else dequantize_rows_bf16(q, offsets=offsets)


# W4A4 on the CUTLASS kernel: who decodes the NVFP4 activations. "pass": a memory-bound pass to bf16 first
# (dequantize_rows_bf16), then the W4A16 kernel. "mainloop": the kernel's consumer warps decode each token tile in
# shared memory (cooperative tiles of 128 or 256 tokens, K % 32 == 0); slower everywhere measured (H100: 1.14-1.72x
# the pass's time from 128 to 16384 tokens): every CTA of a token tile decodes it again (N / 128 times the pass's
# work) in warps that also issue the wgmmas (perf/NOTES.md, "W4A4 decoded in the mainloop"). "registers": the tokens
# on the tile's M side, their codes decoded in registers as the weights' are in the other kernels, and the weights
# decoded to bf16 by the pass instead (N x K elements where the activations' pass has M x K; a config with
# swap_ab=False, nvfp4_mainloop.hpp "Tokens on A"). "auto" (the default): "registers" where the configs' rule
# (nvfp4_tokens_on_a) says so, else "pass". All give the same products; the kernels' accumulation orders differ.
ACTIVATION_DECODES = ("auto", "pass", "mainloop", "registers")


def _check_activation_decode(activation_decode: str, config=None) -> None:
    """The name; and a SkinnyConfig takes "auto" only (the skinny kernel decodes NVFP4 activations its own way; an
    explicit decode names one of the CUTLASS kernel's, and without a config it rules the skinny kernel out)."""
    if activation_decode not in ACTIVATION_DECODES:
        raise ValueError(f"activation_decode must be one of {ACTIVATION_DECODES}, got {activation_decode!r}")
    if isinstance(config, SkinnyConfig) and activation_decode != "auto":
        raise ValueError(f"activation_decode={activation_decode!r} names a CUTLASS kernel's decode; config="
                         f"{config.label()} is the skinny kernel's, which takes activation_decode='auto'")


def _decode_in_mainloop(a, cfg: GemmConfig, activation_decode: str) -> bool:
    """Whether the CUTLASS kernel of `cfg` decodes the NVFP4 activations `a` itself (activation_decode
    "mainloop": an error naming why where it cannot) or runs after the bf16 pass ("pass")."""
    _check_activation_decode(activation_decode)
    if activation_decode != "mainloop":
        return False
    why = None
    if not nvfp4_decodes_activations(cfg):
        why = f"config {cfg.key()} is not cooperative with tile_n a multiple of 128"
    elif a.shape[1] % 32:
        why = f"K = {a.shape[1]} is not a multiple of 32"
    elif not a.qdata.is_contiguous() or a.qdata.data_ptr() % 16 or a.scales.data_ptr() % 16:
        why = "a's codes or scales are not contiguous and 16-byte aligned"
    if why:
        raise ValueError(f"activation_decode='mainloop' cannot run this GEMM: {why}")
    return True


def _tokens_on_a_refusal(a) -> str | None:
    """Why the NVFP4 activations `a` cannot go on A (tokens on A), or None."""
    if not isinstance(a, NVFP4Tensor):
        return "a is not NVFP4 (tokens on A decode NVFP4 activations)"
    if a.shape[1] % 32:
        return f"K = {a.shape[1]} is not a multiple of 32"
    if not a.qdata.is_contiguous() or a.qdata.data_ptr() % 16 or a.scales.data_ptr() % 16:
        return "a's codes or scales are not contiguous and 16-byte aligned"
    return None


def _tokens_on_a(a, cfg: GemmConfig, activation_decode: str) -> bool:
    """Whether W4A4 runs with the tokens on A (activation_decode "registers", or a config with swap_ab=False): an
    error naming why where it cannot. (activation_decode: checked by gemm_nvfp4 first.)"""
    if activation_decode != "registers" and cfg.swap_ab:
        return False
    why = _tokens_on_a_refusal(a)
    if why is None and cfg.swap_ab:
        why = f"config {cfg.key()} is swapped (the weights on A); tokens on A take swap_ab=False"
    elif why is None and activation_decode not in ("auto", "registers"):
        why = f"config {cfg.key()} puts the tokens on A, which decodes them in registers, not by {activation_decode!r}"
    if why:
        raise ValueError(f"W4A4 with the tokens on A cannot run this GEMM: {why}")
    return True


def _tokens_on_a_by_default(a, M: int, N: int, K: int, activation_decode: str, configs, num_sms: int) -> bool:
    """Whether a call without a config runs with the tokens on A: W4A4 where activation_decode is "registers", or
    "auto" and the configs' rule (nvfp4_tokens_on_a) holds and nothing refuses it (no exact rows to run W4A16 on);
    W4A16 (bf16 activations, "auto") where nvfp4_w4a16_on_a holds."""
    if isinstance(a, NVFP4Tensor):
        return activation_decode == "registers" or (
            activation_decode == "auto" and exact_rows(a) is None and configs.nvfp4_tokens_on_a(M, N, K)
            and _tokens_on_a_refusal(a) is None)
    return (activation_decode == "auto" and a.dtype == torch.bfloat16
            and configs.nvfp4_w4a16_on_a(M, N, K, num_sms=num_sms))


def gemm_nvfp4(a, b, *, bias=None, out_dtype=torch.bfloat16, epilogue=None, out=None,
               config: GemmConfig | SkinnyConfig | None = None, activation_decode: str = "auto") -> torch.Tensor:
    """y [M, N] = epilogue(alpha_a[m] * alpha_b[n] * (A @ dequant(b)^T) + bias[n]) on CUDA.

    config: None (the heuristic, default_nvfp4_skinny_config: the skinny kernel up to 16 tokens, to 32 where
    N * K <= 2^26, to 64 where N * K <= 2^25 or K <= 12288 and N <= 24576, and above in blocks of tokens on
    small layers (skinny_blocks_config), where it can run, unless SCALEMM_NVFP4_SKINNY=0; else the CUTLASS
    kernel, with the tokens on A where nvfp4_tokens_on_a (W4A4) or nvfp4_w4a16_on_a (bf16 activations) says so),
    a SkinnyConfig or a GemmConfig (the CUTLASS kernel; swap_ab=False puts the tokens on A: W4A4 decodes
    them in registers, W4A16 (bf16 activations only) runs the weights decoded to bf16 by the pass through a
    bf16 x bf16 GEMM, _gemm_weights_decoded).

    a: bf16/fp16 [M, K] contiguous (W4A16, alpha_a = 1) or an NVFP4Tensor with a rowwise copy (W4A4; the
    CUTLASS kernel takes it decoded by a bf16 pass, in its mainloop, or in registers with the tokens on A and the
    weights decoded by the pass instead: activation_decode, ACTIVATION_DECODES).
    b: NVFP4Tensor [N, K] with a rowwise copy (nn.Linear weight layout), alpha per tensor or per row.
    Validated by the caller (scalemm.gemm)."""
    _check_activation_decode(activation_decode, config)
    device = b.qdata.device
    configs = configs_for(device)  # the capability check; the heuristic of the GPU's architecture
    N, K = b.shape
    M = a.shape[0]
    operands = [(b.qdata, "b.qdata"), (b.scales, "b.scales")] + (
        [(a.qdata, "a.qdata"), (a.scales, "a.scales")] if isinstance(a, NVFP4Tensor) else [(a, "a")])
    if isinstance(config, SkinnyConfig):
        why = skinny_problem(M, N, K, config, operands)
        if why:
            raise ValueError(f"config={config.label()} cannot run this GEMM: {why}")
    elif config is None and activation_decode == "auto" and skinny_by_default():  # (an explicit decode: CUTLASS)
        # NVFP4 activations with their quantizer's exact rows run as W4A16 on those (bf16_rows); without, the rule
        # for NVFP4 activations (the kernels that decode them in registers, or the pass)
        decodes = isinstance(a, NVFP4Tensor) and exact_rows(a) is None
        skinny = configs.default_nvfp4_skinny_config(M, N, K, nvfp4_activations=decodes, num_sms=_num_sms(device))
        if skinny is not None and skinny.mainloop == "resident":
            skinny = _resident_where_it_pays(skinny, M, N, K, out.dtype if out is not None else out_dtype, epilogue,
                                             device.index, configs)
        if skinny is not None and skinny_problem(M, N, K, skinny, operands) is None:
            config = skinny
    if out is None:
        out = torch.empty((M, N), dtype=out_dtype, device=device)
    if M == 0 or N == 0:
        return out
    if isinstance(config, SkinnyConfig):  # W4A4 included: the skinny kernel decodes NVFP4 activations itself
        return _gemm_skinny(a, b, bias, out, config, epilogue)
    cfg = config or configs.default_nvfp4_config(M, N, K, num_sms=_num_sms(device))
    if config is None and activation_decode == "mainloop" and isinstance(a, NVFP4Tensor):
        cfg = configs.nvfp4_mainloop_decode_config(cfg)
    if config is None and _tokens_on_a_by_default(a, M, N, K, activation_decode, configs, _num_sms(device)):
        on_a = (configs.default_nvfp4_tokens_on_a_config if isinstance(a, NVFP4Tensor)
                else configs.default_nvfp4_w4a16_on_a_config)
        cfg = on_a(M, N, K, num_sms=_num_sms(device))
    if not isinstance(a, NVFP4Tensor) and not cfg.swap_ab and activation_decode != "registers":
        return _gemm_weights_decoded(a, b, bias, out, cfg, epilogue)  # ("registers" on bf16: _tokens_on_a refuses)
    x_scales = None
    if _tokens_on_a(a, cfg, activation_decode):
        # the kernel's problem is (M, N, K): the activations' codes and scales take Nvfp4GemmArgs' weight fields,
        # and the weights' exact bf16 decode (a temporary of N x K) its x (nvfp4_gemm.cuh)
        scale_a, act, codes, code_scales = a.alpha, torch.bfloat16, a.qdata, a.scales
        x, n, tokens = dequantize_rows_bf16(b), M, N
    else:
        if isinstance(a, NVFP4Tensor):
            scale_a = a.alpha
            if _decode_in_mainloop(a, cfg, activation_decode):
                x, act, x_scales = a.qdata, "nvfp4", a.scales.data_ptr()
            else:
                x = bf16_rows(a)
                act = x.dtype
        else:
            scale_a, x, act = _one(device), a, a.dtype
        # held until the launch: made inside a CUDA-graph capture, the copy is not cached (_prepared_weight), and
        # a dropped one's memory went to the workspace allocated below (the kernel then read its weights from it)
        codes, code_scales, n, tokens = _prepared_weight(b.qdata), b.scales, N, M
    tree = epi.scaled(out_dtype, bias=True, activation=epilogue)
    spec, emitted = nvfp4_gemm_kernel_spec(cfg.compiled(), act_dtype=act, out_dtype=out_dtype, epilogue=tree)
    inputs = {"scale_a": scale_a.reshape(-1), "scale_b": b.alpha.reshape(-1), "bias": bias}
    args = abi.Nvfp4GemmArgs(
        weight=codes.data_ptr(), weight_scales=code_scales.data_ptr(), x=x.data_ptr(),
        x_scales=x_scales, d=out.data_ptr(), n=n, tokens=tokens, k=K, k_pad=-(-K // CHUNK_K) * CHUNK_K,
        scale_cols=-(-(K // 16) // 4) * 4, device=device.index, raster={"m": 0, "n": 1, "auto": 2}[cfg.raster],
        swizzle=cfg.swizzle, splits=1, stream=torch._C._cuda_getCurrentRawStream(device.index))
    for i, leaf in enumerate(emitted.leaves):
        t = inputs[leaf.name]
        if t is not None:
            args.leaf_ptrs[i], args.leaf_is_vector[i] = t.data_ptr(), int(t.numel() > 1)
    ws = None
    if cfg.stream_k:
        ws = torch.empty(_gemm_workspace_bytes(spec, n, tokens, K, device.index, args.raster, args.swizzle,
                                               args.splits), dtype=torch.uint8, device=device)
        args.workspace, args.workspace_bytes = ws.data_ptr(), ws.numel()
    with on_device(device):
        _gemm_launcher(spec)(ctypes.byref(args))
    return out


def _gemm_weights_decoded(a, b, bias, out, cfg: GemmConfig, epilogue):
    """W4A16 with the tokens on A (a config with swap_ab=False): the weights decoded exactly to bf16 by the pass (a
    temporary of N x K), then a bf16 x bf16 CUTLASS GEMM (templates/gemm_sm90.cu, the FP8 GEMM's kernel with bf16
    operands) with the same epilogue: alpha_b per column in fp32 on the accumulator (alpha_a = 1)."""
    if a.dtype != torch.bfloat16:
        raise ValueError(f"W4A16 with the tokens on A (config {cfg.key()}, swap_ab=False) takes bf16 activations (the "
                         f"weights decode to bf16), got {a.dtype}: pass a swapped config or bf16 activations")
    M, N, K = a.shape[0], b.shape[0], b.shape[1]
    tree = epi.scaled(out.dtype, bias=True, activation=epilogue)
    leaves, launch, workspace = kernel_plan(cfg.compiled(), tree, fast_accum=False, out_dtype=out.dtype, element="bf16")
    w = dequantize_rows_bf16(b)
    inputs = {"scale_a": _one(out.device), "scale_b": b.alpha.reshape(-1), "bias": bias}
    launch_planned(cfg, leaves, launch, workspace, a, w, out, inputs, M, N, K, out.device)
    return out


DECODE_SHAPES = ((4096, 4096), (8192, 8192), (14336, 4096), (4096, 14336))  # N, K of perf/nvfp4_explore.py


def build_set(name: str = "tests") -> list[KernelSpec]:
    """NVFP4 kernels to prebuild: what the GPU tests and perf/nvfp4_explore.py launch ("tests",
    "explore", "all"), or only what the skinny GPU tests and the decode benchmark and profile need
    ("decode": a build of about a minute on a 16-core device machine instead of five)."""
    bf16, f16, f32 = torch.bfloat16, torch.float16, torch.float32
    if name == "decode":
        cases = {(default_nvfp4_config(M, N, K), bf16, bf16) for M in (1, 8, 16, 32, 64) for N, K in DECODE_SHAPES}
        specs = [nvfp4_gemm_kernel_spec(c, act_dtype=a, out_dtype=o, epilogue=epi.scaled(o))[0]
                 for c, a, o in sorted(cases, key=lambda c: (c[0].key(), str(c[1]), str(c[2])))]
        grouped = {default_nvfp4_grouped_config(G * per, G, 1, 1) for G, per in ((128, 1), (64, 2), (128, 8))}
        specs += [nvfp4_grouped_kernel_spec(c, act_dtype=bf16, out_dtype=bf16, epilogue=epi.scaled(bf16))[0]
                  for c in sorted(grouped, key=lambda c: c.key())]
        return specs + _skinny_build_specs() + [dequant_kernel_spec()]
    cases = set()
    for M in (1, 7, 8, 16, 100, 129, 300, 333, 2048, 4096):
        for N, K in ((6144, 4096), (4096, 14336), (576, 7168), (2048, 768), (1000, 2064), (2048, 1024),
                     (4096, 2064), (256, 512), (1536, 3136)):
            cases.add((default_nvfp4_config(M, N, K), bf16, f32))
    for M in (1, 16, 33, 300):
        for act in (bf16, f16):
            for out in (bf16, f16, f32):
                cases.add((default_nvfp4_config(M, 2048, 1024), act, out))
    for n, cm, sched, sk in [(16, 1, "cooperative", True), (16, 1, "cooperative", False), (64, 1, "cooperative", False),
                             (128, 1, "cooperative", False), (256, 1, "cooperative", False),
                             (128, 1, "pingpong", False), (16, 1, "pingpong", False), (128, 2, "cooperative", False),
                             (128, 1, "cooperative", True)]:
        cases.add((GemmConfig(128, n, 64, cm, 1, sched, swap_ab=True, stream_k=sk), bf16, f32))
    for M in (100, 129, 256):  # W4A4 on the quantizer's exact rows (test_w4a4_exact_rows_same_bits)
        for N, K in ((4096, 4096), (576, 7168), (1000, 2080)):
            cases.add((default_nvfp4_config(M, N, K), bf16, bf16))
    for M in (32, 64):  # the CUTLASS kernel's pick at decode, beside the skinny kernel (perf/nvfp4_explore.py)
        for N, K in DECODE_SHAPES:
            cases.add((default_nvfp4_config(M, N, K), bf16, bf16))
    if name in ("explore", "all"):
        for M in (1, 16, 64, 128, 4096):
            for N, K in DECODE_SHAPES:
                cases.add((default_nvfp4_config(M, N, K), bf16, bf16))
            tn = [16] if M <= 16 else [32, 64] if M <= 64 else [128] if M <= 128 else list(NVFP4_WIDE_TOKEN_WIDTHS)
            for n in tn:
                for sched, sk in (("cooperative", False), ("cooperative", True), ("pingpong", False)):
                    if sched == "cooperative" or n <= 128:
                        cases.add((GemmConfig(128, n, 64, 1, 1, sched, swap_ab=True, stream_k=sk), bf16, bf16))
            if M > 128:
                cases.add((GemmConfig(128, 256, 64, 2, 1, "cooperative", swap_ab=True), bf16, bf16))
    specs = [nvfp4_gemm_kernel_spec(c, act_dtype=a, out_dtype=o, epilogue=epi.scaled(o))[0] for c, a, o in sorted(
        cases, key=lambda c: (c[0].key(), str(c[1]), str(c[2])))]
    specs += [nvfp4_gemm_kernel_spec(default_nvfp4_config(M, 2048, 1024), act_dtype=a, out_dtype=o,
                                     epilogue=epi.scaled(o, activation="relu"))[0]
              for M in (1, 33, 300) for a in (bf16, f16) for o in (bf16, f16, f32)]
    # W4A4 decoded in the mainloop (activation_decode="mainloop"): tests/test_nvfp4_gemm_gpu.py's configs (fp32
    # out; with bias and gelu, bf16 out) and the benchmarks' (bf16 out), with the W4A16 kernels the pass feeds.
    fused = [GemmConfig(128, n, 64, cm, 1, "cooperative", swap_ab=True, stream_k=sk)
             for n, cm, sk in [(128, 1, False), (256, 1, False), (256, 1, True), (128, 2, False)]]
    specs += [nvfp4_gemm_kernel_spec(c, act_dtype="nvfp4", out_dtype=f32, epilogue=epi.scaled(f32))[0] for c in fused]
    specs += [nvfp4_gemm_kernel_spec(c, act_dtype="nvfp4", out_dtype=bf16, epilogue=epi.scaled(bf16, **kw))[0]
              for c in fused[:2] for kw in ({}, {"activation": "gelu"})]
    specs += [nvfp4_gemm_kernel_spec(c, act_dtype=bf16, out_dtype=f32, epilogue=epi.scaled(f32))[0]
              for c in fused if c not in {cfg for cfg, _, _ in cases}]  # the pass beside it
    # W4A4 with the tokens on A (tests/test_nvfp4_gemm_gpu.py: its configs, fp32 out; the default's picks with bias
    # and gelu, bf16 out; the graph replay's)
    on_a = [GemmConfig(128, n, 64, cm, 1, "cooperative", swap_ab=False, stream_k=sk)
            for n, cm, sk in [(64, 1, False), (128, 1, True), (192, 1, False), (256, 1, False), (128, 2, False)]]
    specs += [nvfp4_gemm_kernel_spec(c, act_dtype=bf16, out_dtype=f32, epilogue=epi.scaled(f32))[0] for c in on_a]
    specs += [nvfp4_gemm_kernel_spec(default_nvfp4_tokens_on_a_config(M, N, K), act_dtype=bf16, out_dtype=o,
                                     epilogue=epi.scaled(o, activation=act))[0]
              for M, N, K, o, act in [(4096, 576, 7168, bf16, "gelu"), (2048, 1000, 2080, bf16, "gelu"),
                                      (2048, 576, 7168, f32, None)]]
    # W4A16 with the tokens on A: the gemm_sm90.cu kernels with bf16 operands (tests/test_nvfp4_gemm_gpu.py's configs,
    # fp32 out; its bias + gelu and graph replay config, bf16 out)
    w4a16_on_a = [(GemmConfig(128, n, 64, 1, 1, "cooperative", swap_ab=False, stream_k=sk), f32, None)
                  for n, sk in [(64, False), (128, True), (192, False), (256, False)]]
    w4a16_on_a.append((GemmConfig(128, 192, 64, 1, 1, "cooperative", swap_ab=False, stream_k=True), bf16, "gelu"))
    # the fitted weight-tile widths (tests/test_nvfp4_gemm_gpu.py, W4A4 and W4A16, fp32 out) and W4A16's default
    # on A (bias + gelu, bf16 out)
    fitted = [GemmConfig(128, n, 64, 1, 1, "cooperative", swap_ab=False)
              for n in NVFP4_TOKENS_ON_A_WIDTHS if n not in (64, 128, 160, 192, 224, 256)]
    specs += [nvfp4_gemm_kernel_spec(c, act_dtype=bf16, out_dtype=f32, epilogue=epi.scaled(f32))[0] for c in fitted]
    w4a16_on_a += [(c, f32, None) for c in fitted]
    w4a16_on_a += [(default_nvfp4_w4a16_on_a_config(M, N, K), bf16, "gelu") for M, N, K in [(4096, 576, 7168),
                                                                                          (4096, 512, 3584),
                                                                                          (12000, 288, 2560),
                                                                                          (8192, 320, 960)]]
    w4a16_on_a += [(default_nvfp4_w4a16_on_a_config(M, N, K), f32, None) for M in (2048, 4096) for N, K in  # defaults
                   ((576, 7168), (1000, 2064)) if nvfp4_w4a16_on_a(M, N, K)]
    specs += [gemm_kernel_spec(c, fast_accum=False, out_dtype=o, epilogue=epi.scaled(o, activation=act),
                               element="bf16")[0] for c, o, act in w4a16_on_a]
    grouped_fused = [GemmConfig(128, n, 64, 1, 1, "cooperative", swap_ab=True) for n in (128, 256)]
    specs += [nvfp4_grouped_kernel_spec(c, act_dtype=act, out_dtype=o, epilogue=epi.scaled(o))[0]
              for c in grouped_fused for act in ("nvfp4", bf16) for o in (f32, bf16)]
    grouped = {(default_nvfp4_grouped_config(T, G, 1, 1), torch.float32) for T, G in
               ((517, 8), (777, 1), (8, 16), (1600, 64), (200, 8), (207, 8))}
    grouped.add((default_nvfp4_grouped_config(128, 64, 1, 1), bf16))  # decode MoE, beside the skinny kernel
    if name in ("explore", "all"):
        grouped |= {(GemmConfig(128, n, 64, 1, 1, "cooperative", swap_ab=True), bf16) for n in (16, 32, 64, 128, 256)}
    specs += [nvfp4_grouped_kernel_spec(c, act_dtype=bf16, out_dtype=o, epilogue=epi.scaled(o))[0]
              for c, o in sorted(grouped, key=lambda c: (c[0].key(), str(c[1])))]
    specs += _skinny_build_specs() + [dequant_kernel_spec()]
    return list({spec.name: spec for spec in specs}.values())


def _skinny_build_specs() -> list[KernelSpec]:
    """The skinny kernels the GPU tests, sanitize_run.py and the decode benchmark launch."""
    bf16, f16, f32 = torch.bfloat16, torch.float16, torch.float32
    skinny = {(t, bf16, o, None) for t in (1, 2, 4, 8) for o in (bf16, f32)}
    skinny |= {(t, a, o, "relu") for t in (1, 2) for a in (bf16, f16) for o in (bf16, f16, f32)}
    skinny |= {(t, f16, f32, None) for t in (1, 8)} | {(1, bf16, bf16, act) for act in ("gelu", "silu")}
    skinny |= {(t, "nvfp4", o, None) for t in (1, 2, 4, 8) for o in (bf16, f32)} | {(1, "nvfp4", bf16, "relu")}
    specs = [skinny_kernel_spec(SkinnyConfig(m), act_dtype=a, out_dtype=o, activation=act)
             for m, a, o, act in sorted(skinny, key=str)]
    specs += [skinny_kernel_spec(SkinnyConfig(t, mainloop="wgmma"), act_dtype=a, out_dtype=o, activation="relu")
              for t in (2, 8) for a in (bf16, f16) for o in (bf16, f16, f32)]  # test_decode_default_dispatch
    return specs + [skinny_kernel_spec(SkinnyConfig(m, mainloop=loop), act_dtype=a, out_dtype=o)  # the other loops
                    for loop in SKINNY_MAINLOOPS if loop != SKINNY_DEFAULT_MAINLOOP
                    for m in ((1,) if loop == "resident" else (1, 2, 4, 8))
                    for a in ((bf16,) if loop == "wgmma" else (bf16, "nvfp4")) for o in (bf16, f32)]


# ---------------------------------------------------------------------------------------
# grouped (MoE)
# ---------------------------------------------------------------------------------------

def nvfp4_grouped_kernel_spec(config: GemmConfig, *, act_dtype, out_dtype, epilogue: epi.Node):
    return _grouped_spec(config, _act_name(act_dtype), epi.dtype_name(out_dtype), epilogue)


def _check_grouped_config(config) -> None:
    if isinstance(config, GemmConfig) and config.stream_k:
        raise ValueError("grouped GEMMs use CUTLASS's grouped persistent scheduler, not stream-K")


@functools.lru_cache(maxsize=None)
def _grouped_spec(config, act_name, out_name, tree):
    _check_grouped_config(config)
    emitted = epi.emit(tree, out_name, swap_ab=True, grouped=True)
    digest = hashlib.sha256(emitted.evt_type.encode()).hexdigest()[:8]
    name = f"nvfp4_grouped_{config.key()}_{act_name}_{out_name}_evt{digest}"
    params = nvfp4_cpp(config, act_dtype=act_name, out_dtype=out_name, epilogue=emitted, grouped=True)
    return KernelSpec(name=name, template="nvfp4_grouped_gemm_sm90.cu", params=params), emitted


@functools.lru_cache(maxsize=None)
def _grouped_launcher(spec: KernelSpec):
    return build(spec).function("scalemm_nvfp4_grouped_gemm", [ctypes.POINTER(abi.Nvfp4GroupedGemmArgs)])


def _grouped_workspace_bytes(G: int) -> int:
    # setup arrays (problem shapes, row starts, D pointers and strides, 8 leaf pointer arrays, each
    # 256-byte aligned) + CUTLASS's own (per-SM epilogue TMA descriptors, scheduler): generous, cheap.
    return G * 1024 + 4 * 256 * 16 + (4 << 20)


def grouped_gemm_nvfp4(a, b, offsets, *, bias=None, out_dtype=torch.bfloat16, epilogue=None, out=None,
                       config: GemmConfig | SkinnyConfig | None = None,
                       activation_decode: str = "auto") -> torch.Tensor:
    """out[rows of g] = epilogue(alpha_a * alpha_b[g] * (A[rows of g] @ dequant(W_g)^T) + bias[g]) on CUDA.

    a: bf16/fp16 [T, K] (W4A16) or a GroupedNVFP4Tensor with a rowwise copy (W4A4; decoded by a bf16 pass ("auto",
    "pass") or in the mainloop ("mainloop"): activation_decode, ACTIVATION_DECODES; no grouped kernel takes the
    tokens on A, so "registers" is refused).
    b: GroupedNVFP4Tensor of stacked expert weights (scalemm.quantize_nvfp4_stacked): G experts of N rows.
    offsets: int32 [G] cumulative row ends on the device. Validated by the caller."""
    _check_activation_decode(activation_decode, config)
    if activation_decode == "registers":
        raise ValueError("activation_decode='registers' (the tokens on A) is for dense W4A4 GEMMs; grouped ones take "
                         "'auto' / 'pass' or 'mainloop'")
    device = b.qdata.device
    configs = configs_for(device)  # the capability check; the heuristic of the GPU's architecture
    G, N, K = b.offsets.numel(), b.group_rows, b.shape[1]
    T = a.shape[0]
    operands = [(b.qdata, "b.qdata"), (b.scales, "b.scales")] + (
        [(a.qdata, "a.qdata"), (a.scales, "a.scales")] if isinstance(a, GroupedNVFP4Tensor) else [(a, "a")])
    if isinstance(config, SkinnyConfig):
        why = skinny_problem(T, N, K, config, operands, groups=G)
        if why:
            raise ValueError(f"config={config.label()} cannot run this grouped GEMM: {why}")
    elif config is None and activation_decode == "auto" and skinny_by_default():
        # decode: few rows per expert (default_nvfp4_grouped_skinny_config); an explicit decode names a CUTLASS kernel's
        skinny = configs.default_nvfp4_grouped_skinny_config(T, G, N, K)
        if skinny is not None and skinny_problem(T, N, K, skinny, operands, groups=G) is None:
            config = skinny
    if isinstance(config, SkinnyConfig):  # W4A4 too (decoded by the mma.sync loops, or by a pass for wgmma)
        if out is None:
            out = torch.empty((T, N), dtype=out_dtype, device=device)
        if T == 0 or N == 0:
            return out
        return _gemm_skinny(a, b, bias, out, config, epilogue, offsets=offsets)
    M, PG, PGV, SH, ONE, NULL = (abi.kLeafPerRow, abi.kLeafPerGroup, abi.kLeafPerGroupVec, abi.kLeafShared,
                                 abi.kLeafOne, abi.kLeafNull)
    if out is None:
        out = torch.empty((T, N), dtype=out_dtype, device=device)
    if T == 0 or N == 0:
        return out
    cfg = config or configs.default_nvfp4_grouped_config(T, G, N, K)
    if config is None and activation_decode == "mainloop" and isinstance(a, GroupedNVFP4Tensor):
        cfg = configs.nvfp4_mainloop_decode_config(cfg)
    x_scales = x_sf_offsets = None
    if isinstance(a, GroupedNVFP4Tensor):
        scale_a = (a.alpha, M if a.scaling == "token" else PG, 0)
        if _decode_in_mainloop(a, cfg, activation_decode):
            x, act, x_scales, x_sf_offsets = a.qdata, "nvfp4", a.scales.data_ptr(), a.sf_offsets.data_ptr()
        else:
            x = bf16_rows(a, offsets=offsets)
            act = x.dtype
    else:
        x, act, scale_a = a, a.dtype, (_one(device), ONE, 0)
    scale_b = (b.alpha, PGV if b.scaling == "token" else PG, N)
    bias_leaf = (None, NULL, 0) if bias is None else (bias, PGV if bias.dim() == 2 else SH, N)
    tree = epi.scaled(out_dtype, bias=True, activation=epilogue)
    spec, emitted = nvfp4_grouped_kernel_spec(cfg.compiled(), act_dtype=act, out_dtype=out_dtype, epilogue=tree)
    inputs = {"scale_a": scale_a, "scale_b": scale_b, "bias": bias_leaf}
    ws = torch.empty(_grouped_workspace_bytes(G), dtype=torch.uint8, device=device)
    weight = _prepared_weight(b.qdata)  # held until the launch (see gemm_nvfp4)
    args = abi.Nvfp4GroupedGemmArgs(
        weight=weight.data_ptr(), weight_scales=b.scales.data_ptr(), x=x.data_ptr(),
        x_scales=x_scales, x_sf_offsets=x_sf_offsets, d=out.data_ptr(), offsets=offsets.data_ptr(), groups=G, n=N, tokens=T, k=K, k_pad=-(-K // CHUNK_K) * CHUNK_K,
        scale_cols=-(-(K // 16) // 4) * 4, leaf_count=len(emitted.leaves), workspace=ws.data_ptr(),
        workspace_bytes=ws.numel(), device=device.index, stream=torch._C._cuda_getCurrentRawStream(device.index))
    for i, leaf in enumerate(emitted.leaves):
        t, mode, stride = inputs[leaf.name]
        args.leaf_base[i] = None if t is None else t.data_ptr()
        args.leaf_mode[i], args.leaf_group_stride[i] = mode, stride
        args.leaf_elem_bytes[i] = 0 if t is None else t.element_size()
    with on_device(device):
        _grouped_launcher(spec)(ctypes.byref(args))
    return out


# ---------------------------------------------------------------------------------------
# validated entry points (scalemm.gemm / scalemm.grouped_gemm dispatch here for NVFP4 weights)
# ---------------------------------------------------------------------------------------

_ACTIVATIONS = (None, "relu", "gelu", "silu")


def _check_options(scale_a, scale_b, epilogue, epilogue_inputs, fast_accum, out_dtype, config, scale_a_per=None,
                   scale_b_per=None, config_types=(GemmConfig,)):
    if scale_a is not None or scale_b is not None or scale_a_per is not None or scale_b_per is not None:
        raise ValueError("b is an NVFP4 weight: the global scales come from the containers (an NVFP4 a carries its "
                         "own alpha, a bf16/fp16 a has none); pass scale_a=None, scale_b=None, scale_a_per=None, "
                         "scale_b_per=None")
    if epilogue_inputs:
        raise ValueError("NVFP4 GEMMs take epilogue=None or an activation name; epilogue_inputs is not supported")
    if not (epilogue is None or isinstance(epilogue, str)):
        raise TypeError(f"NVFP4 GEMMs take epilogue=None or one of 'relu', 'gelu', 'silu', got {type(epilogue).__name__}")
    if epilogue not in _ACTIVATIONS:
        raise ValueError(f"epilogue activation must be one of 'relu', 'gelu', 'silu', got {epilogue!r}")
    check_gemm_options(out_dtype, fast_accum, config, config_types=config_types)


def _check_activation_rows(a, name, K):
    if not isinstance(a, torch.Tensor):
        raise TypeError(f"{name} must be a bf16/fp16 tensor or an NVFP4 container, got {type(a).__name__}")
    if a.dtype not in _ACT_DTYPES:
        raise TypeError(f"{name} must be bfloat16 or float16 (or an NVFP4 container) for an NVFP4 weight, got {a.dtype}")
    if a.dim() != 2 or not a.is_contiguous():
        raise ValueError(f"{name} must be a contiguous 2-D [rows, K] tensor, got shape {tuple(a.shape)}")
    if a.shape[1] != K:
        raise ValueError(f"{name} has K = {a.shape[1]}, the weight K = {K}")


def _check_out(out, shape, out_dtype, device):
    if out is not None and (not isinstance(out, torch.Tensor) or out.dtype != out_dtype or tuple(out.shape) != shape
                            or out.device != device or not out.is_contiguous()):
        raise ValueError(f"out must be a contiguous {list(shape)} tensor of {out_dtype} on {device}")


def _check_layout(N, K, out_dtype, tensors):
    """The kernels' layout rules, checked on every device (CPU and CUDA callers get the same errors)."""
    if K == 0:
        raise ValueError("K = 0: NVFP4 GEMMs need K >= 16 (one block of 16 along K)")
    check_n(N, out_dtype)
    for t, n in tensors:
        if isinstance(t, torch.Tensor):
            check_aligned(t, n)


def _operand_device(a, b, K: int) -> torch.device:
    """The device both operands are on: a's (an NVFP4 container its caller has checked, or a bf16 / fp16 [M, K]
    activation, checked here), which b's must be."""
    if isinstance(a, (NVFP4Tensor, GroupedNVFP4Tensor)):
        device = a.qdata.device
    else:
        _check_activation_rows(a, "a", K)
        device = a.device
    if b.qdata.device != device:
        raise ValueError(f"a is on {device}, b on {b.qdata.device}")
    return device


def gemm(a, b, *, scale_a=None, scale_b=None, bias=None, out_dtype=torch.bfloat16, epilogue=None,
         epilogue_inputs=None, out=None, fast_accum=False, config=None):
    """scalemm.gemm for an NVFP4Tensor weight b [N, K]: validated here, then the CUDA kernel or, for CPU
    tensors, the reference (exact dequantization, fp32 product, the epilogue in fp32)."""
    _check_options(scale_a, scale_b, epilogue, epilogue_inputs, fast_accum, out_dtype, config,
                   config_types=(GemmConfig, SkinnyConfig))
    if b.qdata is None or b.rht:
        raise ValueError("b must be an NVFP4Tensor with a rowwise copy and no RHT (quantize_nvfp4(w))")
    N, K = b.shape
    if isinstance(a, NVFP4Tensor):
        if a.qdata is None or a.rht:
            raise ValueError("a must be an NVFP4Tensor with a rowwise copy and no RHT")
        if a.shape[1] != K:
            raise ValueError(f"a is [M, K] = {list(a.shape)} and b is [N, K] = {list(b.shape)}: K differs")
    device = _operand_device(a, b, K)
    M = a.shape[0]
    if bias is not None and (not isinstance(bias, torch.Tensor) or bias.dtype != out_dtype or tuple(bias.shape) != (N,)
                             or bias.device != device or not bias.is_contiguous()):
        raise ValueError(f"bias must be a contiguous [N] = [{N}] tensor of {out_dtype} on {device}")
    _check_out(out, (M, N), out_dtype, device)
    _check_layout(N, K, out_dtype, [(a, "a"), (out, "out")])
    if device.type == "cpu":
        if isinstance(a, NVFP4Tensor):
            x, alpha_a = dequantize_nvfp4(a, torch.float32, apply_alpha=False), a.alpha
        else:
            x, alpha_a = a.float(), torch.ones((), dtype=torch.float32)
        acc = x @ dequantize_nvfp4(b, torch.float32, apply_alpha=False).T
        tree = epi.scaled(out_dtype, bias=True, activation=epilogue)
        res = epi.evaluate(tree, acc, {"scale_a": alpha_a.reshape(-1), "scale_b": b.alpha.reshape(-1), "bias": bias},
                           out_dtype)
        return res if out is None else out.copy_(res)
    if device.type != "cuda":
        raise ValueError(f"NVFP4 GEMMs run on CUDA or CPU tensors, got {device}")
    return gemm_nvfp4(a, b, bias=bias, out_dtype=out_dtype, epilogue=epilogue, out=out, config=config)


def grouped_gemm(a, b, offsets, *, scale_a=None, scale_b=None, scale_a_per=None, scale_b_per=None, bias=None,
                 out_dtype=torch.bfloat16, epilogue=None, epilogue_inputs=None, out=None, fast_accum=False, config=None):
    """scalemm.grouped_gemm for stacked NVFP4 expert weights b (quantize_nvfp4_stacked): validated here, then
    the CUDA kernel or, for CPU tensors, reference.grouped_gemm_reference on the exact dequantized operands."""
    _check_options(scale_a, scale_b, epilogue, epilogue_inputs, fast_accum, out_dtype, config, scale_a_per,
                   scale_b_per, config_types=(GemmConfig, SkinnyConfig))
    _check_grouped_config(config)
    if b.qdata is None or b.group_rows is None or b.layout != "rows":
        raise ValueError("b must be stacked NVFP4 expert weights from scalemm.quantize_nvfp4_stacked")
    G, N, K = b.offsets.numel(), b.group_rows, b.shape[1]
    if isinstance(a, GroupedNVFP4Tensor):
        if a.qdata is None or a.layout != "rows":
            raise ValueError("a must be the rowwise ('rows' layout) copy of quantize_nvfp4_grouped")
        offsets = grouped_activation_offsets(a, offsets)
        if a.shape[1] != K:
            raise ValueError(f"a has K = {a.shape[1]}, the weights K = {K}")
    device = _operand_device(a, b, K)
    if not isinstance(offsets, torch.Tensor) or offsets.dtype != torch.int32 or tuple(offsets.shape) != (G,) \
            or offsets.device != device or not offsets.is_contiguous():
        raise ValueError(f"offsets must be a contiguous int32 tensor of shape [G] = [{G}] (one per expert of b) on "
                         f"{device}")
    T = a.shape[0]
    check_host_offsets(offsets, T, f"T = {T} (the rows of 'a')")
    if bias is not None and (not isinstance(bias, torch.Tensor) or bias.dtype != out_dtype or bias.device != device
                             or tuple(bias.shape) not in ((G, N), (N,)) or not bias.is_contiguous()):
        raise ValueError(f"bias must be a contiguous [G, N] or [N] tensor of {out_dtype} on {device}")
    _check_out(out, (T, N), out_dtype, device)
    _check_layout(N, K, out_dtype, [(a, "a"), (out, "out")])
    if device.type == "cpu":
        if isinstance(a, GroupedNVFP4Tensor):
            x = dequantize_nvfp4_grouped(a, torch.float32, apply_alpha=False)
            sa, per_group = a.alpha, ({"scale_a"} if a.scaling == "tensor" else set())
        else:
            x, sa, per_group = a.float(), torch.ones((), dtype=torch.float32), set()
        w = dequantize_nvfp4_grouped(b, torch.float32, apply_alpha=False).reshape(G, N, K)
        sb = b.alpha if b.scaling == "tensor" else b.alpha.reshape(G, N)
        per_group |= {"scale_b"} if b.scaling == "tensor" else set()
        tree = epi.scaled(out_dtype, bias=True, activation=epilogue)
        res = grouped_gemm_reference(x, w, offsets, tree, {"scale_a": sa, "scale_b": sb, "bias": bias}, out_dtype,
                                     per_group=per_group, accum_dtype=torch.float32)
        out = torch.empty((T, N), dtype=out_dtype) if out is None else out
        last = int(layout.group_bounds(offsets, T)[1][-1]) if G else 0
        out[:last] = res[:last]
        return out
    if device.type != "cuda":
        raise ValueError(f"NVFP4 GEMMs run on CUDA or CPU tensors, got {device}")
    return grouped_gemm_nvfp4(a, b, offsets, bias=bias, out_dtype=out_dtype, epilogue=epilogue, out=out, config=config)
