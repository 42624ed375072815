"""MXFP8 (docs/numerics.md section 6): e4m3 data with one e8m0 (power-of-two) scale per 32
elements along K. MXFP8Tensor, GroupedMXFP8, the shapes of their tensors, the e8m0 decode and
their dequantization.
"""
from __future__ import annotations

import torch

from . import E8M0_NAN, MXFP8, layout
from .base import (Shapes, _Container, check_all_or_none, check_columnwise, check_dequantize_dtype, check_device,
                   check_fields, check_orig_dtype, check_shape, move)

__all__ = ["MXFP8Tensor", "GroupedMXFP8", "mxfp8_shapes", "grouped_mxfp8_shapes", "e8m0_pow2", "e8m0_decode",
           "dequantize_mxfp8"]

_F32 = torch.float32


def mxfp8_shapes(rows: int, cols: int) -> Shapes:
    """The tensors of one MXFP8 copy of a rows x cols matrix (cols % 32 == 0): data e4m3 [rows, cols]
    and scales uint8 e8m0 [Rp * Cp] (R = rows, C = cols / 32, 128x4 swizzled)."""
    return {"data": (MXFP8.data_shape(rows, cols), MXFP8.data_dtype),
            "scales": ((layout.swizzled_bytes(rows, MXFP8.scale_cols(cols)),), MXFP8.scale_dtype)}


def grouped_mxfp8_shapes(T: int, K: int, G: int) -> Shapes:
    """The tensors of a grouped MXFP8 rowwise copy of x [T, K] in G groups: data e4m3 [T, K], scales
    uint8 grouped along M [grouped_scale_rows(T, G) * Cp], sf_offsets int32 [G]."""
    scale_bytes = layout.grouped_scale_bytes(layout.grouped_scale_rows(T, G), MXFP8.scale_cols(K))
    return {"data": (MXFP8.data_shape(T, K), MXFP8.data_dtype), "scales": ((scale_bytes,), MXFP8.scale_dtype),
            "sf_offsets": ((G,), torch.int32)}


def e8m0_pow2(e: torch.Tensor) -> torch.Tensor:
    """fp32 2^(e - 127) built from bits, for an integer tensor e in [0, 255]; 255 -> NaN.
    (2^-127 is the fp32 subnormal 0x00400000.)"""
    e = e.to(torch.int32)
    bits = e << 23
    bits = torch.where(e == 0, torch.full_like(e, 0x00400000), bits)
    bits = torch.where(e == E8M0_NAN, torch.full_like(e, 0x7FC00000), bits)
    return bits.view(_F32)


def e8m0_decode(b: torch.Tensor) -> torch.Tensor:
    """fp32 values 2^(b - 127) of e8m0 bytes (uint8); 0xFF -> NaN."""
    if not isinstance(b, torch.Tensor) or b.dtype != torch.uint8:
        raise TypeError("'b' must be a uint8 tensor")
    return e8m0_pow2(b)


def _decode_blocks(data: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """fp32 [R, C]: e4m3 data [R, C] times the e8m0 scale [R, C / 32] of each 32-block."""
    R, C = data.shape
    bs = MXFP8.block_size
    out = data.to(_F32).reshape(R, C // bs, bs) * e8m0_decode(scales)[..., None]
    return out.reshape(R, C)


class MXFP8Tensor(_Container):
    """MXFP8: e4m3 data with one e8m0 (power-of-two) scale per 32 elements along K.

    Fields:
      data: float8_e4m3fn [M, K].
      scales: uint8 1-D of length Rp * Cp (R = M, C = K // 32), e8m0 bytes (2^(b-127),
        0xFF = NaN) in the 128x4 swizzled layout, padding bytes zero.
      shape: (M, K); K % 32 == 0.
      orig_dtype: dtype of the quantized tensor.
      columnwise: None or an MXFP8Tensor of x.T (shape (K, M), blocks of 32 along M).
    data and scales are both tensors or both None (columnwise-only container).
    """

    __slots__ = ("data", "scales", "shape", "orig_dtype", "columnwise")

    def __init__(self, data, scales, shape, orig_dtype, columnwise=None):
        cls = "MXFP8Tensor"
        shape = check_shape(cls, shape, block=MXFP8.block_size)
        check_orig_dtype(cls, orig_dtype)
        rowwise = check_all_or_none(cls, [("data", data), ("scales", scales)])
        if rowwise:
            check_fields(cls, mxfp8_shapes(*shape), {"data": data, "scales": scales})
        check_columnwise(cls, MXFP8Tensor, columnwise, shape, rowwise, data.device if rowwise else None)
        self.data, self.scales, self.shape = data, scales, shape
        self.orig_dtype, self.columnwise = orig_dtype, columnwise

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """[M, K] tensor of `dtype`: data * 2^(b - 127) per 32-block (rowwise copy only)."""
        return dequantize_mxfp8(self, dtype)

    def to(self, device) -> "MXFP8Tensor":
        """A copy with every tensor (and the columnwise copy) moved to `device`."""
        device = check_device("MXFP8Tensor", device)
        return MXFP8Tensor(move(self.data, device), move(self.scales, device), self.shape,
                           self.orig_dtype,
                           None if self.columnwise is None else self.columnwise.to(device))

    def __repr__(self) -> str:
        return (f"MXFP8Tensor(shape={self.shape}, device={self.device}, "
                f"orig_dtype={self.orig_dtype}, rowwise={self.has_rowwise}, "
                f"columnwise={self.columnwise is not None})")


def dequantize_mxfp8(t: MXFP8Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """[M, K] of `dtype` from t's rowwise copy: data * 2^(b - 127) per 32-block."""
    if not isinstance(t, MXFP8Tensor):
        raise TypeError(f"'t' must be an MXFP8Tensor, got {type(t).__name__}")
    check_dequantize_dtype(dtype)
    if t.data is None:
        raise ValueError("'t' has no rowwise copy; dequantize t.columnwise to get x.T")
    M, K = t.shape
    return _decode_blocks(t.data, layout.unswizzle_scales(t.scales, M, MXFP8.scale_cols(K))).to(dtype)


class GroupedMXFP8(_Container):
    """Grouped MXFP8 rowwise copy of x [T, K] in G groups (groups of rows given by device offsets,
    formats/layout.py for the offsets rule).

    Fields:
      data: float8_e4m3fn [T, K]; rows past the last group end are zero.
      scales: uint8 e8m0 [grouped_scale_rows(T, G) * ceil(K/128)*4] grouped along M: group g's
        scales, swizzled as one matrix of its own rows, start at scale row sf_offsets[g]; every
        unused byte zero.
      sf_offsets: int32 [G], sum_{j<g} ceil(m_j/128)*128 (computed on the device).
      offsets: int32 [G], the cumulative row ends the copy was made with.
    shape (T, K) comes from data; K % 32 == 0.
    """

    __slots__ = ("data", "scales", "sf_offsets", "offsets")

    def __init__(self, data, scales, sf_offsets, offsets):
        cls = "GroupedMXFP8"
        if not isinstance(offsets, torch.Tensor) or offsets.dtype != torch.int32 or offsets.dim() != 1 \
                or offsets.numel() == 0:
            raise TypeError(f"{cls}: 'offsets' must be a non-empty 1-D int32 tensor [G]")
        if not isinstance(data, torch.Tensor) or data.dim() != 2:
            raise TypeError(f"{cls}: 'data' must be a 2-D tensor [T, K], got {getattr(data, 'shape', data)!r}")
        T, K = check_shape(cls, data.shape, "(T, K)", block=MXFP8.block_size)
        G = offsets.numel()
        shapes = {**grouped_mxfp8_shapes(T, K, G), "offsets": ((G,), torch.int32)}
        check_fields(cls, shapes, {"data": data, "scales": scales, "sf_offsets": sf_offsets, "offsets": offsets})
        self.data, self.scales, self.sf_offsets, self.offsets = data, scales, sf_offsets, offsets

    @property
    def shape(self):
        return tuple(self.data.shape)

    @property
    def num_groups(self) -> int:
        return self.offsets.numel()

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """[T, K] of `dtype`: each group's rows decoded with its scale block; rows past the last
        group decode as 0. Syncs the host."""
        check_dequantize_dtype(dtype)
        T, K = self.shape
        C = MXFP8.scale_cols(K)
        starts, ends = (v.tolist() for v in layout.group_bounds(self.offsets, T))
        sf = self.sf_offsets.tolist()
        out = torch.zeros(T, K, dtype=_F32, device=self.data.device)
        for g, (s, e) in enumerate(zip(starts, ends)):
            if e > s:
                block = layout.group_scale_block(self.scales, sf[g], e - s, C)
                out[s:e] = _decode_blocks(self.data[s:e], layout.unswizzle_scales(block, e - s, C))
        return out.to(dtype)

    def to(self, device) -> "GroupedMXFP8":
        """A copy with every tensor (offsets included) moved to `device`."""
        device = check_device("GroupedMXFP8", device)
        return GroupedMXFP8(self.data.to(device), self.scales.to(device), self.sf_offsets.to(device),
                            self.offsets.to(device))

    def __repr__(self) -> str:
        return f"GroupedMXFP8(shape={self.shape}, groups={self.num_groups}, device={self.device})"
