"""scalemm.grouped_gemm: FP8 grouped (MoE) GEMM driven by device-side offsets."""
from __future__ import annotations

import ctypes
import functools
import hashlib

import torch

from . import epilogues as epi
from .cutlass_kernels.configs import GemmConfig, default_grouped_config
from .gemm import _OUT_DTYPES, _PER_16_BYTES, _check_aligned, _unwrap
from .jit import KernelSpec, build, i64, ptr

__all__ = ["grouped_gemm", "grouped_gemm_kernel_spec"]

# Leaf modes of cutlass_kernels/include/scalemm/sm90_grouped_gemm.cuh (GroupedLeafMode).
NULL, PER_ROW, PER_GROUP_VEC, PER_GROUP, SHARED, ONE = range(6)
_ARGTYPES = [ptr, ptr, ptr, ptr, i64, i64, i64, i64, ptr, ptr, ptr, i64, ptr, i64, i64, ptr]


def grouped_gemm_kernel_spec(config: GemmConfig, *, fast_accum: bool, out_dtype, epilogue: epi.Node):
    return _spec(config, bool(fast_accum), epi.dtype_name(out_dtype), epilogue)


@functools.lru_cache(maxsize=None)
def _spec(config, fast_accum, out_name, tree):
    emitted = epi.emit(tree, out_name, swap_ab=config.swap_ab, grouped=True)
    digest = hashlib.sha256(emitted.evt_type.encode()).hexdigest()[:8]
    name = f"fp8_grouped_{config.key()}_{'fastacc' if fast_accum else 'acc'}_{out_name}_evt{digest}"
    params = config.cpp(fast_accum=fast_accum, out_dtype=out_name, epilogue=emitted, grouped=True)
    return KernelSpec(name=name, template="grouped_gemm_sm90.cu", params=params), emitted


@functools.lru_cache(maxsize=None)
def _launcher(spec: KernelSpec):
    return build(spec).function("scalemm_grouped_gemm", _ARGTYPES)


def _workspace_bytes(G: int) -> int:
    # setup arrays (problem shapes, 3 pointer + 3 stride arrays, 8 leaf pointer arrays) + CUTLASS's
    # own (per-SM TMA descriptors, scheduler): generous and cheap from the caching allocator.
    return G * 512 + (2 << 20)


def _scale_a_mode(s, T, G, per):
    if s.numel() == 1:
        return ONE
    if per == "token" or (per is None and s.numel() == T and T != G):
        if s.numel() != T:
            raise ValueError(f"scale_a per token must hold T = {T} values, got {s.numel()}")
        return PER_ROW
    if per == "group" or (per is None and s.numel() == G and T != G):
        if s.numel() != G:
            raise ValueError(f"scale_a per group must hold G = {G} values, got {s.numel()}")
        return PER_GROUP
    if per is None and s.numel() == T == G:
        raise ValueError(f"scale_a has {T} values and T == G == {T}: say scale_a_per='token' or 'group'")
    raise ValueError(f"scale_a must be [T] = [{T}] (per token), [G] = [{G}] (per group) or one value; "
                     f"got shape {tuple(s.shape)}")


def _scale_b_mode(s, G, N):
    if s.numel() == 1:
        return ONE
    if s.dim() == 2 and tuple(s.shape) == (G, N):
        return PER_GROUP_VEC
    if s.numel() == G and s.dim() <= 1 and G != 1:
        return PER_GROUP
    if s.numel() == N and s.dim() <= 1:
        return SHARED
    raise ValueError(f"scale_b must be [G, N] = [{G}, {N}] (per expert channel), [G] (per expert), [N] "
                     f"(shared) or one value; got shape {tuple(s.shape)}")


def grouped_gemm(a, b, offsets, scale_a=None, scale_b=None, *, bias=None, out_dtype=torch.bfloat16,
                 epilogue=None, out=None, fast_accum=False, scale_a_per: str | None = None,
                 config: GemmConfig | None = None):
    """out[rows of g] = act(scale_a * scale_b[g] * (a[rows of g] @ b[g].T) + bias[g]) for every group g.

    Args:
      a: [T, K] float8_e4m3fn, rows sorted by group (or an FP8Tensor).
      b: [G, N, K] float8_e4m3fn: stacked expert weights in nn.Linear layout.
      offsets: int32 [G] on the device: cumulative row ends (torch._grouped_mm's `offs`);
        group g owns rows offsets[g-1] .. offsets[g]-1 (offsets[-1] = 0). Empty groups are fine.
      scale_a: fp32 [T] (per token), [G] (per group) or one value. When T == G say which with
        scale_a_per="token" | "group".
      scale_b: fp32 [G, N] (per expert output channel), [G] (per expert), [N] (shared) or one value.
      bias: optional [G, N] or [N] tensor of out_dtype.
      epilogue: None or an activation applied last: "relu", "gelu", "silu".
      out: optional [T, N] output. Rows outside every group (past offsets[-1]) are not written.

    The offsets are never read on the host: the call is CUDA-graph capturable and replays see
    new offsets. They cannot be validated without a host sync either: offsets are clamped into
    [0, T] and to be non-decreasing on the device, so bad offsets give empty or shorter groups,
    never out-of-bounds accesses; offsets[-1] should equal T.
    """
    a, scale_a = _unwrap(a, scale_a, "a")
    b, scale_b = _unwrap(b, scale_b, "b")
    for t, n, nd in ((a, "a", 2), (b, "b", 3)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float8_e4m3fn:
            raise TypeError(f"{n} must be a float8_e4m3fn tensor, got {getattr(t, 'dtype', type(t))}")
        if t.dim() != nd:
            raise ValueError(f"{n} must be {nd}-D ({'[T, K]' if nd == 2 else '[G, N, K]'}), got shape {tuple(t.shape)}")
        if not t.is_contiguous():
            raise ValueError(f"{n} must be contiguous")
    (T, K), (G, N, Kb) = a.shape, b.shape
    if K != Kb:
        raise ValueError(f"a is [T, K] = {list(a.shape)}, b is [G, N, K] = {list(b.shape)}: K differs")
    device = a.device
    if device.type != "cuda" or b.device != device:
        raise ValueError(f"a and b must be on the same CUDA device (a on {a.device}, b on {b.device}); "
                         "use scalemm.reference for CPU grouped GEMMs")
    if not isinstance(offsets, torch.Tensor) or offsets.dtype != torch.int32 or offsets.shape != (G,) \
            or offsets.device != device or not offsets.is_contiguous():
        raise ValueError(f"offsets must be a contiguous int32 tensor of shape [G] = [{G}] on {device}, got "
                         f"{getattr(offsets, 'dtype', type(offsets))} {tuple(getattr(offsets, 'shape', ()))}")
    if out_dtype not in _OUT_DTYPES:
        raise TypeError(f"out_dtype must be one of {_OUT_DTYPES}, got {out_dtype}")
    if scale_a is None or scale_b is None:
        raise ValueError("scale_a and scale_b are required (float32)")
    for s, n in ((scale_a, "scale_a"), (scale_b, "scale_b")):
        if not isinstance(s, torch.Tensor) or s.dtype != torch.float32 or s.device != device or not s.is_contiguous():
            raise TypeError(f"{n} must be a contiguous float32 tensor on {device}")
    if scale_a_per not in (None, "token", "group"):
        raise ValueError(f"scale_a_per must be None, 'token' or 'group', got {scale_a_per!r}")
    modes = {"scale_a": _scale_a_mode(scale_a, T, G, scale_a_per), "scale_b": _scale_b_mode(scale_b, G, N)}
    if bias is not None:
        if not isinstance(bias, torch.Tensor) or bias.dtype != out_dtype or bias.device != device \
                or tuple(bias.shape) not in ((G, N), (N,)) or not bias.is_contiguous():
            raise ValueError(f"bias must be a contiguous [G, N] or [N] tensor of {out_dtype} on {device}")
        modes["bias"] = PER_GROUP_VEC if bias.dim() == 2 else SHARED
    else:
        modes["bias"] = NULL
    if K % 16:
        raise ValueError(f"K = {K} must be a multiple of 16 (16-byte TMA rows of e4m3)")
    per16 = _PER_16_BYTES[out_dtype]
    if N % per16:
        raise ValueError(f"N = {N} must be a multiple of {per16} for {out_dtype} output")
    if out is None:
        out = torch.empty((T, N), dtype=out_dtype, device=device)
    elif not isinstance(out, torch.Tensor) or out.dtype != out_dtype or out.shape != (T, N) \
            or out.device != device or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous [{T}, {N}] tensor of {out_dtype} on {device}")
    for t, n in ((a, "a"), (b, "b"), (out, "out")):
        _check_aligned(t, n)
    if G == 0 or T == 0 or N == 0:
        return out

    cfg = config or default_grouped_config(T, G, N, K, fast_accum=fast_accum)
    tree = epi.scaled(out_dtype, bias=True, activation=epilogue)
    spec, emitted = grouped_gemm_kernel_spec(cfg, fast_accum=fast_accum, out_dtype=out_dtype, epilogue=tree)
    inputs = {"scale_a": scale_a, "scale_b": scale_b, "bias": bias}
    n = len(emitted.leaves)
    base, mode, nbytes = (ctypes.c_void_p * n)(), (ctypes.c_int64 * n)(), (ctypes.c_int64 * n)()
    for i, leaf in enumerate(emitted.leaves):
        t = inputs[leaf.name]
        base[i] = t.data_ptr() if t is not None else None
        mode[i] = modes[leaf.name]
        nbytes[i] = t.element_size() if t is not None else 0
    ws = torch.empty(_workspace_bytes(G), dtype=torch.uint8, device=device)
    _launcher(spec)(a.data_ptr(), b.data_ptr(), out.data_ptr(), offsets.data_ptr(), G, T, N, K, base, mode, nbytes, n,
                    ws.data_ptr(), ws.numel(), device.index, torch._C._cuda_getCurrentRawStream(device.index))
    return out
