"""Grouped (MoE), stacked and residual quantization, the reference (docs/numerics.md sections 5
"Grouped along M / K", 7 and 10). Loops over groups in plain torch; host syncs are fine here (the
CUDA kernels in quant_grouped.cuh never read the offsets on the host).

Conventions shared with the kernels:
- offsets int32 [G]: group g owns rows [ends[g-1], ends[g]) of x [T, K], where the ends are the
  offsets clamped into [0, T] and made non-decreasing (formats/layout.py, group_bounds): bad
  offsets give short or empty groups, never out-of-bounds reads.
- Rows past ends[G-1] belong to no group: their rowwise data is zero, they take no scale rows,
  and with "token" scaling their amax is 0 (scale_inv / alpha = 1).
- Empty groups have amax 0 (scale_inv / alpha = 1) and take no rows or columns; so does every
  group of an empty x (T = 0).
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from ..formats import MXFP8, NVFP4
from ..formats import layout
from ..formats.base import check_offsets, check_scaling, check_u64
from ..formats.fp8 import GroupedFP8Tensor, dequantize_fp8_grouped
from ..formats.mxfp8 import GroupedMXFP8
from ..formats.nvfp4 import (GroupedNVFP4Tensor, NVFP4Tensor, dequantize_nvfp4_grouped, quantize_residual,
                             residual_channels, residual_weight, residual_width)
from .numerics import _F32, _abs_amax, _check_matrix, _rht16_columnwise_fp32, e4m3_satfinite, sr_bits
from .quantize import _check_copies, _fp8_scale, _mxfp8_rows, _nvfp4_rows, nvfp4_global_scale, quantize_nvfp4

__all__ = ["quantize_fp8_grouped", "dequantize_fp8_grouped", "quantize_nvfp4_grouped", "dequantize_nvfp4_grouped",
           "quantize_mxfp8_grouped", "quantize_fp8_stacked", "quantize_nvfp4_stacked", "residual_width",
           "prepare_residual_weight", "quantize_nvfp4_residual"]


def _check_grouped(x, offsets) -> Tuple[int, int, int]:
    _check_matrix(x, "x")
    G = check_offsets(offsets, x)
    T, K = x.shape
    return T, K, G


def _host_bounds(offsets: torch.Tensor, T: int):
    """(starts, ends) of the groups as Python lists (a host sync)."""
    return (t.tolist() for t in layout.group_bounds(offsets, T))


def quantize_fp8_grouped(x: torch.Tensor, offsets: torch.Tensor, *, scaling: str = "tensor",
                         rowwise: bool = True, columnwise: bool = False, amax: Optional[torch.Tensor] = None,
                         amax_out: Optional[torch.Tensor] = None) -> GroupedFP8Tensor:
    """Grouped FP8 e4m3 current (or, given `amax`, delayed) scaling (docs/numerics.md section 7), one loop
    iteration per group.

    x: [T, K] bf16/fp16/fp32, rows sorted by group; offsets int32 [G] cumulative row ends.
    scaling "tensor": one amax per group (both copies); "token": per row (rowwise) and per
    column of x within each group (columnwise).
    Rowwise: data [T, K], scale_inv [G] or [T]. Columnwise (wgrad layout): data [K, W],
    W = wgrad_width(T, G), group g's rows as columns [p_g, p_g + m_g), zero padding;
    scale_inv [G] or [G, K]. Delayed scaling ("tensor" only): a given `amax` [G] replaces the
    groups' own (values beyond it saturate to +-448); `amax_out` [G] fp32 receives each group's
    max|x| (0 for an empty group).
    """
    T, K, G = _check_grouped(x, offsets)
    check_scaling(scaling)
    _check_copies(rowwise, columnwise)
    if (amax is not None or amax_out is not None) and scaling != "tensor":
        raise ValueError("'amax' / 'amax_out' (delayed scaling) take scaling='tensor'")
    x32 = x.to(_F32).contiguous()
    starts, ends = _host_bounds(offsets, T)
    last = ends[-1]
    tensor = scaling == "tensor"
    g_amax = torch.stack([_abs_amax(x32[s:e]) for s, e in zip(starts, ends)]) if tensor else None
    if amax_out is not None:
        amax_out.copy_(g_amax)
    if amax is not None:
        g_amax = amax.to(_F32)
    e4m3 = torch.float8_e4m3fn

    data = scale_inv = None
    if rowwise:
        data = torch.zeros(T, K, dtype=torch.uint8, device=x.device)
        if tensor:
            scale, scale_inv = _fp8_scale(g_amax)
            for g, (s, e) in enumerate(zip(starts, ends)):
                data[s:e] = e4m3_satfinite(x32[s:e] * scale[g]).view(torch.uint8)
        else:
            amax = _abs_amax(x32, dim=1)
            amax[last:] = 0
            scale, scale_inv = _fp8_scale(amax)
            data[:last] = e4m3_satfinite(x32[:last] * scale[:last, None]).view(torch.uint8)
        data = data.view(e4m3)

    col = None
    if columnwise:
        W = layout.wgrad_width(T, G)
        p16 = layout.wgrad_column_starts(offsets, T).tolist()
        cdata = torch.zeros(K, W, dtype=torch.uint8, device=x.device)
        if tensor:
            cscale, csinv = _fp8_scale(g_amax)
        else:
            camax = torch.stack([_abs_amax(x32[s:e], 0) for s, e in zip(starts, ends)])  # [G, K]
            cscale, csinv = _fp8_scale(camax)
        for g, (s, e) in enumerate(zip(starts, ends)):
            if e > s:
                sc = cscale[g] if tensor else cscale[g][:, None]
                cdata[:, p16[g]:p16[g] + e - s] = e4m3_satfinite(x32[s:e].t() * sc).view(torch.uint8)
        col = GroupedFP8Tensor(cdata.view(e4m3), csinv, offsets, (T, K), scaling, x.dtype, layout="wgrad")
    return GroupedFP8Tensor(data, scale_inv, offsets, (T, K), scaling, x.dtype, columnwise=col)


def _nvfp4_grouped(x, offsets, scaling, rowwise, columnwise, scale_rows, group_rows=None, rht=False,
                   stochastic_rounding=False, seed=0, offset=0):
    T, K, G = _check_grouped(x, offsets)
    check_scaling(scaling)
    if K % NVFP4.block_size != 0:
        raise ValueError(f"'x' K must be a multiple of {NVFP4.block_size}, got K={K}")
    _check_copies(rowwise, columnwise)
    if rht and not columnwise:
        raise ValueError("'rht' applies only to the columnwise copy: set columnwise=True")
    if stochastic_rounding:
        check_u64(seed, "seed")
        check_u64(offset, "offset")
    x32 = x.to(_F32).contiguous()
    dev = x.device
    starts, ends = _host_bounds(offsets, T)
    last = ends[-1]
    tensor = scaling == "tensor"
    g_amax = torch.stack([_abs_amax(x32[s:e]) for s, e in zip(starts, ends)]) if tensor else None
    e4m3 = torch.float8_e4m3fn
    C = NVFP4.scale_cols(K)
    row = (None,) * 5
    if rowwise:
        sf = layout.sf_offsets(offsets, T)
        sf_l = sf.tolist()
        qdata = torch.zeros(NVFP4.data_shape(T, K), dtype=NVFP4.data_dtype, device=dev)
        scales = torch.zeros(layout.grouped_scale_bytes(scale_rows, C), dtype=torch.uint8, device=dev)
        u = sr_bits(seed, offset, T * K, device=dev).reshape(T, K) if stochastic_rounding else None
        if not tensor:
            r_amax = _abs_amax(x32, dim=1)
            r_amax[last:] = 0
        for g, (s, e) in enumerate(zip(starts, ends)):
            if e > s:
                q, sc, _, _ = _nvfp4_rows(x32[s:e], g_amax[g] if tensor else r_amax[s:e],
                                          None if u is None else u[s:e])
                qdata[s:e] = q
                layout.group_scale_block(scales, sf_l[g], e - s, C).copy_(sc.view(torch.uint8))
        amax = g_amax if tensor else r_amax
        row = (qdata, scales.view(e4m3), sf, nvfp4_global_scale(amax)[1], amax)
    col = None
    if columnwise:
        W = layout.wgrad_width(T, G)
        p16 = layout.wgrad_column_starts(offsets, T).tolist()
        csf = layout.wgrad_sf_offsets(offsets, T)
        csf_l = csf.tolist()
        cq = torch.zeros(NVFP4.data_shape(K, W), dtype=NVFP4.data_dtype, device=dev)
        cs = torch.zeros(layout.wgrad_scale_bytes(T, G, K), dtype=torch.uint8, device=dev)
        u = sr_bits(seed, offset, K * W, device=dev).reshape(K, W) if stochastic_rounding else None
        xts = []  # each group's [K, ceil(m/16)*16] block: x_g.T zero-padded, RHT'd over 16-chunks
        for s, e in zip(starts, ends):
            m16 = layout.round_up(e - s, layout.WGRAD_ALIGN)
            xg = torch.zeros(m16, K, dtype=_F32, device=dev)
            xg[:e - s] = x32[s:e]
            xts.append(_rht16_columnwise_fp32(xg).to(torch.bfloat16).to(_F32) if rht else xg.t().contiguous())
        if tensor and not rht:
            camax = g_amax
        else:
            camax = torch.stack([_abs_amax(xt.t(), None if tensor else 0) for xt in xts])
        for g, xt in enumerate(xts):
            m16 = xt.shape[1]
            if m16:
                uc = None if u is None else u[:, p16[g]:p16[g] + m16]
                q, sc, _, _ = _nvfp4_rows(xt, camax[g], uc)
                cq[:, p16[g] // 2:(p16[g] + m16) // 2] = q
                layout.wgrad_group_scale_block(cs, csf_l[g], K, m16 // NVFP4.block_size).copy_(sc.view(torch.uint8))
        col = GroupedNVFP4Tensor(cq, cs.view(e4m3), csf, nvfp4_global_scale(camax)[1], camax, offsets, (T, K),
                                 scaling, x.dtype, layout="wgrad", rht=rht)
    return GroupedNVFP4Tensor(*row, offsets, (T, K), scaling, x.dtype, scale_rows=scale_rows,
                              columnwise=col, group_rows=group_rows)


def quantize_nvfp4_grouped(x: torch.Tensor, offsets: torch.Tensor, *, scaling: str = "tensor",
                           rowwise: bool = True, columnwise: bool = False, rht: bool = False,
                           stochastic_rounding: bool = False, seed: int = 0,
                           offset: int = 0) -> GroupedNVFP4Tensor:
    """Grouped NVFP4 (docs/numerics.md sections 2, 3, 5, 8, 9), one loop iteration per group.

    Rowwise: qdata uint8 [T, K/2]; scales e4m3 [grouped_scale_rows(T, G) * Cp] with group g's
    scale rows at sf_offsets[g] = sum_{j<g} ceil(m_j/128)*128 (each group's block swizzled as
    one tensor of ceil(m_g/128)*128 rows; every other byte zero); alpha = S_dec and amax [G]
    ("tensor": per group) or [T] ("token").
    Columnwise (wgrad layout): qdata [K, W/2] (group g's tokens in columns [p_g, p_g + m_g),
    blocks of 16 along tokens, zero padding); scales grouped along K: group g's K x ceil(m_g/16)
    matrix padded to Cp_g = ceil(m_g/64)*4 columns and Rp = ceil(K/128)*128 rows, swizzled on
    its own at byte Rp * sf_offsets[g], sf_offsets[g] = sum_{j<g} ceil(m_j/64)*4; buffer
    Rp * wgrad_scale_cols(T, G) bytes. alpha/amax [G] ("tensor": the rowwise amax, or the amax
    of the transformed data with rht) or [G, K].
    rht (columnwise only): group g's tokens, zero-padded to m16 = ceil(m_g/16)*16, go through
    the 16-point RHT in 16-chunks from the group's first token (rht16_columnwise of the padded
    [m16, K] block), so all m16 columns p_g .. p_g + m16 - 1 hold transformed data (the
    padding columns too: they are what makes the transform cancel in dY_g^T X_g).
    stochastic_rounding: SR of every copy's E2M1 codes; element e of a copy (row-major index in
    [T, K] for the rowwise copy, in the [K, W] wgrad data for the columnwise copy) uses byte e
    of sr_bits(seed, offset, numel of that copy).
    """
    T, _, G = _check_grouped(x, offsets)
    return _nvfp4_grouped(x, offsets, scaling, rowwise, columnwise, layout.grouped_scale_rows(T, G), rht=rht,
                          stochastic_rounding=stochastic_rounding, seed=seed, offset=offset)


def quantize_mxfp8_grouped(x: torch.Tensor, offsets: torch.Tensor) -> GroupedMXFP8:
    """Grouped MXFP8 rowwise (docs/numerics.md sections 6, 5): a GroupedMXFP8 with data e4m3 [T, K],
    scales uint8 e8m0 [grouped_scale_rows(T, G) * Cp] grouped along M like NVFP4 (sf_offsets),
    sf_offsets int32 [G]. Rows past the last group: data 0, no scale rows."""
    T, K, G = _check_grouped(x, offsets)
    if K % MXFP8.block_size != 0:
        raise ValueError(f"'x' K must be a multiple of {MXFP8.block_size}, got K={K}")
    x32 = x.to(_F32).contiguous()
    starts, ends = _host_bounds(offsets, T)
    C = MXFP8.scale_cols(K)
    sf = layout.sf_offsets(offsets, T)
    sf_l = sf.tolist()
    data = torch.zeros(T, K, dtype=torch.uint8, device=x.device)
    scales = torch.zeros(layout.grouped_scale_bytes(layout.grouped_scale_rows(T, G), C), dtype=torch.uint8,
                         device=x.device)
    for g, (s, e) in enumerate(zip(starts, ends)):
        if e > s:
            d, sc = _mxfp8_rows(x32[s:e])
            data[s:e] = d.view(torch.uint8)
            layout.group_scale_block(scales, sf_l[g], e - s, C).copy_(sc)
    return GroupedMXFP8(data.view(torch.float8_e4m3fn), scales, sf, offsets)


def _stacked_offsets(w: torch.Tensor) -> torch.Tensor:
    if not isinstance(w, torch.Tensor) or w.dim() != 3 or w.numel() == 0:
        raise ValueError(f"'w' must be a non-empty 3-D tensor [E, N, K], got "
                         f"{tuple(w.shape) if isinstance(w, torch.Tensor) else type(w).__name__}")
    E, N, _ = w.shape
    return layout.stacked_offsets(E, N, w.device)


def quantize_fp8_stacked(w: torch.Tensor, *, scaling: str = "tensor", columnwise: bool = False,
                         amax: Optional[torch.Tensor] = None, amax_out: Optional[torch.Tensor] = None) -> GroupedFP8Tensor:
    """Stacked expert weights w [E, N, K] as E independent FP8 tensors: data [E*N, K]
    (view as [E, N, K]), scale_inv [E] ("tensor") or [E*N] ("token": per output channel);
    columnwise=True: also the wgrad-layout copy of the E groups of N rows. amax / amax_out [E]:
    delayed scaling, as quantize_fp8_grouped."""
    offsets = _stacked_offsets(w)
    E, N, K = w.shape
    t = quantize_fp8_grouped(w.reshape(E * N, K), offsets, scaling=scaling, columnwise=columnwise, amax=amax,
                             amax_out=amax_out)
    t.group_rows = N
    return t


def quantize_nvfp4_stacked(w: torch.Tensor, *, scaling: str = "tensor", columnwise: bool = False) -> GroupedNVFP4Tensor:
    """Stacked expert weights w [E, N, K] as E independent NVFP4 tensors: qdata [E*N, K/2],
    scales batched (expert e's Rp x Cp swizzled block at byte e * Rp * Cp, docs/numerics.md
    section 5), alpha/amax [E] ("tensor") or [E*N] ("token"); columnwise=True: also the
    wgrad-layout copy of the E groups of N rows (no RHT)."""
    offsets = _stacked_offsets(w)
    E, N, K = w.shape
    return _nvfp4_grouped(w.reshape(E * N, K), offsets, scaling, True, columnwise, layout.stacked_scale_rows(E, N),
                          group_rows=N)


# ---------------------------------------------------------------------------
# Section 10: residual NVFP4 (the layout: formats/nvfp4.py)
# ---------------------------------------------------------------------------

def prepare_residual_weight(w: torch.Tensor, channels) -> torch.Tensor:
    """w [N, K] -> w' [N, K + residual_width(K_e)] = [w | w[:, channels] | 0] (w's dtype)."""
    if not isinstance(w, torch.Tensor) or w.dim() != 2:
        raise ValueError("'w' must be a 2-D tensor [N, K]")
    return residual_weight(w, residual_channels(channels, w.shape[1], w.device))


def quantize_nvfp4_residual(x: torch.Tensor, channels, *, scaling: str = "tensor") -> NVFP4Tensor:
    """x [M, K] -> NVFP4Tensor of shape (M, K + residual_width(K_e)): [Q(x) | Q(r[:, channels])]
    with r = x - dequant(Q(x)) (fp32) quantized with x's own amax (same alpha). Multiply it with
    prepare_residual_weight(w, channels) quantized as usual."""
    _check_matrix(x, "x")
    idx = residual_channels(channels, x.shape[1], x.device)
    return quantize_residual(x, idx, scaling, quantize_nvfp4)
