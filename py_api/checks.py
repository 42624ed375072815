"""Argument checks every GEMM entry point shares (FP8 dense and grouped, NVFP4): one owner for
each rule, so the CPU reference path and the kernels accept exactly the same inputs."""
from __future__ import annotations

import torch

from .cutlass_kernels.configs import GemmConfig

OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
PER_16_BYTES = {torch.bfloat16: 8, torch.float16: 8, torch.float32: 4}  # output elements per 16-byte row piece


def check_options(out_dtype, fast_accum, config, config_types=(GemmConfig,)) -> None:
    if out_dtype not in OUT_DTYPES:
        raise TypeError(f"out_dtype must be one of {OUT_DTYPES}, got {out_dtype}")
    if not isinstance(fast_accum, bool):
        raise TypeError(f"fast_accum must be a bool, got {type(fast_accum).__name__}")
    if config is not None and not isinstance(config, config_types):
        names = " or ".join(t.__name__ for t in config_types)
        raise TypeError(f"config must be a {names} or None, got {type(config).__name__}")
    if fast_accum and getattr(config, "promotion_chunks", 0):
        raise ValueError(f"config.promotion_chunks = {config.promotion_chunks} is scalemm's full-accumulation "
                         "mainloop: use it with fast_accum=False (or promotion_chunks=0)")


def check_k(K, what="K") -> None:
    """The reduction length: whole 16-byte TMA rows of e4m3, and not empty."""
    if K <= 0 or K % 16:
        raise ValueError(f"{what} = {K} must be a positive multiple of 16 (16-byte TMA rows of e4m3)")


def check_n(N, out_dtype, what="N") -> None:
    """The output row length: whole 16-byte rows of out_dtype (TMA stores)."""
    per16 = PER_16_BYTES[out_dtype]
    if N % per16:
        raise ValueError(f"{what} = {N} must be a multiple of {per16} for {out_dtype} output (16-byte rows)")


def grouped_activation_offsets(a, offsets):
    """The offsets of a grouped GEMM whose activations a are a grouped container (GroupedFP8Tensor /
    GroupedNVFP4Tensor): its own, when offsets is None or that same tensor; any other tensor is refused."""
    if offsets is None or offsets is a.offsets:
        return a.offsets
    raise ValueError(f"a is a {type(a).__name__}: pass offsets=None (its own offsets are used) or the same "
                     "tensor it was quantized with")


def check_aligned(t, name):
    if t.data_ptr() % 16:
        raise ValueError(f"{name} must start on a 16-byte boundary (TMA); got a view at offset "
                         f"{t.data_ptr() % 16} bytes: pass a fresh contiguous tensor")
