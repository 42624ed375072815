"""SwiGLU, forward and backward (scalemm.swiglu; the kernels: cutlass_kernels/include/scalemm/swiglu.cuh).

h [..., 2I] = [gate | up] (torch's h.chunk(2, dim=-1)); out = silu(gate) * up [..., I], and the backward
dh = [dgate | dup] for dout [..., I]:
    s = 1 / (1 + exp(-gate)),  silu(gate) = gate / (1 + exp(-gate)),
    dup = dout * (gate * s),   dgate = (dout * up) * (s * (1 + gate * (1 - s))),
torch's formulas for silu and silu_backward, evaluated in fp32 and rounded once to h's dtype. The kernels compute
the same expressions in fp32 (CUDA's expf, its contractions into FMAs), so they agree with these functions to one
unit in the last place of a 16-bit output (fp32: a few units), not bit for bit.
"""
from __future__ import annotations

import torch

__all__ = ["swiglu", "swiglu_backward"]


def swiglu(h: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up of h = [gate | up] [..., 2I] -> [..., I] in h's dtype."""
    g, u = h.float().chunk(2, dim=-1)
    return (g / (1 + torch.exp(-g)) * u).to(h.dtype)


def swiglu_backward(h: torch.Tensor, dout: torch.Tensor) -> torch.Tensor:
    """dh = [dgate | dup] [..., 2I] in h's dtype for the gradient dout [..., I] of swiglu(h)."""
    g, u = h.float().chunk(2, dim=-1)
    d = dout.float()
    s = 1 / (1 + torch.exp(-g))
    du = d * (g * s)
    dg = (d * u) * (s * (1 + g * (1 - s)))
    return torch.cat([dg, du], dim=-1).to(h.dtype)
