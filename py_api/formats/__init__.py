"""scalemm's low-precision formats (docs/numerics.md): descriptors, constants and containers.

Three formats, each described by a frozen `Format` instance and owned by one module:

- ``NVFP4`` (formats/nvfp4.py): e2m1 data (two values per byte, even index in the low nibble),
  one e4m3 scale per 16 consecutive elements along K, plus an fp32 global (per-tensor or
  per-token) decode scale. Containers NVFP4Tensor, GroupedNVFP4Tensor.
- ``MXFP8`` (formats/mxfp8.py): e4m3 data, one e8m0 (power-of-two) scale per 32 elements along
  K. Containers MXFP8Tensor, GroupedMXFP8.
- ``FP8`` (formats/fp8.py): e4m3 data with one fp32 scale per tensor or per row ("current
  scaling"). Containers FP8Tensor, GroupedFP8Tensor.

Block-scaled formats store their scales in the 128x4 swizzled layout of docs/numerics.md
section 5; formats/layout.py computes every fact of that layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import torch

from .layout import SF_TILE_COLS, SF_TILE_ROWS  # noqa: F401  (re-exported)

# fp32 limits (the reference works in fp32; fl() = round to fp32, nearest-even).
FLT_MAX = float(torch.finfo(torch.float32).max)  # 3.4028234663852886e38
FLT_MIN = float(torch.finfo(torch.float32).tiny)  # smallest normal fp32, 2^-126

FP4_MAX = 6.0  # largest e2m1 magnitude
E4M3_MAX = 448.0  # largest finite float8_e4m3fn magnitude
NVFP4_GLOBAL_MAX = FP4_MAX * E4M3_MAX  # 2688: amax maps here under S_enc

E8M0_BIAS = 127  # e8m0 byte b encodes 2^(b - 127)
E8M0_NAN = 0xFF  # the e8m0 NaN byte
E8M0_MAX_FINITE = 254

E4M3_NAN_BYTE = 0x7F  # canonical e4m3 NaN written by the reference (sign dropped)
E2M1_NAN_CODE = 0x7  # NaN inputs encode as +6

# Random Hadamard transform: 16-point, sign bit k set where s_k = -1.
RHT_SIZE = 16
RHT_SIGN_MASK = 0xD7E8

SCALINGS = ("tensor", "token")  # NVFP4 / FP8 global-scale granularity
INPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@dataclass(frozen=True)
class Format:
    """What a quantized format stores and how its scales are encoded.

    name: short identifier ("nvfp4", "mxfp8", "fp8").
    element: encoding of one data element ("e2m1" or "e4m3").
    data_dtype: storage dtype of the data tensor (uint8 for packed e2m1).
    elements_per_byte: 2 for packed e2m1, 1 otherwise.
    data_max: largest finite data magnitude.
    block_size: elements per block scale along K; None when there are no block scales.
    scale_encoding: "e4m3", "e8m0" or None (no block scales).
    scale_dtype: storage dtype of the (swizzled, 1-D) block-scale buffer, or None.
    scale_max: largest finite block-scale value, or None.
    """

    name: str
    element: str
    data_dtype: torch.dtype
    elements_per_byte: int
    data_max: float
    block_size: Optional[int]
    scale_encoding: Optional[str]
    scale_dtype: Optional[torch.dtype]
    scale_max: Optional[float]

    def scale_cols(self, k: int) -> int:
        """Number of block scales per row for K elements (ceil(K / block_size))."""
        if self.block_size is None:
            raise ValueError(f"{self.name} has no block scales")
        return -(-k // self.block_size)

    def data_shape(self, rows: int, cols: int) -> Tuple[int, int]:
        """Shape of the data tensor holding a rows x cols matrix (packed along cols)."""
        return rows, cols // self.elements_per_byte


NVFP4 = Format(
    name="nvfp4",
    element="e2m1",
    data_dtype=torch.uint8,
    elements_per_byte=2,
    data_max=FP4_MAX,
    block_size=16,
    scale_encoding="e4m3",
    scale_dtype=torch.float8_e4m3fn,
    scale_max=E4M3_MAX,
)

MXFP8 = Format(
    name="mxfp8",
    element="e4m3",
    data_dtype=torch.float8_e4m3fn,
    elements_per_byte=1,
    data_max=E4M3_MAX,
    block_size=32,
    scale_encoding="e8m0",
    scale_dtype=torch.uint8,
    scale_max=2.0**127,
)

FP8 = Format(
    name="fp8",
    element="e4m3",
    data_dtype=torch.float8_e4m3fn,
    elements_per_byte=1,
    data_max=E4M3_MAX,
    block_size=None,
    scale_encoding=None,
    scale_dtype=None,
    scale_max=None,
)

# The containers come last: their modules read the descriptors and constants above.
from .fp8 import FP8Tensor, GroupedFP8Tensor  # noqa: E402
from .mxfp8 import GroupedMXFP8, MXFP8Tensor  # noqa: E402
from .nvfp4 import GroupedNVFP4Tensor, NVFP4Tensor  # noqa: E402

__all__ = ["Format", "NVFP4", "MXFP8", "FP8", "NVFP4Tensor", "GroupedNVFP4Tensor", "MXFP8Tensor",
           "GroupedMXFP8", "FP8Tensor", "GroupedFP8Tensor"]
