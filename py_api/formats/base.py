"""What the format containers share: the _Container base and the validators of their metadata and
of the arguments every quantizer and the reference take (one owner for each rule).

Validators read metadata only (dtype, shape, device, Python values), never device data: no host
sync. The one exception reads values of a CPU tensor, which costs no sync (check_host_offsets).
Errors name the offending field or argument: container fields as "Cls: 'field' ...", arguments as
"'name' ...".
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch

from . import INPUT_DTYPES, SCALINGS

# field name -> (shape, dtype) of the tensors of one copy: what the format modules' shape
# functions return, for containers to check, quantizers to allocate and custom-op fakes to fake.
Shapes = Dict[str, Tuple[Tuple[int, ...], torch.dtype]]

LAYOUTS = ("rows", "wgrad")  # grouped containers: the rowwise copy, or the wgrad (columnwise) one
_U64_LIMIT = 1 << 64


# ---------------------------------------------------------------------------
# arguments (quantizers and the reference)
# ---------------------------------------------------------------------------

def _prefix(where: Optional[str]) -> str:
    return f"{where}: " if where else ""


def check_scaling(scaling, where: Optional[str] = None) -> None:
    """'scaling' is "tensor" or "token"."""
    if scaling not in SCALINGS:
        raise ValueError(f"{_prefix(where)}'scaling' must be one of {SCALINGS}, got {scaling!r}")


def check_input(x, name: str = "x") -> None:
    """x is a bf16/fp16/fp32 tensor (what every quantizer takes)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"'{name}' must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in INPUT_DTYPES:
        raise TypeError(f"'{name}' must be bfloat16, float16 or float32, got {x.dtype}")


def check_last_dim(x: torch.Tensor, name: str = "x") -> None:
    """x has K >= 1 columns. Any number of rows (M = 0 included: an empty x quantizes to empty
    containers, e.g. on an expert-parallel rank that got no tokens)."""
    if x.shape[-1] == 0:
        raise ValueError(f"'{name}' last dim K must be >= 1, got shape {tuple(x.shape)}")


def check_u64(value, name: str) -> int:
    """value is a Python int in [0, 2^64) (stochastic-rounding seed and offset)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"'{name}' must be an int, got {type(value).__name__}")
    if not 0 <= value < _U64_LIMIT:
        raise ValueError(f"'{name}' must be in [0, 2^64), got {value}")
    return value


def check_amax(amax, scaling: str, M: int, device: torch.device) -> None:
    """A given NVFP4 amax: a tensor of shape () for "tensor" or [M] for "token", on x's device."""
    if not isinstance(amax, torch.Tensor):
        raise TypeError(f"'amax' must be a torch.Tensor or None, got {type(amax).__name__}")
    want = () if scaling == "tensor" else (M,)
    if tuple(amax.shape) != want:
        raise ValueError(f"'amax' must have shape {want} for scaling={scaling!r} (M = {M} rows "
                         f"after flattening), got {tuple(amax.shape)}")
    if amax.device != device:
        raise ValueError(f"'amax' is on {amax.device} but 'x' is on {device}")


def check_delayed_amax(amax, amax_out, scaling: str, shape: tuple, device: torch.device) -> None:
    """FP8 delayed scaling's amaxes (scaling "tensor" only): `amax`, the amax to scale from, and `amax_out`, which
    receives max|x| (per group where shape is [G]); each None or a float32 tensor of `shape` on x's device,
    amax_out contiguous and apart from amax (the quantizer zeroes it before it reads amax)."""
    if amax is None and amax_out is None:
        return
    if scaling != "tensor":
        raise ValueError(f"'amax' / 'amax_out' (FP8 delayed scaling) take scaling='tensor', got {scaling!r}")
    for name, t in (("amax", amax), ("amax_out", amax_out)):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"'{name}' must be a torch.Tensor or None, got {type(t).__name__}")
        if t.dtype != torch.float32:
            raise TypeError(f"'{name}' must be float32, got {t.dtype}")
        if tuple(t.shape) != tuple(shape):
            raise ValueError(f"'{name}' must have shape {tuple(shape)}, got {tuple(t.shape)}")
        if t.device != device:
            raise ValueError(f"'{name}' is on {t.device} but 'x' is on {device}")
        if not t.is_contiguous():
            raise ValueError(f"'{name}' must be contiguous")
    if amax is not None and amax_out is not None and amax.untyped_storage().data_ptr() == \
            amax_out.untyped_storage().data_ptr():
        raise ValueError("'amax_out' must not share memory with 'amax' (it is zeroed before 'amax' is read)")


def check_amax_used(scaling: str, rowwise: bool, columnwise: bool, rht: bool) -> None:
    """A given amax must feed some copy: the rowwise one, or the columnwise one when it shares the
    rowwise amax (scaling "tensor" without rht)."""
    if not (rowwise or (columnwise and scaling == "tensor" and not rht)):
        raise ValueError("'amax' is given but no copy uses it: it applies to the rowwise copy, "
                         "and to the columnwise copy only for scaling='tensor' without rht")


def check_offsets(offsets, x: torch.Tensor) -> int:
    """offsets: a contiguous int32 [G] tensor (G >= 1) on x's device. Returns G."""
    if not isinstance(offsets, torch.Tensor):
        raise TypeError(f"'offsets' must be a torch.Tensor, got {type(offsets).__name__}")
    if offsets.dtype != torch.int32:
        raise TypeError(f"'offsets' must be int32 (cumulative row ends), got {offsets.dtype}")
    if offsets.dim() != 1 or offsets.numel() == 0:
        raise ValueError(f"'offsets' must be 1-D [G] with G >= 1, got shape {tuple(offsets.shape)}")
    if offsets.device != x.device:
        raise ValueError(f"'offsets' is on {offsets.device} but 'x' is on {x.device}")
    if not offsets.is_contiguous():
        raise ValueError("'offsets' must be contiguous")
    return offsets.numel()


def check_host_offsets(offsets: torch.Tensor, limit: Optional[int] = None, limit_desc: str = "") -> None:
    """CPU offsets (their values are readable without a device sync): cumulative ends from 0,
    non-decreasing, each at most `limit` when given (`limit_desc` names it, e.g. "T = 48 (the rows
    of 'x')"). CUDA offsets are not read: the device code clamps them into range and makes them
    non-decreasing (formats/layout.py), so bad ones give unspecified but in-bounds results."""
    if offsets.device.type != "cpu" or offsets.numel() == 0:
        return
    o = offsets.to(torch.int64)
    prev = torch.cat([o.new_zeros(1), o[:-1]])
    bad = (o < prev).nonzero()
    if bad.numel():
        i = int(bad[0])
        if i == 0:
            raise ValueError(f"'offsets' must be >= 0: offsets[0] = {int(o[0])} (cumulative row ends)")
        raise ValueError(f"'offsets' must be non-decreasing: offsets[{i}] = {int(o[i])} < offsets[{i - 1}] = "
                         f"{int(o[i - 1])} (cumulative row ends)")
    if limit is not None:
        over = (o > limit).nonzero()
        if over.numel():
            i = int(over[0])
            raise ValueError(f"'offsets' must be <= {limit_desc or limit}: offsets[{i}] = {int(o[i])}")


DEQUANTIZE_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


def check_dequantize_dtype(dtype) -> torch.dtype:
    """The dtype a container dequantizes to: fp32, bf16, fp16 or fp64 (decoded in fp32, then cast)."""
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"'dtype' must be a torch.dtype (torch.float32, torch.bfloat16, torch.float16 or "
                        f"torch.float64), got {type(dtype).__name__} {dtype!r}")
    if dtype not in DEQUANTIZE_DTYPES:
        raise TypeError(f"'dtype' must be a floating-point dtype (torch.float32, torch.bfloat16, torch.float16 or "
                        f"torch.float64), got {dtype}")
    return dtype


def check_device(cls: str, device) -> torch.device:
    """The argument of a container's .to(device): a device, never a dtype (the formats fix the dtypes)."""
    if isinstance(device, torch.dtype):
        raise TypeError(f"{cls}.to takes a device, got the dtype {device}: a container keeps its format's dtypes "
                        "(dequantize(dtype) gives a tensor of another dtype)")
    if isinstance(device, bool) or not isinstance(device, (torch.device, str, int)):
        raise TypeError(f"{cls}.to: 'device' must be a torch.device, a device string or an index, got "
                        f"{type(device).__name__}")
    try:
        return torch.device(device)
    except RuntimeError:
        raise ValueError(f"{cls}.to: 'device' must be a torch.device, a device string or an index, got "
                         f"{device!r}") from None


# ---------------------------------------------------------------------------
# container fields
# ---------------------------------------------------------------------------

def check_tensor(cls: str, field: str, t, dtype: torch.dtype, shape: Tuple[int, ...]) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{cls}: '{field}' must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise TypeError(f"{cls}: '{field}' must have dtype {dtype}, got {t.dtype}")
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{cls}: '{field}' must have shape {tuple(shape)}, got {tuple(t.shape)}")


def check_fields(cls: str, shapes: Shapes, fields: Dict[str, torch.Tensor]) -> None:
    """Every tensor in `fields` has the (shape, dtype) `shapes` gives it, and all are on one device."""
    for name, t in fields.items():
        check_tensor(cls, name, t, shapes[name][1], shapes[name][0])
    check_same_device(cls, fields.items())


def check_same_device(cls: str, named) -> None:
    devices = {(name, t.device) for name, t in named if t is not None}
    if len({d for _, d in devices}) > 1:
        desc = ", ".join(f"{n} on {d}" for n, d in sorted(devices, key=lambda p: p[0]))
        raise ValueError(f"{cls}: all tensors must be on one device, got {desc}")


def check_orig_dtype(cls: str, orig_dtype) -> None:
    if not isinstance(orig_dtype, torch.dtype) or orig_dtype not in INPUT_DTYPES:
        raise TypeError(f"{cls}: 'orig_dtype' must be one of {INPUT_DTYPES}, got {orig_dtype!r}")


def check_bool(cls: str, field: str, value) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{cls}: '{field}' must be a bool, got {type(value).__name__}")


def check_shape(cls: str, shape, names: str = "(M, K)", block: Optional[int] = None) -> Tuple[int, int]:
    """`shape` as a pair of non-negative ints; K a multiple of `block` when given."""
    try:
        shape = tuple(int(s) for s in shape)
    except (TypeError, ValueError):  # not iterable, or items int() refuses ("ab": ValueError)
        raise TypeError(f"{cls}: 'shape' must be a pair of ints {names}, got {shape!r}") from None
    if len(shape) != 2 or shape[0] < 0 or shape[1] < 0:
        raise ValueError(f"{cls}: 'shape' must be {names} with both >= 0, got {shape}")
    if block is not None and shape[1] % block != 0:
        raise ValueError(f"{cls}: 'shape' K must be a multiple of {block}, got K={shape[1]}")
    return shape


def check_all_or_none(cls: str, named) -> bool:
    """The rowwise fields are all tensors (True) or all None (False: a columnwise-only container)."""
    present = [n for n, t in named if t is not None]
    if present and len(present) != len(named):
        missing = [n for n, t in named if t is None]
        raise ValueError(
            f"{cls}: rowwise fields must be all set or all None; set {present}, None {missing}"
        )
    return bool(present)


def check_columnwise(cls: str, kind, columnwise, shape, rowwise: bool, device) -> None:
    """The columnwise copy of a single-tensor container: a `kind` of x.T (shape (K, M)) without a
    columnwise copy of its own, on the rowwise copy's device; required when there is no rowwise copy."""
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
    if rowwise and columnwise.device != device:
        raise ValueError(f"{cls}: 'columnwise' is on {columnwise.device}, rowwise data on {device}")


def check_grouped_meta(cls: str, offsets, shape, layout: str, group_rows,
                       block: Optional[int] = None) -> Tuple[int, int]:
    """offsets, shape (T, K) (K a multiple of `block` when given), layout and group_rows of a grouped
    container; returns (T, K)."""
    if not isinstance(offsets, torch.Tensor) or offsets.dtype != torch.int32 or offsets.dim() != 1 \
            or offsets.numel() == 0:
        raise TypeError(f"{cls}: 'offsets' must be a non-empty 1-D int32 tensor [G]")
    shape = check_shape(cls, shape, "(T, K)", block)
    if layout not in LAYOUTS:
        raise ValueError(f"{cls}: 'layout' must be one of {LAYOUTS}, got {layout!r}")
    if group_rows is not None and (not isinstance(group_rows, int) or group_rows <= 0):
        raise ValueError(f"{cls}: 'group_rows' must be None or a positive int, got {group_rows!r}")
    return shape


def check_grouped_columnwise(cls: str, kind, columnwise, layout: str, rowwise: bool, shape, scaling,
                             offsets, device) -> None:
    """The columnwise copy of a grouped container: a "wgrad"-layout `kind` of the same x (shape,
    scaling, number of groups), carried only by a "rows" container; required without a rowwise copy."""
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


def move(t: Optional[torch.Tensor], device) -> Optional[torch.Tensor]:
    return None if t is None else t.to(device)


def version(t: torch.Tensor) -> Optional[int]:
    """t's version counter (every in-place change bumps it), or None for an inference tensor (made under
    torch.inference_mode), which has none: caches keyed on it then keep their entry as long as the tensor lives."""
    return None if t.is_inference() else t._version


# ---------------------------------------------------------------------------
# the base class
# ---------------------------------------------------------------------------

class _Container:
    """What every quantized container shares: its logical shape's M and K, whether it holds the
    rowwise copy, and its device. `_ROW` names the rowwise payload attribute. Every container also
    has dequantize(dtype) (dtype fp32, bf16, fp16 or fp64) and to(device) (a device only: the
    format fixes the dtypes)."""
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
        right shapes (validation costs ~10 us per call on the eager path). Every public slot must be given."""
        self = object.__new__(cls)
        for name in cls.__slots__:  # private slots (a leading _) default to None
            setattr(self, name, fields.pop(name, None) if name.startswith("_") else fields.pop(name))
        if fields:
            raise TypeError(f"{cls.__name__}._trusted: unknown fields {sorted(fields)}")
        return self
