"""Quantized tensor containers: NVFP4Tensor, FP8Tensor, MXFP8Tensor.

Plain Python classes (not torch.Tensor subclasses) that hold the quantized data, the
scales and the layout metadata of one operand. Both the pure-torch reference
(``scalemm.reference``) and the CUDA quantization kernels construct them; the
constructor validates dtypes, shapes and devices (metadata only: no host sync) and
raises TypeError / ValueError naming the offending field.

Each container may carry a ``columnwise`` copy: the same format applied to x.T (shape
(K, M)), which is what the wgrad/dgrad GEMMs read. A container whose rowwise fields are
all None holds only that columnwise copy (``quantize_*(..., rowwise=False)``).

Layouts (shared/NUMERICS.md):
- NVFP4 qdata: uint8 [M, K // 2], element 2i in the low nibble, 2i+1 in the high one.
- Block scales: 1-D buffer of Rp * Cp bytes in the 128x4 swizzled layout (section 5),
  R = M rows, C = K / block columns, padding bytes zero.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from .formats import INPUT_DTYPES, MXFP8, NVFP4, SCALINGS, SF_TILE_COLS, SF_TILE_ROWS

__all__ = ["NVFP4Tensor", "FP8Tensor", "MXFP8Tensor"]


# ---------------------------------------------------------------------------
# validation helpers (metadata only, never read tensor data)
# ---------------------------------------------------------------------------

def _swizzled_numel(rows: int, cols: int) -> int:
    rp = -(-rows // SF_TILE_ROWS) * SF_TILE_ROWS
    cp = -(-cols // SF_TILE_COLS) * SF_TILE_COLS
    return rp * cp


def _check_tensor(cls: str, field: str, t, dtype: torch.dtype, shape: Tuple[int, ...]):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{cls}: '{field}' must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise TypeError(f"{cls}: '{field}' must have dtype {dtype}, got {t.dtype}")
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{cls}: '{field}' must have shape {tuple(shape)}, got {tuple(t.shape)}")


def _check_same_device(cls: str, named):
    devices = {(name, t.device) for name, t in named if t is not None}
    if len({d for _, d in devices}) > 1:
        desc = ", ".join(f"{n} on {d}" for n, d in sorted(devices, key=lambda p: p[0]))
        raise ValueError(f"{cls}: all tensors must be on one device, got {desc}")


def _check_scaling(cls: str, scaling):
    if scaling not in SCALINGS:
        raise ValueError(f"{cls}: 'scaling' must be one of {SCALINGS}, got {scaling!r}")


def _check_orig_dtype(cls: str, orig_dtype):
    if not isinstance(orig_dtype, torch.dtype) or orig_dtype not in INPUT_DTYPES:
        raise TypeError(f"{cls}: 'orig_dtype' must be one of {INPUT_DTYPES}, got {orig_dtype!r}")


def _check_all_or_none(cls: str, named):
    present = [n for n, t in named if t is not None]
    if present and len(present) != len(named):
        missing = [n for n, t in named if t is None]
        raise ValueError(
            f"{cls}: rowwise fields must be all set or all None; set {present}, None {missing}"
        )
    return bool(present)


def _scale_shape(scaling: str, m: int) -> Tuple[int, ...]:
    return () if scaling == "tensor" else (m,)


def _move(t: Optional[torch.Tensor], device) -> Optional[torch.Tensor]:
    return None if t is None else t.to(device)


# ---------------------------------------------------------------------------
# NVFP4
# ---------------------------------------------------------------------------

class _Container:
    """What every quantized container shares: its logical shape's M and K, whether it holds the
    rowwise copy, and its device. `_ROW` names the rowwise payload attribute."""
    __slots__ = ()
    _ROW = "data"

    @property
    def M(self) -> int:
        return self.shape[0]

    @property
    def K(self) -> int:
        return self.shape[1]

    @property
    def has_rowwise(self) -> bool:
        return getattr(self, self._ROW) is not None

    @property
    def device(self) -> torch.device:
        row = getattr(self, self._ROW)
        return row.device if row is not None else self.columnwise.device

    @classmethod
    def _trusted(cls, **fields):
        """Build without validation: for kernel outputs the quantizer just allocated with the
        right shapes (validation costs ~10 us per call on the eager path). Every slot must be given."""
        self = object.__new__(cls)
        for name in cls.__slots__:
            setattr(self, name, fields.pop(name))
        if fields:
            raise TypeError(f"{cls.__name__}._trusted: unknown fields {sorted(fields)}")
        return self


class NVFP4Tensor(_Container):
    """NVFP4 (e2m1 data, e4m3 scales per 16 elements along K, fp32 global scale).

    Fields:
      qdata: uint8 [M, K // 2]; byte = code[2i] | code[2i+1] << 4 (low nibble = even).
      scales: float8_e4m3fn 1-D, length Rp * Cp for R = M, C = K // 16, 128x4 swizzled
        (NUMERICS section 5), padding bytes zero.
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
                 "columnwise")

    def __init__(self, qdata, scales, alpha, amax, shape, scaling, orig_dtype, rht=False,
                 columnwise=None):
        cls = "NVFP4Tensor"
        try:
            shape = tuple(int(s) for s in shape)
        except TypeError:
            raise TypeError(f"{cls}: 'shape' must be a pair of ints (M, K), "
                            f"got {shape!r}") from None
        if len(shape) != 2 or shape[0] < 0 or shape[1] < 0:
            raise ValueError(f"{cls}: 'shape' must be (M, K) with M, K >= 0, got {shape}")
        m, k = shape
        if k % NVFP4.block_size != 0:
            raise ValueError(f"{cls}: 'shape' K must be a multiple of {NVFP4.block_size}, "
                             f"got K={k}")
        _check_scaling(cls, scaling)
        _check_orig_dtype(cls, orig_dtype)
        if not isinstance(rht, bool):
            raise TypeError(f"{cls}: 'rht' must be a bool, got {type(rht).__name__}")

        rowwise = _check_all_or_none(
            cls, [("qdata", qdata), ("scales", scales), ("alpha", alpha), ("amax", amax)])
        if rowwise:
            _check_tensor(cls, "qdata", qdata, torch.uint8, (m, k // 2))
            _check_tensor(cls, "scales", scales, torch.float8_e4m3fn,
                          (_swizzled_numel(m, k // NVFP4.block_size),))
            gshape = _scale_shape(scaling, m)
            _check_tensor(cls, "alpha", alpha, torch.float32, gshape)
            _check_tensor(cls, "amax", amax, torch.float32, gshape)
            _check_same_device(cls, [("qdata", qdata), ("scales", scales), ("alpha", alpha),
                                     ("amax", amax)])
        _check_columnwise(cls, NVFP4Tensor, columnwise, shape, rowwise, qdata)
        if columnwise is not None and columnwise.scaling != scaling:
            raise ValueError(f"{cls}: 'columnwise' must have scaling={scaling!r}, "
                             f"got {columnwise.scaling!r}")

        self.qdata, self.scales, self.alpha, self.amax = qdata, scales, alpha, amax
        self.shape, self.scaling, self.orig_dtype, self.rht = shape, scaling, orig_dtype, rht
        self.columnwise = columnwise

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """[M, K] tensor of `dtype`: value(code) * block scale * alpha, computed in fp32.

        Only the rowwise copy is decoded (a columnwise-only container raises ValueError;
        decode `.columnwise` instead, which gives x.T, RHT-transformed if `.columnwise.rht`).
        """
        from .reference import dequantize_nvfp4  # local: reference imports this module

        return dequantize_nvfp4(self, dtype)

    def to(self, device) -> "NVFP4Tensor":
        """A copy with every tensor (and the columnwise copy) moved to `device`."""
        return NVFP4Tensor(
            _move(self.qdata, device), _move(self.scales, device), _move(self.alpha, device),
            _move(self.amax, device), self.shape, self.scaling, self.orig_dtype, self.rht,
            None if self.columnwise is None else self.columnwise.to(device))

    def __repr__(self) -> str:
        return (f"NVFP4Tensor(shape={self.shape}, scaling={self.scaling!r}, device={self.device}, "
                f"orig_dtype={self.orig_dtype}, rowwise={self.has_rowwise}, "
                f"columnwise={self.columnwise is not None}, rht={self.rht})")


def _check_columnwise(cls, kind, columnwise, shape, rowwise, rowwise_tensor):
    if columnwise is None:
        if not rowwise:
            raise ValueError(f"{cls}: rowwise fields are None and 'columnwise' is None: "
                             "the container would hold nothing")
        return
    if not isinstance(columnwise, kind):
        raise TypeError(f"{cls}: 'columnwise' must be a {kind.__name__} or None, "
                        f"got {type(columnwise).__name__}")
    if columnwise.columnwise is not None:
        raise ValueError(f"{cls}: 'columnwise' must not itself carry a columnwise copy")
    if shape is not None and tuple(columnwise.shape) != (shape[1], shape[0]):
        raise ValueError(f"{cls}: 'columnwise' must have shape {(shape[1], shape[0])} "
                         f"(the transpose), got {tuple(columnwise.shape)}")
    if rowwise and columnwise.device != rowwise_tensor.device:
        raise ValueError(f"{cls}: 'columnwise' is on {columnwise.device}, "
                         f"rowwise data on {rowwise_tensor.device}")


# ---------------------------------------------------------------------------
# FP8 (e4m3, per-tensor or per-row scale)
# ---------------------------------------------------------------------------

class FP8Tensor(_Container):
    """FP8 e4m3 with one fp32 scale per tensor or per row ("current scaling").

    Fields:
      data: float8_e4m3fn [M, K] = e4m3(fl(x * scale)).
      scale_inv: fp32 decode scale (1 / scale); 0-d for "tensor", [M] for "token".
      scaling: "tensor" or "token".
      orig_dtype: dtype of the quantized tensor.
      columnwise: None or an FP8Tensor of x.T (shape (K, M)), same scaling.
    data and scale_inv are both tensors or both None (columnwise-only container).
    """

    __slots__ = ("data", "scale_inv", "scaling", "orig_dtype", "columnwise")

    def __init__(self, data, scale_inv, scaling, orig_dtype, columnwise=None):
        cls = "FP8Tensor"
        _check_scaling(cls, scaling)
        _check_orig_dtype(cls, orig_dtype)
        rowwise = _check_all_or_none(cls, [("data", data), ("scale_inv", scale_inv)])
        shape = None
        if rowwise:
            if not isinstance(data, torch.Tensor):
                raise TypeError(f"{cls}: 'data' must be a torch.Tensor, got {type(data).__name__}")
            if data.dim() != 2:
                raise ValueError(f"{cls}: 'data' must be 2-D [M, K], got shape {tuple(data.shape)}")
            shape = tuple(data.shape)
            _check_tensor(cls, "data", data, torch.float8_e4m3fn, shape)
            _check_tensor(cls, "scale_inv", scale_inv, torch.float32,
                          _scale_shape(scaling, shape[0]))
            _check_same_device(cls, [("data", data), ("scale_inv", scale_inv)])
        _check_columnwise(cls, FP8Tensor, columnwise, shape, rowwise, data)
        if columnwise is not None and columnwise.scaling != scaling:
            raise ValueError(f"{cls}: 'columnwise' must have scaling={scaling!r}, "
                             f"got {columnwise.scaling!r}")
        self.data, self.scale_inv = data, scale_inv
        self.scaling, self.orig_dtype, self.columnwise = scaling, orig_dtype, columnwise

    @property
    def shape(self) -> Tuple[int, int]:
        if self.data is not None:
            return tuple(self.data.shape)
        k, m = self.columnwise.shape
        return (m, k)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """[M, K] tensor of `dtype`: fl(data * scale_inv) (rowwise copy only)."""
        from .reference import dequantize_fp8

        return dequantize_fp8(self, dtype)

    def to(self, device) -> "FP8Tensor":
        """A copy with every tensor (and the columnwise copy) moved to `device`."""
        return FP8Tensor(_move(self.data, device), _move(self.scale_inv, device), self.scaling,
                         self.orig_dtype,
                         None if self.columnwise is None else self.columnwise.to(device))

    def __repr__(self) -> str:
        return (f"FP8Tensor(shape={self.shape}, scaling={self.scaling!r}, device={self.device}, "
                f"orig_dtype={self.orig_dtype}, rowwise={self.has_rowwise}, "
                f"columnwise={self.columnwise is not None})")


# ---------------------------------------------------------------------------
# MXFP8 (e4m3 data, e8m0 scale per 32 elements)
# ---------------------------------------------------------------------------

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
        try:
            shape = tuple(int(s) for s in shape)
        except TypeError:
            raise TypeError(f"{cls}: 'shape' must be a pair of ints (M, K), "
                            f"got {shape!r}") from None
        if len(shape) != 2 or shape[0] < 0 or shape[1] < 0:
            raise ValueError(f"{cls}: 'shape' must be (M, K) with M, K >= 0, got {shape}")
        m, k = shape
        if k % MXFP8.block_size != 0:
            raise ValueError(f"{cls}: 'shape' K must be a multiple of {MXFP8.block_size}, "
                             f"got K={k}")
        _check_orig_dtype(cls, orig_dtype)
        rowwise = _check_all_or_none(cls, [("data", data), ("scales", scales)])
        if rowwise:
            _check_tensor(cls, "data", data, torch.float8_e4m3fn, shape)
            _check_tensor(cls, "scales", scales, torch.uint8,
                          (_swizzled_numel(m, k // MXFP8.block_size),))
            _check_same_device(cls, [("data", data), ("scales", scales)])
        _check_columnwise(cls, MXFP8Tensor, columnwise, shape, rowwise, data)
        self.data, self.scales, self.shape = data, scales, shape
        self.orig_dtype, self.columnwise = orig_dtype, columnwise

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """[M, K] tensor of `dtype`: data * 2^(b - 127) per 32-block (rowwise copy only)."""
        from .reference import dequantize_mxfp8

        return dequantize_mxfp8(self, dtype)

    def to(self, device) -> "MXFP8Tensor":
        """A copy with every tensor (and the columnwise copy) moved to `device`."""
        return MXFP8Tensor(_move(self.data, device), _move(self.scales, device), self.shape,
                           self.orig_dtype,
                           None if self.columnwise is None else self.columnwise.to(device))

    def __repr__(self) -> str:
        return (f"MXFP8Tensor(shape={self.shape}, device={self.device}, "
                f"orig_dtype={self.orig_dtype}, rowwise={self.has_rowwise}, "
                f"columnwise={self.columnwise is not None})")


# ---------------------------------------------------------------------------
# Grouped (MoE) containers: groups of rows of x [T, K] given by device offsets
# ---------------------------------------------------------------------------
# Layouts (shared/NUMERICS.md section 5, scalemm.reference for the spec in code):
# - "rows": the rowwise copy, [T, K] (NVFP4: [T, K/2]); group g owns rows [ends[g-1], ends[g]).
# - "wgrad": the columnwise copy laid out for scalemm.grouped_gemm_wgrad: [K, W] (NVFP4 packed
#   [K, W/2]), W = ceil((T + 15 G) / 16) * 16; group g's m_g tokens are the columns
#   [p_g, p_g + m_g), p_g = sum_{j<g} ceil(m_j/16)*16; every other column is zero.
# Offsets are int32 [G] cumulative row ends, clamped into [0, T] and made non-decreasing by the
# kernels (and the reference); they are never read on the host. Rows past the last group end
# belong to no group (zero data, no scale rows).

__all__ += ["GroupedFP8Tensor", "GroupedNVFP4Tensor"]

_LAYOUTS = ("rows", "wgrad")


def _grouped_common(cls, offsets, shape, scaling, orig_dtype, layout, group_rows):
    if not isinstance(offsets, torch.Tensor) or offsets.dtype != torch.int32 or offsets.dim() != 1 \
            or offsets.numel() == 0:
        raise TypeError(f"{cls}: 'offsets' must be a non-empty 1-D int32 tensor [G]")
    try:
        shape = tuple(int(s) for s in shape)
    except TypeError:
        raise TypeError(f"{cls}: 'shape' must be a pair of ints (T, K), got {shape!r}") from None
    if len(shape) != 2 or shape[0] < 0 or shape[1] < 0:
        raise ValueError(f"{cls}: 'shape' must be (T, K) with T, K >= 0, got {shape}")
    _check_scaling(cls, scaling)
    _check_orig_dtype(cls, orig_dtype)
    if layout not in _LAYOUTS:
        raise ValueError(f"{cls}: 'layout' must be one of {_LAYOUTS}, got {layout!r}")
    if group_rows is not None and (not isinstance(group_rows, int) or group_rows <= 0):
        raise ValueError(f"{cls}: 'group_rows' must be None or a positive int, got {group_rows!r}")
    return shape


def _wgrad_width(T: int, G: int) -> int:
    return -(-(T + 15 * G) // 16) * 16


def _grouped_columnwise(cls, kind, columnwise, layout, rowwise, shape, scaling, offsets, device):
    if columnwise is None:
        if not rowwise:
            raise ValueError(f"{cls}: rowwise fields are None and 'columnwise' is None: "
                             "the container would hold nothing")
        return
    if layout != "rows":
        raise ValueError(f"{cls}: a 'wgrad'-layout container cannot carry a columnwise copy")
    if not isinstance(columnwise, kind):
        raise TypeError(f"{cls}: 'columnwise' must be a {kind.__name__} or None, got {type(columnwise).__name__}")
    if columnwise.layout != "wgrad" or columnwise.columnwise is not None:
        raise ValueError(f"{cls}: 'columnwise' must be a 'wgrad'-layout copy without its own columnwise")
    if columnwise.shape != shape or columnwise.scaling != scaling:
        raise ValueError(f"{cls}: 'columnwise' must have shape {shape} and scaling {scaling!r}, got "
                         f"{columnwise.shape} and {columnwise.scaling!r}")
    if columnwise.offsets.numel() != offsets.numel():
        raise ValueError(f"{cls}: 'columnwise' has {columnwise.offsets.numel()} groups, expected {offsets.numel()}")
    if device is not None and columnwise.device != device:
        raise ValueError(f"{cls}: 'columnwise' is on {columnwise.device}, rowwise data on {device}")


class GroupedFP8Tensor(_Container):
    """Grouped FP8 e4m3 (per group or per token current scaling) of x [T, K] in G groups.

    Fields:
      data: float8_e4m3fn; layout "rows": [T, K]; layout "wgrad": [K, W] (see the layout notes
        above; padding columns are zero).
      scale_inv: fp32 decode scales; scaling "tensor": [G] (one per group); "token": [T] (rows:
        per row) or [G, K] (wgrad: per column of x within each group).
      offsets: int32 [G] device tensor, the cumulative row ends the copy was made with.
      shape: (T, K) of x (for both layouts). scaling, orig_dtype as FP8Tensor.
      layout: "rows" or "wgrad".
      columnwise: None or the "wgrad"-layout GroupedFP8Tensor of the same x.
      group_rows: None, or N when every group has exactly N rows (stacked expert weights: view
        data as [E, N, K] and a "token" scale_inv as [E, N]).
    data and scale_inv are both tensors or both None (columnwise-only container).

    Example (MoE layer, fprop and wgrad):
      xq = scalemm.quantize_fp8_grouped(x, offsets, columnwise=True)
      y = scalemm.grouped_gemm(xq.data, w_fp8, offsets, xq.scale_inv, w_scale)
      dW = scalemm.grouped_gemm_wgrad(dyq.columnwise.data, xq.columnwise.data, offsets,
                                      dyq.columnwise.scale_inv, xq.columnwise.scale_inv)
    """

    __slots__ = ("data", "scale_inv", "offsets", "shape", "scaling", "orig_dtype", "layout", "columnwise",
                 "group_rows")

    def __init__(self, data, scale_inv, offsets, shape, scaling, orig_dtype, layout="rows", columnwise=None,
                 group_rows=None):
        cls = "GroupedFP8Tensor"
        shape = _grouped_common(cls, offsets, shape, scaling, orig_dtype, layout, group_rows)
        T, K = shape
        G = offsets.numel()
        rowwise = _check_all_or_none(cls, [("data", data), ("scale_inv", scale_inv)])
        if rowwise:
            want = (T, K) if layout == "rows" else (K, _wgrad_width(T, G))
            _check_tensor(cls, "data", data, torch.float8_e4m3fn, want)
            if scaling == "tensor":
                sshape = (G,)
            else:
                sshape = (T,) if layout == "rows" else (G, K)
            _check_tensor(cls, "scale_inv", scale_inv, torch.float32, sshape)
            _check_same_device(cls, [("data", data), ("scale_inv", scale_inv), ("offsets", offsets)])
        _grouped_columnwise(cls, GroupedFP8Tensor, columnwise, layout, rowwise, shape, scaling, offsets,
                            data.device if rowwise else None)
        self.data, self.scale_inv, self.offsets, self.shape = data, scale_inv, offsets, shape
        self.scaling, self.orig_dtype, self.layout = scaling, orig_dtype, layout
        self.columnwise, self.group_rows = columnwise, group_rows

    @property
    def num_groups(self) -> int:
        return self.offsets.numel()

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """"rows": [T, K]; "wgrad": [K, T] (x.T without the padding columns). Syncs the host."""
        from .reference import dequantize_fp8_grouped

        return dequantize_fp8_grouped(self, dtype)

    def to(self, device) -> "GroupedFP8Tensor":
        """A copy with every tensor (offsets and the columnwise copy included) moved to `device`."""
        return GroupedFP8Tensor(_move(self.data, device), _move(self.scale_inv, device), self.offsets.to(device),
                                self.shape, self.scaling, self.orig_dtype, self.layout,
                                None if self.columnwise is None else self.columnwise.to(device), self.group_rows)

    def __repr__(self) -> str:
        return (f"GroupedFP8Tensor(shape={self.shape}, groups={self.num_groups}, layout={self.layout!r}, "
                f"scaling={self.scaling!r}, device={self.device}, orig_dtype={self.orig_dtype}, "
                f"rowwise={self.has_rowwise}, columnwise={self.columnwise is not None})")


class GroupedNVFP4Tensor(_Container):
    """Grouped NVFP4 of x [T, K] in G groups (NUMERICS 2, 3, 5).

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
      scale_rows: rows of the "rows" scale buffer (host-known): ceil(T/128)*128 + 128 G for
        grouped activations, E * ceil(N/128)*128 for stacked expert weights (the batched
        layout: expert e's block at byte e * Rp * Cp). Unused for "wgrad".
      rht: True for a "wgrad" copy whose groups went through the 16-point RHT (NUMERICS 8;
        dequantize then gives the transformed x.T).
    qdata, scales, sf_offsets, alpha and amax are all tensors or all None (columnwise-only).
    """

    _ROW = "qdata"
    __slots__ = ("qdata", "scales", "sf_offsets", "alpha", "amax", "offsets", "shape", "scaling", "orig_dtype",
                 "layout", "scale_rows", "columnwise", "group_rows", "rht")

    def __init__(self, qdata, scales, sf_offsets, alpha, amax, offsets, shape, scaling, orig_dtype,
                 layout="rows", scale_rows=None, columnwise=None, group_rows=None, rht=False):
        cls = "GroupedNVFP4Tensor"
        shape = _grouped_common(cls, offsets, shape, scaling, orig_dtype, layout, group_rows)
        if not isinstance(rht, bool):
            raise TypeError(f"{cls}: 'rht' must be a bool, got {type(rht).__name__}")
        if rht and layout != "wgrad":
            raise ValueError(f"{cls}: only a 'wgrad'-layout copy can be RHT-transformed")
        T, K = shape
        G = offsets.numel()
        if K % NVFP4.block_size != 0:
            raise ValueError(f"{cls}: 'shape' K must be a multiple of {NVFP4.block_size}, got K={K}")
        if layout == "rows":
            if scale_rows is None:
                scale_rows = -(-T // SF_TILE_ROWS) * SF_TILE_ROWS + SF_TILE_ROWS * G
            if not isinstance(scale_rows, int) or scale_rows < 0 or scale_rows % SF_TILE_ROWS:
                raise ValueError(f"{cls}: 'scale_rows' must be a non-negative multiple of 128, got {scale_rows!r}")
        rowwise = _check_all_or_none(cls, [("qdata", qdata), ("scales", scales), ("sf_offsets", sf_offsets),
                                           ("alpha", alpha), ("amax", amax)])
        if rowwise:
            cp = -(-(K // NVFP4.block_size) // SF_TILE_COLS) * SF_TILE_COLS
            if layout == "rows":
                _check_tensor(cls, "qdata", qdata, torch.uint8, (T, K // 2))
                _check_tensor(cls, "scales", scales, torch.float8_e4m3fn, (scale_rows * cp,))
                gshape = (G,) if scaling == "tensor" else (T,)
            else:
                W = _wgrad_width(T, G)
                rp = -(-K // SF_TILE_ROWS) * SF_TILE_ROWS
                cb = 4 * -(-(T + 63 * G) // 64)
                _check_tensor(cls, "qdata", qdata, torch.uint8, (K, W // 2))
                _check_tensor(cls, "scales", scales, torch.float8_e4m3fn, (rp * cb,))
                gshape = (G,) if scaling == "tensor" else (G, K)
            _check_tensor(cls, "sf_offsets", sf_offsets, torch.int32, (G,))
            _check_tensor(cls, "alpha", alpha, torch.float32, gshape)
            _check_tensor(cls, "amax", amax, torch.float32, gshape)
            _check_same_device(cls, [("qdata", qdata), ("scales", scales), ("sf_offsets", sf_offsets),
                                     ("alpha", alpha), ("amax", amax), ("offsets", offsets)])
        _grouped_columnwise(cls, GroupedNVFP4Tensor, columnwise, layout, rowwise, shape, scaling, offsets,
                            qdata.device if rowwise else None)
        self.qdata, self.scales, self.sf_offsets, self.alpha, self.amax = qdata, scales, sf_offsets, alpha, amax
        self.offsets, self.shape, self.scaling, self.orig_dtype = offsets, shape, scaling, orig_dtype
        self.layout, self.scale_rows, self.columnwise, self.group_rows = layout, scale_rows, columnwise, group_rows
        self.rht = rht

    @property
    def num_groups(self) -> int:
        return self.offsets.numel()

    def dequantize(self, dtype: torch.dtype = torch.float32, *, padded: bool = False) -> torch.Tensor:
        """"rows": [T, K]; "wgrad": [K, T] (x.T, transformed if rht), or with padded=True the [K, W]
        wgrad data with every group's padding columns. Syncs the host."""
        from .reference import dequantize_nvfp4_grouped

        return dequantize_nvfp4_grouped(self, dtype, padded=padded)

    def to(self, device) -> "GroupedNVFP4Tensor":
        """A copy with every tensor (offsets and the columnwise copy included) moved to `device`."""
        return GroupedNVFP4Tensor(
            _move(self.qdata, device), _move(self.scales, device), _move(self.sf_offsets, device),
            _move(self.alpha, device), _move(self.amax, device), self.offsets.to(device), self.shape, self.scaling,
            self.orig_dtype, self.layout, self.scale_rows,
            None if self.columnwise is None else self.columnwise.to(device), self.group_rows, self.rht)

    def __repr__(self) -> str:
        return (f"GroupedNVFP4Tensor(shape={self.shape}, groups={self.num_groups}, layout={self.layout!r}, "
                f"scaling={self.scaling!r}, device={self.device}, orig_dtype={self.orig_dtype}, "
                f"rowwise={self.has_rowwise}, columnwise={self.columnwise is not None}, rht={self.rht})")
