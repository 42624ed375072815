"""NVFP4 (docs/numerics.md sections 1-3, 5, 10): e2m1 data packed two per byte, one e4m3 scale
per 16 elements along K, an fp32 global decode scale per tensor or per token. NVFP4Tensor,
GroupedNVFP4Tensor, the shapes of their tensors, the e2m1 decode and packing, their
dequantization, and the residual NVFP4 layout.
"""
from __future__ import annotations

import operator
from typing import Callable, Optional

import torch

from . import NVFP4, layout
from .layout import SF_TILE_ROWS, grouped_scale_rows
from .base import (Shapes, _Container, check_all_or_none, check_bool, check_columnwise, check_dequantize_dtype,
                   check_device, check_fields, check_grouped_columnwise, check_grouped_meta, check_orig_dtype,
                   check_scaling, check_shape, move, version)

__all__ = ["NVFP4Tensor", "GroupedNVFP4Tensor", "nvfp4_shapes", "grouped_nvfp4_shapes", "e2m1_decode", "pack_fp4",
           "unpack_fp4", "dequantize_nvfp4", "dequantize_nvfp4_grouped", "residual_width", "residual_channels",
           "residual_weight", "quantize_residual"]

_F32 = torch.float32


def nvfp4_shapes(rows: int, cols: int, scaling: str) -> Shapes:
    """The tensors of one NVFP4 copy of a rows x cols matrix (cols % 16 == 0): qdata uint8
    [rows, cols / 2], scales e4m3 [Rp * Cp] (R = rows, C = cols / 16, 128x4 swizzled), alpha and
    amax fp32, 0-d ("tensor") or [rows] ("token")."""
    g = () if scaling == "tensor" else (rows,)
    return {"qdata": (NVFP4.data_shape(rows, cols), NVFP4.data_dtype),
            "scales": ((layout.swizzled_bytes(rows, NVFP4.scale_cols(cols)),), NVFP4.scale_dtype),
            "alpha": (g, _F32), "amax": (g, _F32)}


def grouped_nvfp4_shapes(T: int, K: int, G: int, scaling: str, layout_: str = "rows",
                         scale_rows: Optional[int] = None) -> Shapes:
    """The tensors of one grouped NVFP4 copy of x [T, K] in G groups.

    "rows": qdata [T, K/2]; scales e4m3 grouped along M, scale_rows * Cp bytes (scale_rows default
      grouped_scale_rows(T, G)); sf_offsets int32 [G]; alpha, amax [G] ("tensor") or [T] ("token").
    "wgrad": qdata [K, W/2] (W = wgrad_width(T, G)); scales grouped along K, wgrad_scale_bytes(T, G, K)
      bytes; sf_offsets int32 [G]; alpha, amax [G] or [G, K].
    """
    if layout_ == "rows":
        rows = grouped_scale_rows(T, G) if scale_rows is None else scale_rows
        qdata = NVFP4.data_shape(T, K)
        scale_bytes = layout.grouped_scale_bytes(rows, NVFP4.scale_cols(K))
        token = (T,)
    else:
        qdata = NVFP4.data_shape(K, layout.wgrad_width(T, G))
        scale_bytes = layout.wgrad_scale_bytes(T, G, K)
        token = (G, K)
    g = (G,) if scaling == "tensor" else token
    return {"qdata": (qdata, NVFP4.data_dtype), "scales": ((scale_bytes,), NVFP4.scale_dtype),
            "sf_offsets": ((G,), torch.int32), "alpha": (g, _F32), "amax": (g, _F32)}


# ---------------------------------------------------------------------------
# e2m1 codes and their packing (docs/numerics.md section 1)
# ---------------------------------------------------------------------------

def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    """fp32 values of E2M1 codes (uint8, same shape); code 0x8 decodes to -0.0.

    Only the low 4 bits of each code are read.
    """
    if not isinstance(codes, torch.Tensor) or codes.dtype != torch.uint8:
        raise TypeError(f"'codes' must be a uint8 tensor, got "
                        f"{getattr(codes, 'dtype', type(codes).__name__)}")
    # computed from the bits (no lookup table to copy to the device): exponent field e
    # (bias 1), mantissa bit m: e == 0 -> m * 0.5, else 2^(e-1) * (1 + m/2)
    exponent = ((codes >> 1) & 0x3).to(_F32)
    mantissa = (codes & 0x1).to(_F32)
    magnitude = torch.where(exponent == 0, mantissa * 0.5,
                            torch.exp2(exponent - 1) * (1 + mantissa * 0.5))
    return torch.where((codes & 0x8) != 0, -magnitude, magnitude)  # code 0x8 -> -0.0


def pack_fp4(codes: torch.Tensor) -> torch.Tensor:
    """uint8 codes [..., K] (K even, values < 16) -> uint8 [..., K // 2].

    byte i = codes[2i] | codes[2i+1] << 4: the even element in the LOW nibble.
    """
    if not isinstance(codes, torch.Tensor) or codes.dtype != torch.uint8:
        raise TypeError("'codes' must be a uint8 tensor")
    if codes.dim() == 0 or codes.shape[-1] % 2 != 0:
        raise ValueError(f"'codes' last dimension must be even, got shape {tuple(codes.shape)}")
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def unpack_fp4(packed: torch.Tensor) -> torch.Tensor:
    """uint8 [..., K // 2] -> uint8 codes [..., K] (low nibble first)."""
    if not isinstance(packed, torch.Tensor) or packed.dtype != torch.uint8:
        raise TypeError("'packed' must be a uint8 tensor")
    if packed.dim() == 0:
        raise ValueError("'packed' must have at least one dimension")
    codes = torch.stack((packed & 0xF, packed >> 4), dim=-1)
    return codes.reshape(*packed.shape[:-1], packed.shape[-1] * 2)


def _decode_blocks(qdata: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """fp32 [R, C/16, 16]: value(code) * s for packed qdata [R, C/2] and e4m3 block scales
    [R, C/16] (the product is exact; no global scale)."""
    R = qdata.shape[0]
    values = e2m1_decode(unpack_fp4(qdata)).reshape(R, scales.shape[1], NVFP4.block_size)
    return values * scales.to(_F32)[..., None]


# ---------------------------------------------------------------------------
# the containers
# ---------------------------------------------------------------------------

class NVFP4Tensor(_Container):
    """NVFP4 (e2m1 data, e4m3 scales per 16 elements along K, fp32 global scale).

    Fields:
      qdata: uint8 [M, K // 2]; byte = code[2i] | code[2i+1] << 4 (low nibble = even).
      scales: float8_e4m3fn 1-D, length Rp * Cp for R = M, C = K // 16, 128x4 swizzled
        (docs/numerics.md section 5), padding bytes zero.
      alpha: fp32 decode scale S_dec; 0-d for scaling="tensor", [M] for scaling="token".
      amax: fp32, same shape as alpha: the amax the scales were derived from.
      shape: (M, K), the logical shape; K % 16 == 0.
      scaling: "tensor" or "token".
      orig_dtype: dtype of the tensor that was quantized (bf16, fp16 or fp32).
      rht: True if the 16-point random Hadamard transform was applied before quantizing
        (only ever on a columnwise copy).
      columnwise: None or an NVFP4Tensor of x.T (shape (K, M)), same scaling.
    qdata, scales, alpha and amax are either all tensors or all None (rowwise copy not
    materialised; then columnwise must be present).
    """

    _ROW = "qdata"
    __slots__ = ("qdata", "scales", "alpha", "amax", "shape", "scaling", "orig_dtype", "rht",
                 "columnwise", "_exact")

    def __init__(self, qdata, scales, alpha, amax, shape, scaling, orig_dtype, rht=False,
                 columnwise=None):
        cls = "NVFP4Tensor"
        shape = check_shape(cls, shape, block=NVFP4.block_size)
        check_scaling(scaling, cls)
        check_orig_dtype(cls, orig_dtype)
        check_bool(cls, "rht", rht)
        fields = {"qdata": qdata, "scales": scales, "alpha": alpha, "amax": amax}
        rowwise = check_all_or_none(cls, list(fields.items()))
        if rowwise:
            check_fields(cls, nvfp4_shapes(*shape, scaling), fields)
        check_columnwise(cls, NVFP4Tensor, columnwise, shape, rowwise, qdata.device if rowwise else None)
        if columnwise is not None and columnwise.scaling != scaling:
            raise ValueError(f"{cls}: 'columnwise' must have scaling={scaling!r}, "
                             f"got {columnwise.scaling!r}")

        self.qdata, self.scales, self.alpha, self.amax = qdata, scales, alpha, amax
        self.shape, self.scaling, self.orig_dtype, self.rht = shape, scaling, orig_dtype, rht
        self.columnwise = columnwise
        self._exact = None  # attach_exact_rows

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """[M, K] tensor of `dtype`: value(code) * block scale * alpha, computed in fp32.

        Only the rowwise copy is decoded (a columnwise-only container raises ValueError;
        decode `.columnwise` instead, which gives x.T, RHT-transformed if `.columnwise.rht`).
        """
        return dequantize_nvfp4(self, dtype)

    def to(self, device) -> "NVFP4Tensor":
        """A copy with every tensor (and the columnwise copy) moved to `device`."""
        device = check_device("NVFP4Tensor", device)
        return NVFP4Tensor(
            move(self.qdata, device), move(self.scales, device), move(self.alpha, device),
            move(self.amax, device), self.shape, self.scaling, self.orig_dtype, self.rht,
            None if self.columnwise is None else self.columnwise.to(device))

    def __repr__(self) -> str:
        return (f"NVFP4Tensor(shape={self.shape}, scaling={self.scaling!r}, device={self.device}, "
                f"orig_dtype={self.orig_dtype}, rowwise={self.has_rowwise}, "
                f"columnwise={self.columnwise is not None}, rht={self.rht})")


class GroupedNVFP4Tensor(_Container):
    """Grouped NVFP4 of x [T, K] in G groups (docs/numerics.md sections 2, 3, 5; the layouts
    "rows" and "wgrad" as GroupedFP8Tensor's).

    Fields:
      qdata: uint8 packed e2m1; "rows": [T, K/2]; "wgrad": [K, W/2] (blocks of 16 along tokens).
      scales: float8_e4m3fn 1-D, every unused byte zero.
        "rows" (grouped along M): scale_rows * Cp bytes, Cp = ceil(K/64)*4; group g's local
          row r is scale row sf_offsets[g] + r of the 128x4 swizzled layout.
        "wgrad" (grouped along K): Rp * Cb bytes, Rp = ceil(K/128)*128, Cb = 4*ceil((T + 63 G)/64);
          group g's K x ceil(m_g/16) matrix, padded to Rp x Cp_g (Cp_g = ceil(m_g/64)*4), is
          swizzled on its own and starts at byte Rp * sf_offsets[g].
      sf_offsets: int32 [G] (device-computed): "rows": sum_{j<g} ceil(m_j/128)*128;
        "wgrad": sum_{j<g} ceil(m_j/64)*4 (scale columns).
      alpha: fp32 S_dec, amax: fp32; "tensor": [G]; "token": [T] ("rows") or [G, K] ("wgrad").
      offsets, shape (T, K), scaling, orig_dtype, layout, columnwise, group_rows: as GroupedFP8Tensor.
      scale_rows: rows of the "rows" scale buffer (host-known): layout.grouped_scale_rows(T, G) for
        grouped activations, layout.stacked_scale_rows(E, N) for stacked expert weights (the
        batched layout: expert e's block at byte e * Rp * Cp). Unused for "wgrad".
      rht: True for a "wgrad" copy whose groups went through the 16-point RHT (docs/numerics.md
        section 8; dequantize then gives the transformed x.T).
    qdata, scales, sf_offsets, alpha and amax are all tensors or all None (columnwise-only).
    """

    _ROW = "qdata"
    __slots__ = ("qdata", "scales", "sf_offsets", "alpha", "amax", "offsets", "shape", "scaling", "orig_dtype",
                 "layout", "scale_rows", "columnwise", "group_rows", "rht", "_exact")

    def __init__(self, qdata, scales, sf_offsets, alpha, amax, offsets, shape, scaling, orig_dtype,
                 layout="rows", scale_rows=None, columnwise=None, group_rows=None, rht=False):
        cls = "GroupedNVFP4Tensor"
        shape = check_grouped_meta(cls, offsets, shape, layout, group_rows, NVFP4.block_size)
        check_scaling(scaling, cls)
        check_orig_dtype(cls, orig_dtype)
        check_bool(cls, "rht", rht)
        if rht and layout != "wgrad":
            raise ValueError(f"{cls}: only a 'wgrad'-layout copy can be RHT-transformed")
        T, K = shape
        G = offsets.numel()
        if layout == "rows":
            if scale_rows is None:
                scale_rows = grouped_scale_rows(T, G)
            if not isinstance(scale_rows, int) or scale_rows < 0 or scale_rows % SF_TILE_ROWS:
                raise ValueError(f"{cls}: 'scale_rows' must be a non-negative multiple of 128, got {scale_rows!r}")
        fields = {"qdata": qdata, "scales": scales, "sf_offsets": sf_offsets, "alpha": alpha, "amax": amax}
        rowwise = check_all_or_none(cls, list(fields.items()))
        if rowwise:
            shapes = {**grouped_nvfp4_shapes(T, K, G, scaling, layout, scale_rows), "offsets": ((G,), torch.int32)}
            check_fields(cls, shapes, {**fields, "offsets": offsets})
        check_grouped_columnwise(cls, GroupedNVFP4Tensor, columnwise, layout, rowwise, shape, scaling, offsets,
                                 qdata.device if rowwise else None)
        self.qdata, self.scales, self.sf_offsets, self.alpha, self.amax = qdata, scales, sf_offsets, alpha, amax
        self.offsets, self.shape, self.scaling, self.orig_dtype = offsets, shape, scaling, orig_dtype
        self.layout, self.scale_rows, self.columnwise, self.group_rows = layout, scale_rows, columnwise, group_rows
        self.rht = rht
        self._exact = None  # attach_exact_rows

    @property
    def num_groups(self) -> int:
        return self.offsets.numel()

    def dequantize(self, dtype: torch.dtype = torch.float32, *, padded: bool = False) -> torch.Tensor:
        """"rows": [T, K]; "wgrad": [K, T] (x.T, transformed if rht), or with padded=True the [K, W]
        wgrad data with every group's padding columns. Syncs the host."""
        return dequantize_nvfp4_grouped(self, dtype, padded=padded)

    def to(self, device) -> "GroupedNVFP4Tensor":
        """A copy with every tensor (offsets and the columnwise copy included) moved to `device`."""
        device = check_device("GroupedNVFP4Tensor", device)
        return GroupedNVFP4Tensor(
            move(self.qdata, device), move(self.scales, device), move(self.sf_offsets, device),
            move(self.alpha, device), move(self.amax, device), self.offsets.to(device), self.shape, self.scaling,
            self.orig_dtype, self.layout, self.scale_rows,
            None if self.columnwise is None else self.columnwise.to(device), self.group_rows, self.rht)

    def __repr__(self) -> str:
        return (f"GroupedNVFP4Tensor(shape={self.shape}, groups={self.num_groups}, layout={self.layout!r}, "
                f"scaling={self.scaling!r}, device={self.device}, orig_dtype={self.orig_dtype}, "
                f"rowwise={self.has_rowwise}, columnwise={self.columnwise is not None}, rht={self.rht})")


# The exact rows a quantizer may write beside a rowwise copy (scalemm.quantize.exact_rows_wanted): bf16 [M, K] =
# value(code) x block scale, no alpha (docs/numerics.md section 4: exact in bf16), the bits the W4A4 GEMMs' decode
# pass (scalemm.gemm_nvfp4.dequantize_rows_bf16) computes, so that a GEMM on the copy runs no pass. Private to the
# container (not a field: to(), the constructor and copies of the fields do not carry it), and valid only while the
# tensors it was made from are the container's and unchanged in place (their version counters).

def attach_exact_rows(q, exact: torch.Tensor, *sources: torch.Tensor):
    """Keep `exact` with the NVFP4Tensor / GroupedNVFP4Tensor q (its rowwise copy's exact rows, made from q.qdata,
    q.scales and `sources`, e.g. the grouped offsets); returns q."""
    tensors = (q.qdata, q.scales, exact) + sources
    q._exact = (tensors, tuple(version(t) for t in tensors))
    return q


def exact_rows(q) -> Optional[torch.Tensor]:
    """q's exact rows (attach_exact_rows), or None: none were written, or q.qdata / q.scales are other tensors now,
    or one of the tensors they were made from changed in place since."""
    rec = getattr(q, "_exact", None)
    if rec is None:
        return None
    tensors, versions = rec
    if tensors[0] is not q.qdata or tensors[1] is not q.scales:
        return None
    return tensors[2] if all(version(t) == v for t, v in zip(tensors, versions)) else None


# ---------------------------------------------------------------------------
# dequantization
# ---------------------------------------------------------------------------

def dequantize_nvfp4(t: NVFP4Tensor, dtype: torch.dtype = torch.float32, *,
                     apply_alpha: bool = True) -> torch.Tensor:
    """[M, K] of `dtype` from t's rowwise copy: fl(fl(value(code) * s) * S_dec).

    value(code) * s is exact. apply_alpha=False leaves out S_dec: that is the operand the
    GEMM multiplies (alpha is applied in the epilogue, see reference.gemm_reference).
    """
    if not isinstance(t, NVFP4Tensor):
        raise TypeError(f"'t' must be an NVFP4Tensor, got {type(t).__name__}")
    check_dequantize_dtype(dtype)
    if t.qdata is None:
        raise ValueError("'t' has no rowwise copy (rowwise=False); dequantize t.columnwise "
                         "to get x.T")
    M, K = t.shape
    out = _decode_blocks(t.qdata, layout.unswizzle_scales(t.scales, M, NVFP4.scale_cols(K)))
    if apply_alpha:
        alpha = t.alpha if t.alpha.dim() == 0 else t.alpha[:, None, None]
        out = out * alpha
    return out.reshape(M, K).to(dtype)


def dequantize_nvfp4_grouped(t: GroupedNVFP4Tensor, dtype: torch.dtype = torch.float32, *,
                             padded: bool = False, apply_alpha: bool = True) -> torch.Tensor:
    """"rows": [T, K] (rows past the last group decode as 0); "wgrad": [K, T] (x.T, RHT-transformed
    if t.rht), or with padded=True the [K, W] wgrad data itself, every group's ceil(m_g/16)*16
    columns included (what a wgrad GEMM sums over; with rht the padding columns carry data).
    apply_alpha=False leaves out the global scales (the operand a GEMM multiplies)."""
    if not isinstance(t, GroupedNVFP4Tensor):
        raise TypeError(f"'t' must be a GroupedNVFP4Tensor, got {type(t).__name__}")
    if padded and t.layout != "wgrad":
        raise ValueError("'padded' applies to a 'wgrad'-layout container")
    check_dequantize_dtype(dtype)
    if t.qdata is None:
        raise ValueError("'t' has no rowwise copy; dequantize t.columnwise")
    T, K = t.shape
    G = t.offsets.numel()
    bs = NVFP4.block_size
    starts, ends = (v.tolist() for v in layout.group_bounds(t.offsets, T))
    sf = t.sf_offsets.tolist()
    if t.layout == "rows":
        C = NVFP4.scale_cols(K)
        out = torch.zeros(T, K, dtype=_F32, device=t.qdata.device)
        for g in range(G):
            s, e = starts[g], ends[g]
            if e > s:
                block = layout.group_scale_block(t.scales, sf[g], e - s, C)
                vals = _decode_blocks(t.qdata[s:e], layout.unswizzle_scales(block, e - s, C))
                alpha = t.alpha[g] if t.scaling == "tensor" else t.alpha[s:e, None, None]
                out[s:e] = (vals * alpha if apply_alpha else vals).reshape(e - s, K)
        return out.to(dtype)
    out = torch.zeros(K, t.qdata.shape[1] * 2 if padded else T, dtype=_F32, device=t.qdata.device)
    p16 = layout.wgrad_column_starts(t.offsets, T).tolist()
    for g in range(G):
        s, e = starts[g], ends[g]
        m = e - s
        if m:
            m16 = layout.round_up(m, layout.WGRAD_ALIGN)
            block = layout.wgrad_group_scale_block(t.scales, sf[g], K, m16 // bs)
            vals = _decode_blocks(t.qdata[:, p16[g] // 2:(p16[g] + m16) // 2],
                                  layout.unswizzle_scales(block, K, m16 // bs))
            alpha = t.alpha[g] if t.scaling == "tensor" else t.alpha[g][:, None, None]
            vals = vals * alpha if apply_alpha else vals
            if padded:
                out[:, p16[g]:p16[g] + m16] = vals.reshape(K, m16)
            else:
                out[:, s:e] = vals.reshape(K, m16)[:, :m]
    return out.to(dtype)


# ---------------------------------------------------------------------------
# residual NVFP4 (docs/numerics.md section 10). scalemm's layout: the K_e residual channels ride
# AFTER the main K,  x' = [Q(x) | Q(r[:, channels]) | 0 ...],  w' = [w | w[:, channels] | 0 ...],
# K_e padded with zero columns to a multiple of 16 (one NVFP4 block). The residual is quantized with
# the SAME global scale (amax) as x, so one GEMM with one alpha computes Q(x) W^T + Q(r_e) W_e^T.
# Block scales of x' are those of x followed by those of the residual.
# ---------------------------------------------------------------------------

def residual_width(num_channels: int) -> int:
    """K_e padded to a multiple of 16 (one NVFP4 block)."""
    return layout.round_up(num_channels, NVFP4.block_size)


def residual_channels(channels, K: int, device) -> torch.Tensor:
    """The residual channel indices as an int64 tensor on `device`, checked on the host: a non-empty
    sequence of ints (Python or numpy/torch integer scalars; no floats, strings or booleans) or a
    1-D int32/int64 CPU tensor, each index in [0, K), none repeated (a repeated channel would add
    its residual twice in the GEMM). Channels are a small list known on the host; a tensor on
    another device is refused rather than read back (that would be a device sync)."""
    if isinstance(channels, torch.Tensor):
        if channels.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"'channels' must be a 1-D int32/int64 tensor, got {channels.dtype}")
        if channels.dim() != 1 or channels.numel() == 0:
            raise ValueError(f"'channels' must be a non-empty 1-D int32/int64 tensor, got shape "
                             f"{tuple(channels.shape)}")
        if channels.device.type != "cpu":
            raise ValueError(f"'channels' must be on the CPU (channels.cpu(): they are checked on the host), "
                             f"got {channels.device}")
        idx = channels.tolist()
    else:
        if isinstance(channels, (str, bytes)) or not hasattr(channels, "__iter__"):
            raise TypeError(f"'channels' must be a sequence of ints or a CPU int32/int64 tensor, got "
                            f"{type(channels).__name__}")
        idx = []
        for c in channels:
            if isinstance(c, bool) or (isinstance(c, torch.Tensor) and c.dtype == torch.bool):
                raise TypeError(f"'channels' must hold ints, got bool {bool(c)}")
            try:
                idx.append(operator.index(c))
            except TypeError:
                raise TypeError(f"'channels' must hold ints, got {type(c).__name__} {c!r}") from None
        if not idx:
            raise ValueError("'channels' must be non-empty")
    bad = [c for c in idx if not 0 <= c < K]
    if bad:
        raise ValueError(f"'channels' must lie in [0, {K}), got {bad[0]}")
    if len(set(idx)) != len(idx):
        seen = set()
        dup = next(c for c in idx if c in seen or seen.add(c))
        raise ValueError(f"'channels' must not repeat a channel: {dup} appears more than once")
    return torch.tensor(idx, dtype=torch.int64, device=device)


def residual_weight(w: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """w [N, K] -> w' [N, K + residual_width(K_e)] = [w | w[:, idx] | 0] (w's dtype); idx from
    residual_channels."""
    N, K = w.shape
    extra = torch.zeros(N, residual_width(idx.numel()), dtype=w.dtype, device=w.device)
    extra[:, :idx.numel()] = w[:, idx]
    return torch.cat([w, extra], dim=1)


def quantize_residual(x: torch.Tensor, idx: torch.Tensor, scaling: str,
                      quantize: Callable[..., NVFP4Tensor]) -> NVFP4Tensor:
    """[Q(x) | Q(r_e)] of shape (M, K + residual_width(K_e)): r = x - dequant(Q(x)) in fp32, r_e its
    columns idx zero-padded to residual_width, quantized with x's own amax (same alpha).
    `quantize` is the NVFP4 quantizer to use (the reference's or scalemm's)."""
    M, K = x.shape
    q = quantize(x, scaling=scaling)
    r = x.to(_F32) - dequantize_nvfp4(q, _F32)
    ke = residual_width(idx.numel())
    r_e = torch.zeros(M, ke, dtype=_F32, device=x.device)
    r_e[:, :idx.numel()] = r[:, idx]
    q2 = quantize(r_e, scaling=scaling, amax=q.amax)
    bs = NVFP4.block_size
    s1 = layout.unswizzle_scales(q.scales, M, K // bs)
    s2 = layout.unswizzle_scales(q2.scales, M, ke // bs)
    scales = layout.swizzle_scales(torch.cat([s1, s2], dim=1))
    return NVFP4Tensor(torch.cat([q.qdata, q2.qdata], dim=1), scales, q.alpha, q.amax, (M, K + ke),
                       q.scaling, x.dtype)
