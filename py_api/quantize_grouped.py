"""scalemm grouped (MoE) quantization: FP8, NVFP4 and MXFP8 over groups of rows given by device
offsets, stacked expert weights, and residual NVFP4 (docs/numerics.md sections 5, 7, 10).

CUDA tensors run cutlass_kernels/include/scalemm/quant_grouped.cuh, CPU tensors the pure-torch
reference (scalemm.reference.quantize_*_grouped); both give the same bytes.

Offsets: int32 [G] on x's device, cumulative row ends (torch._grouped_mm's `offs`): group g owns
rows [offsets[g-1], offsets[g]) of x [T, K] (offsets[-1] = 0). CUDA offsets are never read on the
host: the kernels clamp them into [0, T] and make them non-decreasing (a running max; formats/layout.py
states the rule), so bad offsets give short or empty groups, never out-of-bounds accesses, and
every call is CUDA-graph capturable (replays may see new offsets). CPU offsets cost nothing to
read and are checked instead: non-decreasing, in [0, T], else a ValueError (scalemm.reference keeps
the clamping rule, the oracle of the CUDA path). Empty groups and groups of any size are fine.
Rows past offsets[-1] belong to no group: their rowwise data is zero and they take no scale rows.
An empty x (T = 0) gives containers of empty groups, on either device, with no kernel (and, on
CUDA, no look at the offsets).

Each call is a fixed sequence of launches whatever the offsets: a 1-CTA setup kernel (clamped
ends and the padded position tables), memsets of the amax scratch, one amax pass over x (not for
MXFP8) and one quantize pass over all groups' tiles (NVFP4 with both copies: two).
"""
from __future__ import annotations

import ctypes
import functools
from typing import Optional

import torch

from . import abi
from . import quantize as _q
from . import reference
from .arch import on_device
from .formats import MXFP8, NVFP4, layout
from .formats.base import (Shapes, check_delayed_amax, check_host_offsets, check_input, check_last_dim, check_offsets,
                           check_scaling)
from .formats.fp8 import GroupedFP8Tensor, grouped_fp8_shapes
from .formats.mxfp8 import GroupedMXFP8, grouped_mxfp8_shapes
from .formats.nvfp4 import (GroupedNVFP4Tensor, NVFP4Tensor, attach_exact_rows, grouped_nvfp4_shapes,
                            quantize_residual, residual_channels, residual_weight)
from .jit import KernelSpec, build

__all__ = ["quantize_fp8_grouped", "quantize_nvfp4_grouped", "quantize_mxfp8_grouped", "quantize_fp8_stacked",
           "quantize_nvfp4_stacked", "quantize_nvfp4_residual", "prepare_residual_weight", "GroupedMXFP8",
           "GroupedFP8Tensor", "GroupedNVFP4Tensor"]

# launcher -> its parameter struct (scalemm/abi.h), passed by pointer
_ARGS = {"scalemm_quantize_fp8_grouped": "QuantizeFp8GroupedArgs",
         "scalemm_quantize_nvfp4_grouped": "QuantizeNvfp4GroupedArgs",
         "scalemm_quantize_mxfp8_grouped": "QuantizeMxfp8GroupedArgs",
         "scalemm_zero_rows_past_groups": "ZeroRowsPastGroupsArgs"}
_INT32_LIMIT = (1 << 31) - 1


# ---------------------------------------------------------------------------
# validation (before any dispatch: CPU and CUDA callers get the same errors)
# ---------------------------------------------------------------------------

def _check_x(x, name: str = "x") -> None:
    check_input(x, name)
    if x.dim() != 2:
        raise ValueError(f"'{name}' must be 2-D [T, K] (rows sorted by group), got shape {tuple(x.shape)}")
    if not x.is_contiguous():
        raise ValueError(f"'{name}' must be contiguous (call .contiguous() first), got strides "
                         f"{tuple(x.stride())} for shape {tuple(x.shape)}")
    check_last_dim(x, name)


def _check_offsets(offsets, x: torch.Tensor, name: str = "x") -> int:
    G = check_offsets(offsets, x)
    T = x.shape[0]
    if T + 128 * G + 64 > _INT32_LIMIT:  # the device tables are int32
        raise ValueError(f"T + 128 G must stay below 2^31, got T={T}, G={G}")
    check_host_offsets(offsets, T, f"T = {T} (the rows of '{name}')")
    return G


def _check_grouped_args(x, offsets, block: int, scaling=None, rowwise=True, columnwise=False) -> int:
    _check_x(x)
    G = _check_offsets(offsets, x)
    if scaling is not None:
        check_scaling(scaling)
    _q._check_copies(rowwise, columnwise)
    _q._check_multiple(x.shape[1], block, "K (last dim)")
    return G


# ---------------------------------------------------------------------------
# the CUDA path
# ---------------------------------------------------------------------------

def _spec(dtype: torch.dtype) -> KernelSpec:
    return KernelSpec(name=f"quant_grouped_{str(dtype).split('.')[-1]}", template="quant_grouped.cu",
                      params={"IN_T": _q._CXX_TYPES[dtype]})  # CUTLASS headers: as quantize._spec


def kernel_specs():
    """The grouped quantization libraries (one per input dtype), for `python -m scalemm build`."""
    return [_spec(dtype) for dtype in _q._CXX_TYPES]


@functools.lru_cache(maxsize=None)
def _launcher(dtype: torch.dtype, name: str):
    return build(_spec(dtype)).function(name, [ctypes.POINTER(abi.structs[_ARGS[name]])])


def _table(G: int, device, tiles: int = 0) -> torch.Tensor:
    """int32 scratch for the group table of scalemm/abi.h: ends [G] | the position tables, then
    (16-byte aligned) the entries of `tiles` 128-row tiles of the rowwise scale space."""
    return torch.empty(abi.group_table_ints(G, tiles), dtype=torch.int32, device=device)


def _table_slice(table: torch.Tensor, G: int, which: int) -> torch.Tensor:
    """Position table `which` (abi.kGroupTablePos16 / kGroupTablePos64 / kGroupTablePos128), first G
    entries (the exclusive starts)."""
    start = G + which * (G + 1)
    return table[start:start + G]


def _fp8_grouped_cuda(x, offsets, G, scaling, rowwise, columnwise, group_rows=None, transposed=False, amax=None,
                      amax_out=None):
    """GroupedFP8Tensor, its columnwise copy (if any) in the wgrad layout; transposed=True (stacked weights,
    group_rows rows per group, columnwise): (the rows copy, stacked W^T [G * K, group_rows]) instead. amax /
    amax_out [G]: delayed scaling (check_delayed_amax)."""
    T, K = x.shape
    dev = x.device
    f32 = torch.float32
    token = scaling == "token"
    rows_kernel = token and not columnwise  # one kernel (the C entry point): no group table, no row amax buffer
    table = None if rows_kernel else _table(G, dev)
    g_amax = None  # the given amax, else the stats pass's output (amax_out itself when given)
    if not token:
        g_amax = amax if amax is not None else amax_out if amax_out is not None else torch.empty(G, dtype=f32,
                                                                                                 device=dev)
    row_amax = torch.empty(T, dtype=f32, device=dev) if token and rowwise and not rows_kernel else None
    gcol_amax = torch.empty((G, K), dtype=f32, device=dev) if token and columnwise else None
    W = T if transposed else layout.wgrad_width(T, G)
    q_row = sinv_row = q_col = sinv_col = None
    if rowwise:
        q_row, sinv_row = (_q._empty(*sd, dev) for sd in grouped_fp8_shapes(T, K, G, scaling, "rows").values())
    if columnwise:
        col_shapes = grouped_fp8_shapes(T, K, G, scaling, "wgrad")  # its scale_inv: [G] or [G, K] either way
        q_col = _q._empty((G * K, group_rows) if transposed else col_shapes["data"][0], torch.float8_e4m3fn, dev)
        sinv_col = _q._empty(*col_shapes["scale_inv"], dev)
    args = abi.QuantizeFp8GroupedArgs(
        x=x.data_ptr(), tokens=T, k=K, offsets=offsets.data_ptr(), groups=G, table=_q._p(table), token=int(token),
        g_amax=_q._p(g_amax), row_amax=_q._p(row_amax), gcol_amax=_q._p(gcol_amax), q_row=_q._p(q_row),
        sinv_row=_q._p(sinv_row), q_col=_q._p(q_col), w=W, sinv_col=_q._p(sinv_col),
        col_group_rows=group_rows if transposed else 0, amax_given=int(amax is not None),
        amax_out=_q._p(amax_out if amax is not None else None), stream=_q._stream(dev))
    _launcher(x.dtype, "scalemm_quantize_fp8_grouped")(ctypes.byref(args))
    if transposed:
        wt = GroupedFP8Tensor(q_col, sinv_col.reshape(-1), layout.stacked_offsets(G, K, dev), (G * K, group_rows),
                              scaling, x.dtype, group_rows=K)
        return GroupedFP8Tensor(q_row, sinv_row, offsets, (T, K), scaling, x.dtype, group_rows=group_rows), wt
    col = None
    if columnwise:
        col = GroupedFP8Tensor(q_col, sinv_col, offsets, (T, K), scaling, x.dtype, layout="wgrad")
    return GroupedFP8Tensor(q_row, sinv_row, offsets, (T, K), scaling, x.dtype, columnwise=col,
                            group_rows=group_rows)


def _nvfp4_grouped_cuda(x, offsets, G, scaling, rowwise, columnwise, scale_rows, group_rows=None, rht=False,
                        sr=False, seed=0, offset=0) -> GroupedNVFP4Tensor:
    T, K = x.shape
    dev = x.device
    f32 = torch.float32
    token = scaling == "token"
    table = _table(G, dev, tiles=scale_rows // layout.SF_TILE_ROWS if rowwise else 0)
    row_amax = torch.empty(T, dtype=f32, device=dev) if token and rowwise else None
    col_amax = None  # the columnwise amax when it is not g_amax
    if columnwise and (token or rht):
        col_amax = torch.empty((G, K) if token else (G,), dtype=f32, device=dev)
    need_g = not token and (rowwise or col_amax is None)  # per-group amax of x (not RHT'd)
    g_amax = torch.empty(G, dtype=f32, device=dev) if need_g else None
    W = layout.wgrad_width(T, G)
    cb = layout.wgrad_scale_cols(T, G)
    q_row = s_row = a_row = q_col = s_col = a_col = exact = None
    if rowwise:
        rows = grouped_nvfp4_shapes(T, K, G, scaling, "rows", scale_rows)
        q_row, s_row, a_row = (_q._empty(*rows[f], dev) for f in ("qdata", "scales", "alpha"))
        if _q.exact_rows_wanted(T, grouped=True) and group_rows is None:  # activations, not stacked weights
            exact = _q._empty((T, K), torch.bfloat16, dev)
    if columnwise:
        cols = grouped_nvfp4_shapes(T, K, G, scaling, "wgrad")
        q_col, s_col, a_col = (_q._empty(*cols[f], dev) for f in ("qdata", "scales", "alpha"))
    args = abi.QuantizeNvfp4GroupedArgs(
        x=x.data_ptr(), tokens=T, k=K, offsets=offsets.data_ptr(), groups=G, table=_q._p(table), token=int(token),
        g_amax=_q._p(g_amax), row_amax=_q._p(row_amax), col_amax=_q._p(col_amax), q_row=_q._p(q_row),
        s_row=_q._p(s_row), scale_rows=scale_rows, exact_row=_q._p(exact), alpha_row=_q._p(a_row),
        q_col=_q._p(q_col), w=W, s_col=_q._p(s_col), cb_total=cb, alpha_col=_q._p(a_col), rht=int(rht), sr=int(sr),
        offset=offset, stream=_q._stream(dev), **_q._seed_fields(seed))
    _launcher(x.dtype, "scalemm_quantize_nvfp4_grouped")(ctypes.byref(args))
    col = None
    if columnwise:
        # the kernel's pos64 table holds the 64-padded token starts: / 16 gives layout.wgrad_sf_offsets
        sf_col = _table_slice(table, G, abi.kGroupTablePos64) // layout.WGRAD_SCALE_BLOCK
        col = GroupedNVFP4Tensor(q_col, s_col, sf_col, a_col,
                                 g_amax if col_amax is None else col_amax, offsets, (T, K), scaling, x.dtype,
                                 layout="wgrad", rht=rht)
    if not rowwise:
        return GroupedNVFP4Tensor(None, None, None, None, None, offsets, (T, K), scaling, x.dtype,
                                  scale_rows=scale_rows, columnwise=col, group_rows=group_rows)
    q = GroupedNVFP4Tensor(q_row, s_row, _table_slice(table, G, abi.kGroupTablePos128), a_row,
                           row_amax if token else g_amax, offsets, (T, K), scaling, x.dtype,
                           scale_rows=scale_rows, columnwise=col, group_rows=group_rows)
    return q if exact is None else attach_exact_rows(q, exact, offsets)


def _mxfp8_grouped_cuda(x, offsets, G) -> GroupedMXFP8:
    T, K = x.shape
    dev = x.device
    scale_rows = layout.grouped_scale_rows(T, G)
    table = _table(G, dev, tiles=scale_rows // layout.SF_TILE_ROWS)
    q, s, _ = (_q._empty(*sd, dev) for sd in grouped_mxfp8_shapes(T, K, G).values())
    args = abi.QuantizeMxfp8GroupedArgs(
        x=x.data_ptr(), tokens=T, k=K, offsets=offsets.data_ptr(), groups=G, table=table.data_ptr(),
        q_row=q.data_ptr(), s_row=s.data_ptr(), scale_rows=scale_rows, stream=_q._stream(dev))
    _launcher(x.dtype, "scalemm_quantize_mxfp8_grouped")(ctypes.byref(args))
    return GroupedMXFP8._trusted(data=q, scales=s, sf_offsets=_table_slice(table, G, abi.kGroupTablePos128),
                                 offsets=offsets)


# ---------------------------------------------------------------------------
# an empty x (T = 0; e.g. an expert-parallel rank that got no tokens): every group is empty
# whatever the offsets say, so the result is known without reading them and without a kernel
# ---------------------------------------------------------------------------

def _filled(shapes: Shapes, device) -> dict:
    """The tensors of one copy of an empty x: data, scales, sf_offsets and amax zero, alpha and
    scale_inv 1 (what the kernels and the reference give an empty group)."""
    return {f: (torch.ones if f in ("alpha", "scale_inv") else torch.zeros)(shape, dtype=dtype, device=device)
            for f, (shape, dtype) in shapes.items()}


def _fp8_grouped_empty(x, offsets, G, scaling, rowwise, columnwise, amax=None, amax_out=None) -> GroupedFP8Tensor:
    K, dev = x.shape[1], x.device
    col = None
    if amax_out is not None:
        amax_out.zero_()  # every group empty
    if columnwise:
        col = GroupedFP8Tensor(**_filled(grouped_fp8_shapes(0, K, G, scaling, "wgrad"), dev), offsets=offsets,
                               shape=(0, K), scaling=scaling, orig_dtype=x.dtype, layout="wgrad")
    row = _filled(grouped_fp8_shapes(0, K, G, scaling, "rows"), dev) if rowwise else {"data": None, "scale_inv": None}
    out = GroupedFP8Tensor(**row, offsets=offsets, shape=(0, K), scaling=scaling, orig_dtype=x.dtype, columnwise=col)
    if amax is not None:  # the decode scales of the given amax, as the kernels write them for empty groups
        for t in (out, col):
            if t is not None and t.scale_inv is not None:
                t.scale_inv.copy_(reference.fp8_scale_inv(amax))
    return out


def _nvfp4_grouped_empty(x, offsets, G, scaling, rowwise, columnwise, rht) -> GroupedNVFP4Tensor:
    K, dev = x.shape[1], x.device
    col = None
    if columnwise:
        col = GroupedNVFP4Tensor(**_filled(grouped_nvfp4_shapes(0, K, G, scaling, "wgrad"), dev), offsets=offsets,
                                 shape=(0, K), scaling=scaling, orig_dtype=x.dtype, layout="wgrad", rht=rht)
    rows = grouped_nvfp4_shapes(0, K, G, scaling, "rows")
    row = _filled(rows, dev) if rowwise else dict.fromkeys(rows)
    return GroupedNVFP4Tensor(**row, offsets=offsets, shape=(0, K), scaling=scaling, orig_dtype=x.dtype,
                              columnwise=col)


# ---------------------------------------------------------------------------
# public API
# ---------------------------------------------------------------------------

def quantize_fp8_grouped(x: torch.Tensor, offsets: torch.Tensor, *, scaling: str = "tensor",
                         rowwise: bool = True, columnwise: bool = False, amax: Optional[torch.Tensor] = None,
                         amax_out: Optional[torch.Tensor] = None) -> GroupedFP8Tensor:
    """Quantize the G groups of x to FP8 e4m3 with current scaling (docs/numerics.md section 7),
    in one pass.

    x: contiguous bf16/fp16/fp32 [T, K], rows sorted by group, K % 16 == 0.
    offsets: int32 [G] on x's device, cumulative row ends (see the module notes: clamped on the
      device, never read on the host; CUDA-graph capturable).
    scaling: "tensor": one amax / scale per group (both copies); "token": per row for the
      rowwise copy, per column of x within each group for the columnwise copy.
    rowwise: data float8_e4m3fn [T, K], scale_inv fp32 [G] ("tensor") or [T] ("token").
    columnwise: `.columnwise` in THE WGRAD LAYOUT: data [K, W], W = ceil((T + 15 G)/16)*16, group
      g's tokens in columns [p_g, p_g + m_g), p_g = sum_{j<g} ceil(m_j/16)*16, zero padding;
      scale_inv [G] or [G, K].
    T = 0 (no tokens) gives empty copies: every group empty, scale_inv 1, no kernel.
    Delayed scaling (scaling "tensor"; docs/training.md): `amax`, fp32 [G], is the amax each group
      is scaled from instead of its own, so no amax pass runs; values beyond it saturate to +-448.
      `amax_out`, fp32 [G], receives each group's max|x| (0 for an empty group) from the same pass;
      with amax=None it receives the amaxes the copies used.
    Returns a GroupedFP8Tensor. Both copies come straight off one quantize pass, e.g.:

      xq = scalemm.quantize_fp8_grouped(x, offsets, columnwise=True)
      y = scalemm.grouped_gemm(xq.data, w_fp8, offsets, xq.scale_inv, w_scale_inv)   # fprop
      dyq = scalemm.quantize_fp8_grouped(dy, offsets, rowwise=False, columnwise=True)
      dw = scalemm.grouped_gemm_wgrad(dyq.columnwise.data, xq.columnwise.data, offsets,
                                      dyq.columnwise.scale_inv, xq.columnwise.scale_inv)
    """
    G = _check_grouped_args(x, offsets, 16, scaling, rowwise, columnwise)
    check_delayed_amax(amax, amax_out, scaling, (G,), x.device)
    if x.shape[0] == 0:
        return _fp8_grouped_empty(x, offsets, G, scaling, rowwise, columnwise, amax, amax_out)
    if _q._on_cuda(x):
        with on_device(x.device):
            return _fp8_grouped_cuda(x, offsets, G, scaling, rowwise, columnwise, amax=amax, amax_out=amax_out)
    return reference.quantize_fp8_grouped(x, offsets, scaling=scaling, rowwise=rowwise, columnwise=columnwise,
                                          amax=amax, amax_out=amax_out)


def quantize_nvfp4_grouped(x: torch.Tensor, offsets: torch.Tensor, *, scaling: str = "tensor",
                           rowwise: bool = True, columnwise: bool = False, rht: bool = False,
                           stochastic_rounding: bool = False, seed: Optional[int] = None, offset: int = 0,
                           generator: Optional[torch.Generator] = None) -> GroupedNVFP4Tensor:
    """Quantize the G groups of x to NVFP4 (docs/numerics.md sections 2, 3, 5, 8, 9) in one pass
    per copy.

    x: contiguous bf16/fp16/fp32 [T, K], rows sorted by group, K % 16 == 0. offsets: as
      quantize_fp8_grouped.
    scaling: "tensor": one global scale per group (alpha, amax [G]); "token": per row (rowwise:
      [T]) and per (group, column of x) (columnwise: [G, K]).
    Rowwise: qdata uint8 [T, K/2]; scales float8_e4m3fn swizzled and grouped along M: group g's
      scale rows start at sf_offsets[g] = sum_{j<g} ceil(m_j/128)*128 (int32 [G], computed on the
      device and stored in the container); buffer (ceil(T/128)*128 + 128 G) x Cp bytes (a
      host-known bound), every unused or padding byte zero.
    Columnwise (`.columnwise`, layout "wgrad"): qdata [K, W/2] (tokens packed along the wgrad
      layout, blocks of 16 along tokens); scales grouped along K: group g's K x ceil(m_g/16)
      matrix padded to ceil(K/128)*128 rows and ceil(m_g/64)*4 columns, swizzled on its own at
      byte Rp * sf_offsets[g] (sf_offsets[g] = sum_{j<g} ceil(m_j/64)*4); buffer
      Rp * 4*ceil((T + 63 G)/64) bytes, unused bytes zero.
    rht: the columnwise copy goes through the 16-point RHT (docs/numerics.md section 8) in 16-token
      chunks counted from each group's first token; a group's last chunk is zero-padded and ALL of its 16 columns
      hold transformed data (with the same transform on both wgrad operands it cancels in
      dY_g^T X_g over the padded columns). The columnwise amax/alpha are then those of the
      transformed data ([G] or [G, K]), from one extra read of x.
    T = 0 (no tokens) gives empty copies: every group empty (amax 0, alpha 1, sf_offsets 0, zero
    scale buffers of the sizes above), no kernel.
    stochastic_rounding: SR of the e2m1 codes of both copies (docs/numerics.md section 9). Element e of a copy is
      its row-major index in [T, K] (rowwise) or in the [K, W] wgrad data (columnwise) and uses
      byte e of the Philox stream of (seed, offset); seed / offset / generator as quantize_nvfp4.
    On CUDA a rowwise copy of quantize.EXACT_ROWS_MIN_GROUPED to EXACT_ROWS_MAX (1-256) rows also carries its exact
    bf16 rows (rows past the last group zero), which the W4A4 GEMMs take instead of a decode pass or of decoding the
    codes in the kernel (see quantize_nvfp4).
    """
    G = _check_grouped_args(x, offsets, NVFP4.block_size, scaling, rowwise, columnwise)
    _q._check_bool(rht, "rht")
    _q._check_bool(stochastic_rounding, "stochastic_rounding")
    if rht and not columnwise:
        raise ValueError("'rht' applies only to the columnwise copy: set columnwise=True")
    T = x.shape[0]
    seed, offset = _q._sr_args(stochastic_rounding, seed, offset, generator, x.device,
                               device_seed=x.device.type == "cuda")  # T == 0 draws no bits
    if T == 0:
        return _nvfp4_grouped_empty(x, offsets, G, scaling, rowwise, columnwise, rht)
    if _q._on_cuda(x):
        with on_device(x.device):
            return _nvfp4_grouped_cuda(x, offsets, G, scaling, rowwise, columnwise,
                                       layout.grouped_scale_rows(T, G), rht=rht, sr=stochastic_rounding,
                                       seed=seed, offset=offset)
    return reference.quantize_nvfp4_grouped(x, offsets, scaling=scaling, rowwise=rowwise, columnwise=columnwise,
                                            rht=rht, stochastic_rounding=stochastic_rounding, seed=seed,
                                            offset=offset)


def quantize_mxfp8_grouped(x: torch.Tensor, offsets: torch.Tensor, *, rowwise: bool = True) -> GroupedMXFP8:
    """Quantize the G groups of x to MXFP8 (docs/numerics.md section 6), rowwise, scales grouped along M at the
    same sf_offsets rule as NVFP4. x: contiguous [T, K], K % 32 == 0 (T = 0: empty data, zero
    scales and sf_offsets). Returns a GroupedMXFP8."""
    if rowwise is not True:
        raise ValueError("quantize_mxfp8_grouped produces the rowwise copy only: 'rowwise' must be True")
    G = _check_grouped_args(x, offsets, MXFP8.block_size)
    if x.shape[0] == 0:
        return GroupedMXFP8(**_filled(grouped_mxfp8_shapes(0, x.shape[1], G), x.device), offsets=offsets)
    if _q._on_cuda(x):
        with on_device(x.device):
            return _mxfp8_grouped_cuda(x, offsets, G)
    return reference.quantize_mxfp8_grouped(x, offsets)


def _check_stacked(w, block: int, scaling):
    """Checks w [E, N, K]; returns (w as [E*N, K], the offsets of its E groups of N rows)."""
    check_input(w, "w")
    if w.dim() != 3:
        raise ValueError(f"'w' must be 3-D [E, N, K] (stacked expert weights), got shape {tuple(w.shape)}")
    if not w.is_contiguous():
        raise ValueError("'w' must be contiguous (call .contiguous() first)")
    if w.numel() == 0:
        raise ValueError(f"'w' must not be empty, got shape {tuple(w.shape)}")
    check_scaling(scaling)
    _q._check_multiple(w.shape[2], block, "K (last dim)", "w")
    E, N, K = w.shape
    w2 = w.reshape(E * N, K)
    _q._on_cuda(w2, "w")  # the device and, on CUDA, the alignment
    offsets = layout.stacked_offsets(E, N, w.device)
    _check_offsets(offsets, w2, "w")
    return w2, offsets


def quantize_fp8_stacked(w: torch.Tensor, *, scaling: str = "tensor", columnwise: bool = False,
                         amax: Optional[torch.Tensor] = None, amax_out: Optional[torch.Tensor] = None) -> GroupedFP8Tensor:
    """Stacked expert weights w [E, N, K] as E independent FP8 tensors, one launch sequence.

    scaling "tensor": one scale per expert; "token": one per output channel (row of each expert).
    Returns a GroupedFP8Tensor with group_rows = N: data [E*N, K] (data.view(E, N, K) is what
    scalemm.grouped_gemm takes as b), scale_inv [E] or [E*N] (view(E, N) for scale_b).
    columnwise=True: also the wgrad-layout copy of the E groups of N rows (as quantize_fp8_grouped's),
    from the same pass over w: per (expert, input channel) scales, what w^T's rows need.
    amax / amax_out [E] (scaling "tensor"): delayed scaling per expert, as quantize_fp8_grouped's.
    """
    w2, offsets = _check_stacked(w, 16, scaling)
    _q._check_bool(columnwise, "columnwise")
    E, N, _ = w.shape
    check_delayed_amax(amax, amax_out, scaling, (E,), w.device)
    if w2.device.type == "cuda":
        with on_device(w.device):
            return _fp8_grouped_cuda(w2, offsets, E, scaling, True, columnwise, group_rows=N, amax=amax,
                                     amax_out=amax_out)
    return reference.quantize_fp8_stacked(w, scaling=scaling, columnwise=columnwise, amax=amax, amax_out=amax_out)


def quantize_fp8_stacked_pair(w: torch.Tensor, *, scaling: str = "tensor", amax: Optional[torch.Tensor] = None,
                              amax_out: Optional[torch.Tensor] = None) -> tuple:
    """(quantize_fp8_stacked(w), quantize_fp8_stacked(w.transpose(1, 2).contiguous())), the same bytes, from
    one pass over w on CUDA: W [E, N, K] for fprop and W^T [E, K, N] for dgrad. W^T's per-row scales are
    per (expert, input channel) over that expert's N values, what the stacked quantizer's columnwise pass
    takes, and the kernel writes that copy straight in W^T's stacked layout. N % 16 == 0 (W^T's K).
    amax / amax_out [E] (scaling "tensor"): delayed scaling, per expert, as quantize_fp8_grouped's."""
    w2, offsets = _check_stacked(w, 16, scaling)
    E, N, K = w.shape
    _q._check_multiple(N, 16, "N (dim 1)", "w")
    check_delayed_amax(amax, amax_out, scaling, (E,), w.device)
    if w2.device.type == "cuda":
        with on_device(w.device):
            return _fp8_grouped_cuda(w2, offsets, E, scaling, True, True, group_rows=N, transposed=True, amax=amax,
                                     amax_out=amax_out)
    return (reference.quantize_fp8_stacked(w, scaling=scaling, amax=amax, amax_out=amax_out),
            reference.quantize_fp8_stacked(w.transpose(1, 2).contiguous(), scaling=scaling, amax=amax))


def zero_rows_past_groups(out: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """out [T, ...] with its rows past the groups (from the clamped running maximum of the offsets: the
    rows scalemm.grouped_gemm does not write) set to zero, in place and without reading the offsets on the
    host; CUDA-graph capturable. On CUDA out must be contiguous with rows of a multiple of 16 bytes."""
    check_input(out, "out")
    if out.dim() < 1 or not out.is_contiguous():
        raise ValueError("'out' must be a contiguous tensor with at least one dimension")
    if not isinstance(offsets, torch.Tensor) or offsets.dim() != 1 or offsets.numel() == 0 \
            or offsets.dtype != torch.int32 or offsets.device != out.device:
        raise ValueError(f"'offsets' must be a non-empty 1-D int32 tensor on {out.device}")
    T = out.shape[0]
    if out.device.type != "cuda":
        out[int(layout.group_bounds(offsets, T)[1][-1]):] = 0
        return out
    row_bytes = out[0].numel() * out.element_size() if T else 0
    if row_bytes % 16 or out.data_ptr() % 16:
        raise ValueError(f"'out': rows of {row_bytes} bytes at {out.data_ptr() % 16} past 16-byte alignment; "
                         "the CUDA path needs rows of a multiple of 16 bytes, 16-byte aligned")
    if out.numel() == 0:
        return out
    with on_device(out.device):
        args = abi.ZeroRowsPastGroupsArgs(out=out.data_ptr(), rows=T, row_bytes=row_bytes, offsets=offsets.data_ptr(),
                                          groups=offsets.numel(), stream=_q._stream(out.device))
        _launcher(torch.bfloat16, "scalemm_zero_rows_past_groups")(ctypes.byref(args))
    return out


def quantize_nvfp4_stacked(w: torch.Tensor, *, scaling: str = "tensor", columnwise: bool = False) -> GroupedNVFP4Tensor:
    """Stacked expert weights w [E, N, K] as E independent NVFP4 tensors, one launch sequence.

    Global scale per expert ("tensor": alpha/amax [E]) or per output channel ("token": [E*N]).
    qdata [E*N, K/2]; scales batched (docs/numerics.md section 5): expert e's Rp x Cp swizzled block (Rp =
    ceil(N/128)*128) at byte e * Rp * Cp, i.e. scales.view(E, Rp * Cp)[e] is exactly what
    quantize_nvfp4(w[e]) gives. group_rows = N, scale_rows = E * Rp.
    columnwise=True: also the wgrad-layout copy of the E groups of N rows (as quantize_nvfp4_grouped's,
    no RHT), from the same pass over w.
    """
    w2, offsets = _check_stacked(w, NVFP4.block_size, scaling)
    _q._check_bool(columnwise, "columnwise")
    E, N, _ = w.shape
    if w2.device.type == "cuda":
        with on_device(w.device):
            return _nvfp4_grouped_cuda(w2, offsets, E, scaling, True, columnwise, layout.stacked_scale_rows(E, N),
                                       group_rows=N)
    return reference.quantize_nvfp4_stacked(w, scaling=scaling, columnwise=columnwise)


def prepare_residual_weight(w: torch.Tensor, channels) -> torch.Tensor:
    """w [N, K] -> [w | w[:, channels] | 0] of shape [N, K + ceil(K_e/16)*16] (w's dtype): the
    weight that matches quantize_nvfp4_residual(x, channels) (the same channels rule). Quantize it
    as usual."""
    if not isinstance(w, torch.Tensor) or w.dim() != 2:
        raise ValueError("'w' must be a 2-D tensor [N, K]")
    return residual_weight(w, residual_channels(channels, w.shape[1], w.device))


def quantize_nvfp4_residual(x: torch.Tensor, channels, *, scaling: str = "tensor") -> NVFP4Tensor:
    """Residual NVFP4 (docs/numerics.md section 10, ARCQuant-style) in scalemm's layout.

    x: contiguous [M, K], K % 16 == 0. channels: the K_e residual channels (e.g. the top-|x|
    channels, calibrated offline), in the order the residual columns take: a non-empty sequence of
    ints or a 1-D int32/int64 CPU tensor, each in [0, K), none repeated (a repeated channel would
    count its residual twice). They are checked on the host; a CUDA tensor is refused rather
    than read back with a hidden sync (pass channels.cpu() or a list).
    Returns an NVFP4Tensor of shape (M, K + K_e'), K_e' = ceil(K_e/16)*16: columns [0, K) are
    Q(x), columns K + i hold Q(r)[:, channels[i]] with r = x - dequant(Q(x)) in fp32, the rest zero. The residual uses x's own amax (same alpha), so
      gemm(Q'(x), Q(prepare_residual_weight(w, channels)))  ~=  Q(x) W^T + Q(r_e) W_e^T
    in one GEMM. On CUDA it is quantize_nvfp4 twice plus torch ops (bit-identical to
    scalemm.reference.quantize_nvfp4_residual).
    """
    _check_x(x)
    check_scaling(scaling)
    K = x.shape[1]
    _q._check_multiple(K, NVFP4.block_size, "K (last dim)")
    idx = residual_channels(channels, K, x.device)
    return quantize_residual(x, idx, scaling, _q.quantize_nvfp4)
