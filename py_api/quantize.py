"""scalemm.quantize: NVFP4, FP8 and MXFP8 quantization (docs/numerics.md).

CUDA tensors run scalemm's Hopper kernels (cutlass_kernels/include/scalemm/quant.cuh),
CPU tensors the pure-torch reference (scalemm.reference); both give the same bytes.

The CUDA path never synchronises with the host (no .item(), no tensor -> bool): amax and
global scales stay device tensors, outputs are allocated with torch, and a call is one or
two kernel launches (plus memsets of the amax buffers), so it can be captured in a CUDA
graph. Stochastic rounding with seed=None reads (and advances) a generator's state on the
host, which a capture cannot do: inside one the seed is drawn on the device instead (an int64
pair from torch.randint, which the captured graph draws anew on every replay; the kernels read it
through `seed_device`). An explicit `seed`/`offset` is fixed in the graph.
"""
from __future__ import annotations

import ctypes
import functools
from typing import Optional

import torch

from . import abi
from . import reference
from .arch import kernel_arch, on_device
from .cutlass_kernels.configs import sm90 as _sm90
from .formats import MXFP8, NVFP4
from .formats.base import check_amax, check_amax_used, check_delayed_amax, check_input, check_last_dim, check_scaling, check_u64
from .formats.fp8 import FP8Tensor, fp8_shapes
from .formats.mxfp8 import MXFP8Tensor, mxfp8_shapes
from .formats.nvfp4 import NVFP4Tensor, attach_exact_rows, nvfp4_shapes
from .jit import KernelSpec, build

__all__ = ["quantize_nvfp4", "quantize_fp8", "quantize_mxfp8", "advance_amax_history"]

_U64_LIMIT = 1 << 64
_CXX_TYPES = {torch.bfloat16: "__nv_bfloat16", torch.float16: "__half", torch.float32: "float"}
# The NVFP4 quantizers (dense and grouped activations, not stacked weights) on CUDA also write a rowwise copy's exact
# bf16 rows (value(code) x block scale, no alpha) where it has EXACT_ROWS_MIN (grouped: EXACT_ROWS_MIN_GROUPED) to
# EXACT_ROWS_MAX rows: the W4A4 GEMMs then run as W4A16 on them instead of running the decode pass, a launch of its
# own (~2 us on an H200; perf/NOTES.md "W4A4 without the decode pass"), or instead of decoding the NVFP4 tokens in
# the grouped skinny kernel (1.08-1.38x at 2-8 rows on ten expert layers on an H200: "Grouped W4A4 at 1-8 rows").
# Its cost: M x K x 2 bytes more written (0.1-0.9 us more per quantization on an H200 at 9-256 rows, 1.5 us at
# 256 x 14336), and held with the container (formats.nvfp4.attach_exact_rows). Not below 9 dense rows: up to 8
# tokens the dense W4A4 GEMMs (the skinny kernel's mma.sync loops) decode the activations themselves, overall as fast
# as W4A16 on the rows once the quantizer's extra 0.1-1.2 us is counted (quantize + GEMM 0.999x over 27 layers:
# "Dense W4A4 at 1-8 tokens on exact rows"); not above: prefill keeps its memory.
EXACT_ROWS_MIN = _sm90.SKINNY_DEFAULT_MAX_TOKENS + 1
EXACT_ROWS_MIN_GROUPED = 1
EXACT_ROWS_MAX = 256


def exact_rows_wanted(rows: int, grouped: bool = False) -> bool:
    """Whether an NVFP4 quantizer on CUDA writes exact rows beside a rowwise copy of `rows` rows (grouped: of
    quantize_nvfp4_grouped)."""
    return (EXACT_ROWS_MIN_GROUPED if grouped else EXACT_ROWS_MIN) <= rows <= EXACT_ROWS_MAX


# launcher -> its parameter struct (scalemm/abi.h), passed by pointer
_ARGS = {"scalemm_quantize_nvfp4": "QuantizeNvfp4Args", "scalemm_quantize_fp8": "QuantizeFp8Args",
         "scalemm_quantize_mxfp8": "QuantizeMxfp8Args"}

# Test hook: when set to a byte value, every output buffer the CUDA path allocates is filled
# with it before the kernels run, so a test can prove that the kernels write every byte.
_poison_byte: Optional[int] = None


# ---------------------------------------------------------------------------
# validation (shared by the CPU and CUDA paths, before any dispatch)
# ---------------------------------------------------------------------------

def _as_matrix(x, name: str = "x") -> torch.Tensor:
    check_input(x, name)
    if x.dim() < 2:
        raise ValueError(f"'{name}' must have at least 2 dims [..., K] (leading dims are "
                         f"flattened into M), got shape {tuple(x.shape)}")
    if not x.is_contiguous():
        raise ValueError(f"'{name}' must be contiguous (call .contiguous() first), got strides "
                         f"{tuple(x.stride())} for shape {tuple(x.shape)}")
    check_last_dim(x, name)
    return x if x.dim() == 2 else x.reshape(-1, x.shape[-1])


def _check_bool(value, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"'{name}' must be a bool, got {type(value).__name__}")
    return value


def _check_copies(rowwise, columnwise) -> None:
    _check_bool(rowwise, "rowwise")
    _check_bool(columnwise, "columnwise")
    if not (rowwise or columnwise):
        raise ValueError("at least one of 'rowwise' and 'columnwise' must be True")


def _check_multiple(value: int, of: int, what: str, name: str = "x") -> None:
    if value % of != 0:
        raise ValueError(f"'{name}' {what} must be a multiple of {of}, got {value}")


def _check_amax(amax, scaling: str, M: int, device: torch.device) -> torch.Tensor:
    """check_amax, plus what the kernels read: a contiguous float32 tensor."""
    if isinstance(amax, torch.Tensor) and amax.dtype != torch.float32:
        raise TypeError(f"'amax' must be float32, got {amax.dtype}")
    check_amax(amax, scaling, M, device)
    if not amax.is_contiguous():
        raise ValueError("'amax' must be contiguous")
    return amax


def _resolve_seed(seed, offset, generator, device: torch.device, device_seed: bool = False):
    """(seed, offset) for stochastic rounding (generator already checked by _sr_args, its one caller).

    An explicit seed is used as is. With seed=None the seed comes from `generator` (or the
    default generator of x's device): a CUDA generator gives (initial_seed(), offset +
    get_offset()) and its offset is advanced by 4, the way torch's own random ops consume
    it, so successive calls draw fresh bits and torch.manual_seed makes runs repeatable; a
    CPU generator gives one torch.randint draw from it. Either way no device sync happens.
    Inside a CUDA-graph capture the host cannot read the generator: with `device_seed` (the
    kernels run) the seed is an int64 [2] tensor drawn on the device by torch.randint (captured,
    so every replay draws a fresh pair; the kernels read it as (seed, offset added)); without
    it, a RuntimeError.
    """
    check_u64(offset, "offset")
    if seed is not None:
        return check_u64(seed, "seed"), offset
    if (device.type == "cuda" and (generator is None or generator.device.type == "cuda")
            and torch.cuda.is_current_stream_capturing()):
        if device_seed:
            return torch.randint(0, 1 << 62, (2,), device=device, dtype=torch.int64, generator=generator), offset
        raise RuntimeError("stochastic rounding with seed=None reads and advances a CUDA generator on the host, "
                           "which cannot be captured in a CUDA graph: pass seed= and offset= inside the capture "
                           "(they are then fixed in the graph: every replay draws the same bits)")
    gen = generator
    if gen is None:
        gen = (torch.cuda.default_generators[device.index if device.index is not None else
                                             torch.cuda.current_device()]
               if device.type == "cuda" else torch.default_generator)
    if gen.device.type == "cuda":
        base = gen.get_offset()
        gen.set_offset(base + 4)
        return gen.initial_seed() % _U64_LIMIT, (offset + base) % _U64_LIMIT
    draw = torch.randint(0, 1 << 62, (1,), generator=gen, dtype=torch.int64)  # CPU: no sync
    return int(draw[0]), offset


# ---------------------------------------------------------------------------
# the CUDA path
# ---------------------------------------------------------------------------

def _sr_args(stochastic_rounding: bool, seed, offset, generator, device: torch.device, device_seed: bool = False):
    """(seed, offset) for the kernels: resolved with _resolve_seed under SR, else checked and unused. The seed
    is an int, or (device_seed, inside a CUDA-graph capture) a device tensor: _seed_fields puts either in a struct."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"'generator' must be a torch.Generator or None, got {type(generator).__name__}")
    if stochastic_rounding:
        return _resolve_seed(seed, offset, generator, device, device_seed)
    if seed is not None:
        check_u64(seed, "seed")
    return 0, check_u64(offset, "offset")


def _spec(dtype: torch.dtype) -> KernelSpec:
    return KernelSpec(name=f"quant_{str(dtype).split('.')[-1]}", template="quant.cu",
                      # with CUTLASS headers: the exact rows' decode (sm90/nvfp4_numerics.cuh)
                      params={"IN_T": _CXX_TYPES[dtype]})


def _history_spec() -> KernelSpec:
    return KernelSpec(name="amax_history", template="amax_history.cu", cutlass=False)


def kernel_specs():
    """The quantization libraries (one per input dtype) and the amax history step's, for `python -m scalemm build`."""
    return [_spec(dtype) for dtype in _CXX_TYPES] + [_history_spec()]


@functools.lru_cache(maxsize=None)
def _launcher(dtype: torch.dtype, name: str):
    return build(_spec(dtype)).function(name, [ctypes.POINTER(abi.structs[_ARGS[name]])])


def _check_device(device: torch.device) -> None:
    kernel_arch(device)  # NotImplementedError on a GPU scalemm has no kernels for (scalemm/arch.py)


def _empty(shape, dtype, device) -> torch.Tensor:
    t = torch.empty(shape, dtype=dtype, device=device)
    if _poison_byte is not None:
        t.reshape(-1).view(torch.uint8).fill_(_poison_byte)
    return t


def _p(t: Optional[torch.Tensor]):
    return None if t is None else t.data_ptr()


def _seed_fields(seed) -> dict:
    """The seed / seed_device fields of a quantizer struct for _sr_args' seed (an int or a device tensor)."""
    if isinstance(seed, torch.Tensor):
        return {"seed": 0, "seed_device": seed.data_ptr()}
    return {"seed": seed, "seed_device": None}


def _stream(device) -> int:
    return torch._C._cuda_getCurrentRawStream(device.index)


def _nvfp4_cuda(x2, scaling, amax, rowwise, columnwise, rht, sr, seed, offset) -> NVFP4Tensor:
    M, K = x2.shape
    dev = x2.device
    token = scaling == "token"
    shared = scaling == "tensor" and not rht  # the columnwise copy reuses the rowwise amax
    f32 = torch.float32
    row = nvfp4_shapes(M, K, scaling)  # the tensors of the rowwise copy, and of the columnwise one (x.T)
    col = nvfp4_shapes(K, M, scaling) if columnwise else None

    # amaxes that must be computed: one stats pass (launched by the same C call) produces them all
    stats = {}
    row_amax = None
    if rowwise or (columnwise and shared):
        row_amax = amax
        if row_amax is None:
            row_amax = torch.empty(row["amax"][0], dtype=f32, device=dev)
            stats["row_amax" if token else "amax"] = row_amax
    col_amax = None
    if columnwise:
        if shared:
            col_amax = row_amax
        else:
            col_amax = torch.empty(col["amax"][0], dtype=f32, device=dev)
            stats["col_amax" if token else ("amax_rht" if rht else "amax")] = col_amax

    q_row = s_row = alpha_row = exact = None
    if rowwise:
        q_row, s_row, alpha_row = (_empty(*row[f], dev) for f in ("qdata", "scales", "alpha"))
        if exact_rows_wanted(M):
            exact = _empty((M, K), torch.bfloat16, dev)
    q_col = s_col = alpha_col = None
    if columnwise:
        q_col, s_col, alpha_col = (_empty(*col[f], dev) for f in ("qdata", "scales", "alpha"))
    args = abi.QuantizeNvfp4Args(
        x=x2.data_ptr(), m=M, k=K, stats_amax=_p(stats.get("amax")), stats_amax_rht=_p(stats.get("amax_rht")),
        stats_row_amax=_p(stats.get("row_amax")), stats_col_amax=_p(stats.get("col_amax")), q_row=_p(q_row),
        s_row=_p(s_row), exact_row=_p(exact), alpha_row=_p(alpha_row), amax_row=_p(row_amax), row_token=int(token),
        q_col=_p(q_col), s_col=_p(s_col), alpha_col=_p(alpha_col), amax_col=_p(col_amax), col_token=int(token),
        rht=int(rht), sr=int(sr), offset=offset, stream=_stream(dev), **_seed_fields(seed))
    _launcher(x2.dtype, "scalemm_quantize_nvfp4")(ctypes.byref(args))

    col = None
    if columnwise:
        col = NVFP4Tensor._trusted(qdata=q_col, scales=s_col, alpha=alpha_col,
                                   amax=col_amax, shape=(K, M), scaling=scaling, orig_dtype=x2.dtype, rht=rht,
                                   columnwise=None)
    if not rowwise:
        return NVFP4Tensor._trusted(qdata=None, scales=None, alpha=None, amax=None, shape=(M, K), scaling=scaling,
                                    orig_dtype=x2.dtype, rht=False, columnwise=col)
    q = NVFP4Tensor._trusted(qdata=q_row, scales=s_row, alpha=alpha_row,
                             amax=row_amax, shape=(M, K), scaling=scaling, orig_dtype=x2.dtype, rht=False,
                             columnwise=col)
    return q if exact is None else attach_exact_rows(q, exact)


def _fp8_cuda(x2, scaling, rowwise, columnwise, amax=None, amax_out=None) -> FP8Tensor:
    M, K = x2.shape
    dev = x2.device
    token = scaling == "token"
    f32 = torch.float32
    if token:  # filled by the amax pass the C entry point launches first; the rowwise copy alone is one kernel that
        # keeps its row amaxes to itself (FP8Tensor holds none), so it gets no buffer for them
        row_amax = torch.empty((M,), dtype=f32, device=dev) if rowwise and columnwise else None
        col_amax = torch.empty((K,), dtype=f32, device=dev) if columnwise else None
    elif amax is not None:  # delayed scaling: scaled from the given amax; the copies' pass writes amax_out
        row_amax = col_amax = amax
    else:  # the amax pass's output: amax_out itself when given
        row_amax = col_amax = amax_out if amax_out is not None else torch.empty((), dtype=f32, device=dev)
    d_row = sinv_row = d_col = sinv_col = None
    if rowwise:
        d_row, sinv_row = (_empty(*shape_dtype, dev) for shape_dtype in fp8_shapes(M, K, scaling).values())
    if columnwise:
        d_col, sinv_col = (_empty(*shape_dtype, dev) for shape_dtype in fp8_shapes(K, M, scaling).values())
    args = abi.QuantizeFp8Args(
        x=x2.data_ptr(), m=M, k=K, q_row=_p(d_row), scale_inv_row=_p(sinv_row), amax_row=_p(row_amax),
        row_token=int(token), q_col=_p(d_col), scale_inv_col=_p(sinv_col), amax_col=_p(col_amax),
        col_token=int(token), amax_given=int(amax is not None), amax_out=_p(amax_out if amax is not None else None),
        stream=_stream(dev))
    _launcher(x2.dtype, "scalemm_quantize_fp8")(ctypes.byref(args))
    col = FP8Tensor._trusted(data=d_col, scale_inv=sinv_col, scaling=scaling, orig_dtype=x2.dtype,
                             columnwise=None) if columnwise else None
    return FP8Tensor._trusted(data=d_row, scale_inv=sinv_row, scaling=scaling, orig_dtype=x2.dtype, columnwise=col)


def _mxfp8_cuda(x2, rowwise, columnwise) -> MXFP8Tensor:
    M, K = x2.shape
    dev = x2.device
    d_row = s_row = d_col = s_col = None
    if rowwise:
        d_row, s_row = (_empty(*shape_dtype, dev) for shape_dtype in mxfp8_shapes(M, K).values())
    if columnwise:
        d_col, s_col = (_empty(*shape_dtype, dev) for shape_dtype in mxfp8_shapes(K, M).values())
    args = abi.QuantizeMxfp8Args(x=x2.data_ptr(), m=M, k=K, q_row=_p(d_row), s_row=_p(s_row), q_col=_p(d_col),
                                 s_col=_p(s_col), stream=_stream(dev))
    _launcher(x2.dtype, "scalemm_quantize_mxfp8")(ctypes.byref(args))
    col = MXFP8Tensor(d_col, s_col, (K, M), x2.dtype) if columnwise else None
    return MXFP8Tensor(d_row, s_row, (M, K), x2.dtype, columnwise=col)


def _runs_kernels(x2: torch.Tensor) -> bool:
    """True where the CUDA kernels quantize x2: a non-empty CUDA tensor. The rest goes to the
    reference: a CPU x, and an empty x (M = 0), which leaves a kernel nothing to do; for a single
    tensor the reference's torch ops on x's device never read anything back to the host."""
    return x2.numel() > 0 and _on_cuda(x2)


def _on_cuda(x2: torch.Tensor, name: str = "x") -> bool:
    if x2.device.type == "cuda":
        _check_device(x2.device)
        if x2.data_ptr() % 16 != 0:  # the kernels read x with 16-byte vector loads
            raise ValueError(f"'{name}' must start at a 16-byte aligned address (its storage offset "
                             f"makes data_ptr() % 16 == {x2.data_ptr() % 16}); pass a fresh tensor "
                             "or .clone() it")
        return True
    if x2.device.type != "cpu":
        raise ValueError(f"'{name}' must be a CPU or CUDA tensor, got device {x2.device}")
    return False


# ---------------------------------------------------------------------------
# public API
# ---------------------------------------------------------------------------

def quantize_nvfp4(x: torch.Tensor, *, scaling: str = "tensor", amax: Optional[torch.Tensor] = None,
                   rowwise: bool = True, columnwise: bool = False, rht: bool = False,
                   stochastic_rounding: bool = False, seed: Optional[int] = None, offset: int = 0,
                   generator: Optional[torch.Generator] = None) -> NVFP4Tensor:
    """Quantize x to NVFP4 (e2m1 data, e4m3 scale per 16 elements, fp32 global scale).

    x: contiguous bf16/fp16/fp32 [..., K]; leading dims are flattened into M. K % 16 == 0;
      M % 16 == 0 when columnwise=True. M = 0 gives empty copies (alpha 1, amax 0 where they
      are computed; no kernel runs).
    scaling: "tensor" (one global scale) or "token" (one per row of each copy: per row of x
      for the rowwise copy, per column of x for the columnwise one).
    amax: optional fp32 device tensor (0-d for "tensor", [M] for "token") used as is for the
      rowwise copy, and for the columnwise copy when scaling="tensor" and rht=False. Else the
      amax is computed on the device (NaN-propagating max of |x|).
    rowwise / columnwise: which copies to produce (the columnwise copy quantizes x.T, shape
      (K, M), into `.columnwise`); both come from one read of x.
    rht: apply the 16-point random Hadamard transform to the columnwise copy (needs
      columnwise=True; its amax is taken after the transform).
    stochastic_rounding: SR of the e2m1 codes with Philox4x32-10 bits from (seed, offset),
      seed and offset in [0, 2^64). seed=None: drawn from `generator` or the default
      generator of x's device (see _resolve_seed: deterministic under torch.manual_seed).
    Returns an NVFP4Tensor: qdata uint8 [M, K/2] (even element in the low nibble), scales
    float8_e4m3fn in the 128x4 swizzled layout with zero padding, alpha = S_dec (fp32, 0-d or
    [M]), amax; `.columnwise` likewise for x.T. No host synchronisation on CUDA.
    On CUDA a rowwise copy of EXACT_ROWS_MIN to EXACT_ROWS_MAX (9-256) rows also carries its exact bf16 rows,
    value(code) x block scale without alpha, written by the same kernel (M x K x 2 bytes more): the W4A4 GEMMs then
    run as W4A16 on them, alpha_a in the epilogue, with no decode pass. They are private to the container and dropped
    (the pass runs again) once its codes or scales are changed in place or replaced.
    """
    x2 = _as_matrix(x)
    M, K = x2.shape
    check_scaling(scaling)
    _check_copies(rowwise, columnwise)
    _check_bool(rht, "rht")
    _check_bool(stochastic_rounding, "stochastic_rounding")
    _check_multiple(K, NVFP4.block_size, "K (last dim)")
    if columnwise:
        _check_multiple(M, NVFP4.block_size, "M (rows, for the columnwise copy)")
    if rht and not columnwise:
        raise ValueError("'rht' applies only to the columnwise copy: set columnwise=True")
    if amax is not None:
        check_amax_used(scaling, rowwise, columnwise, rht)
        _check_amax(amax, scaling, M, x2.device)
    kernels = _runs_kernels(x2)
    seed, offset = _sr_args(stochastic_rounding, seed, offset, generator, x2.device,
                            device_seed=x2.device.type == "cuda")
    if kernels:
        with on_device(x2.device):
            return _nvfp4_cuda(x2, scaling, amax, rowwise, columnwise, rht, stochastic_rounding,
                               seed, offset)
    if isinstance(seed, torch.Tensor):  # an empty x on CUDA inside a capture: no bits are drawn
        seed = 0
    return reference.quantize_nvfp4(x2, scaling=scaling, amax=amax, rowwise=rowwise,
                                    columnwise=columnwise, rht=rht,
                                    stochastic_rounding=stochastic_rounding, seed=seed,
                                    offset=offset)


def quantize_fp8(x: torch.Tensor, *, scaling: str = "tensor", rowwise: bool = True,
                 columnwise: bool = False, amax: Optional[torch.Tensor] = None,
                 amax_out: Optional[torch.Tensor] = None) -> FP8Tensor:
    """Quantize x to FP8 e4m3 with current scaling, or delayed scaling given `amax` (docs/numerics.md section 7).

    x: contiguous bf16/fp16/fp32 [..., K] (leading dims flattened into M), K % 16 == 0 and
      M % 16 == 0 when columnwise=True (16-byte aligned rows of both copies). M = 0 gives empty
      copies (scale_inv 1 where it is per tensor or per column; no kernel runs).
    scaling: "tensor" (one amax over x, shared by both copies) or "token" (per row of x for
      the rowwise copy, per column of x for the columnwise copy).
    Returns an FP8Tensor: data float8_e4m3fn [M, K] = e4m3(fl(x * scale)), scale_inv fp32
    (0-d or [M]); `.columnwise` holds x.T ([K, M], scale_inv 0-d or [K]).
    Delayed scaling (scaling "tensor"; docs/training.md): `amax`, a 0-d fp32 tensor, is the amax
    both copies are scaled from instead of x's own, so no amax pass runs; values beyond it
    saturate to +-448. `amax_out`, a 0-d fp32 tensor, receives max|x| (NaN if x holds one) from
    the same pass; with amax=None it receives the amax the copies used.
    """
    x2 = _as_matrix(x)
    M, K = x2.shape
    check_scaling(scaling)
    _check_copies(rowwise, columnwise)
    _check_multiple(K, 16, "K (last dim)")
    if columnwise:
        _check_multiple(M, 16, "M (rows, for the columnwise copy)")
    check_delayed_amax(amax, amax_out, scaling, (), x2.device)
    if _runs_kernels(x2):
        with on_device(x2.device):
            return _fp8_cuda(x2, scaling, rowwise, columnwise, amax, amax_out)
    return reference.quantize_fp8(x2, scaling=scaling, rowwise=rowwise, columnwise=columnwise, amax=amax,
                                  amax_out=amax_out)


def _check_history_args(history, amax, next_amax, used) -> None:
    if not isinstance(history, torch.Tensor):
        raise TypeError(f"'history' must be a torch.Tensor, got {type(history).__name__}")
    if history.dtype != torch.float32 or history.dim() not in (1, 2) or history.shape[0] < 1:
        raise ValueError(f"'history' must be float32 [H] or [H, G] with H >= 1, got {history.dtype} "
                         f"{tuple(history.shape)}")
    if not history.is_contiguous():
        raise ValueError("'history' must be contiguous")
    named = [("amax", amax), ("next_amax", next_amax)] + ([("used", used)] if used is not None else [])
    for name, t in named:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"'{name}' must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != torch.float32 or tuple(t.shape) != tuple(history.shape[1:]):
            raise ValueError(f"'{name}' must be float32 of shape {tuple(history.shape[1:])} (history's rows), got "
                             f"{t.dtype} {tuple(t.shape)}")
        if t.device != history.device:
            raise ValueError(f"'{name}' is on {t.device} but 'history' is on {history.device}")
        if not t.is_contiguous():
            raise ValueError(f"'{name}' must be contiguous")
    spans = [("history", history)] + named
    for i, (a_name, a) in enumerate(spans):  # the step reads some while it writes others
        for b_name, b in spans[i + 1:]:
            a0, b0 = a.data_ptr(), b.data_ptr()
            if a0 < b0 + b.numel() * 4 and b0 < a0 + a.numel() * 4:
                raise ValueError(f"'{a_name}' and '{b_name}' must not overlap")


def advance_amax_history(history: torch.Tensor, amax: torch.Tensor, next_amax: torch.Tensor,
                         used: Optional[torch.Tensor] = None) -> None:
    """FP8 delayed scaling's history step, in place (docs/training.md; what scalemm.nn's layers run after each
    delayed-scaling quantization, with the amax the quantizer wrote into `amax_out`).

    history: fp32 [H] or [H, G] (one column per group), row 0 the newest: rolled one row down with `amax`
      ([] or [G]) on top, the oldest row dropped.
    next_amax: fp32, amax's shape: set to the new history's max over its rows (NaN where a column holds NaN,
      as torch.amax), the amax the next quantization scales from.
    used: optional, amax's shape: receives next_amax's value from before the step.
    CUDA: one kernel, no host synchronisation (capturable); CPU: scalemm.reference's torch ops. All four
    tensors contiguous on one device and apart from each other.
    """
    _check_history_args(history, amax, next_amax, used)
    if not history.is_cuda:
        reference.advance_amax_history(history, amax, next_amax, used)
        return
    _check_device(history.device)
    rows, cols = history.shape[0], history[0].numel()
    with on_device(history.device):
        args = abi.AmaxHistoryArgs(history=history.data_ptr(), rows=rows, cols=cols, amax=amax.data_ptr(),
                                   next_amax=next_amax.data_ptr(), used=_p(used), stream=_stream(history.device))
        _history_launcher()(ctypes.byref(args))


@functools.lru_cache(maxsize=None)
def _history_launcher():
    return build(_history_spec()).function("scalemm_advance_amax_history", [ctypes.POINTER(abi.AmaxHistoryArgs)])


def quantize_mxfp8(x: torch.Tensor, *, rowwise: bool = True, columnwise: bool = False) -> MXFP8Tensor:
    """Quantize x to MXFP8 (e4m3 data, e8m0 RCEIL scale per 32 elements; docs/numerics.md section 6).

    x: contiguous bf16/fp16/fp32 [..., K] (leading dims flattened into M), K % 32 == 0;
      M % 32 == 0 when columnwise=True (blocks of 32 along M for x.T). M = 0 gives empty copies.
    Returns an MXFP8Tensor: data float8_e4m3fn [M, K], scales uint8 e8m0 in the 128x4
    swizzled layout (R = M, C = K/32, zero padding); `.columnwise` the same for x.T.
    """
    x2 = _as_matrix(x)
    M, K = x2.shape
    _check_copies(rowwise, columnwise)
    _check_multiple(K, MXFP8.block_size, "K (last dim)")
    if columnwise:
        _check_multiple(M, MXFP8.block_size, "M (rows, for the columnwise copy)")
    if _runs_kernels(x2):
        with on_device(x2.device):
            return _mxfp8_cuda(x2, rowwise, columnwise)
    return reference.quantize_mxfp8(x2, rowwise=rowwise, columnwise=columnwise)
