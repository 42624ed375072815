"""scalemm.swiglu: the SwiGLU activation of an MLP or MoE expert block, forward and backward in one pass each.

    a = scalemm.swiglu(h)          # h = gate_up(x) [..., 2I] = [gate | up]  ->  silu(gate) * up [..., I]

The same values as torch's `gate, up = h.chunk(2, -1); F.silu(gate) * up`, computed in fp32 and rounded once
(torch's eager ops round silu's output first), differentiable, a custom op under torch.compile, capturable in CUDA
graphs. CUDA tensors run one kernel each way (cutlass_kernels/include/scalemm/swiglu.cuh): forward reads h once
and writes a; backward reads h and the gradient once and writes dh in one piece, where torch's eager ops take three
passes forward and four backward (perf/NOTES.md). CPU tensors run scalemm.reference.swiglu (the numerics' owner).
"""
from __future__ import annotations

import ctypes
import functools

import torch

from . import abi, reference
from . import quantize as _q
from .arch import kernel_arch, on_device
from .formats.base import check_input
from .jit import KernelSpec, build

__all__ = ["swiglu", "swiglu_forward", "swiglu_backward", "kernel_specs"]

def _spec(dtype: torch.dtype) -> KernelSpec:
    return KernelSpec(name=f"swiglu_{str(dtype).split('.')[-1]}", template="swiglu.cu", cutlass=False,
                      params={"IN_T": _q._CXX_TYPES[dtype]})


def kernel_specs():
    """The SwiGLU libraries, one per dtype, for `python -m scalemm build`."""
    return [_spec(dtype) for dtype in _q._CXX_TYPES]


@functools.lru_cache(maxsize=None)
def _launcher(dtype: torch.dtype, name: str):
    return build(_spec(dtype)).function(name, [ctypes.POINTER(abi.SwigluArgs)])


def _check_h(h) -> int:
    """I (half of h's last dim) of a valid h."""
    check_input(h, "h")
    if h.dim() == 0 or h.shape[-1] % 2 != 0 or h.shape[-1] == 0:
        raise ValueError(f"swiglu: 'h' must be [..., 2I] with I >= 1 ([gate | up] along the last dim), got shape "
                         f"{tuple(h.shape)}")
    return h.shape[-1] // 2


def _launch(name: str, h: torch.Tensor, dout, out: torch.Tensor, inner: int, fn=None) -> None:
    """One kernel launch: `name` of the dtype's library, or `fn` (a loaded launcher of another build: A/B runs)."""
    rows = h.numel() // (2 * inner)
    if rows == 0:
        return
    kernel_arch(h.device)  # NotImplementedError on a GPU scalemm has no kernels for
    n = 16 // h.element_size()
    ptrs = [t.data_ptr() for t in (h, dout, out) if t is not None]
    vec = int(inner % n == 0 and all(p % 16 == 0 for p in ptrs))
    with on_device(h.device):
        args = abi.SwigluArgs(h=h.data_ptr(), dout=None if dout is None else dout.data_ptr(), out=out.data_ptr(),
                              rows=rows, inner=inner, vec=vec,
                              stream=torch._C._cuda_getCurrentRawStream(h.device.index))
        err = (fn or _launcher(h.dtype, name))(ctypes.byref(args))
    if err:
        raise RuntimeError(f"scalemm.swiglu: {name} failed with CUDA error {err}")


def swiglu_forward(h: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up of h = [gate | up] [..., 2I] -> a new [..., I] tensor in h's dtype (no autograd)."""
    inner = _check_h(h)
    if not h.is_cuda:
        return reference.swiglu(h)
    h = h.contiguous()
    out = _q._empty((*h.shape[:-1], inner), h.dtype, h.device)  # (filled where the tests poison outputs)
    _launch("scalemm_swiglu_forward", h, None, out, inner)
    return out


def swiglu_backward(h: torch.Tensor, dout: torch.Tensor) -> torch.Tensor:
    """dh = [dgate | dup] [..., 2I] in h's dtype for the gradient dout [..., I] of swiglu(h) (no autograd)."""
    inner = _check_h(h)
    if not isinstance(dout, torch.Tensor):
        raise TypeError(f"swiglu: 'dout' must be a torch.Tensor, got {type(dout).__name__}")
    want = (*h.shape[:-1], inner)
    if tuple(dout.shape) != want or dout.device != h.device:
        raise ValueError(f"swiglu: 'dout' must have shape {want} on {h.device}, got {tuple(dout.shape)} on "
                         f"{dout.device}")
    dout = dout.to(h.dtype)
    if not h.is_cuda:
        return reference.swiglu_backward(h, dout)
    h, dout = h.contiguous(), dout.contiguous()
    dh = _q._empty(h.shape, h.dtype, h.device)
    _launch("scalemm_swiglu_backward", h, dout, dh, inner)
    return dh


def swiglu(h: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up for h = [gate | up] [..., 2I] (bf16, fp16 or fp32; gate_up's output, torch's
    h.chunk(2, dim=-1) order) -> [..., I] in h's dtype. Differentiable (the backward is one kernel too); under
    torch.compile one opaque node (torch.ops.scalemm.swiglu). Numerics: scalemm.reference.swiglu."""
    _check_h(h)
    return torch.ops.scalemm.swiglu(h)
