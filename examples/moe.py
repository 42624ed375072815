"""A reference MoE block on scalemm.nn.GroupedLinear: router top-k, permute (tokens sorted by expert),
gate_up -> SiLU(gate) * up (scalemm.swiglu) -> down, unpermute and combine with the router weights.

    from moe import MoEBlock                       # examples/ on sys.path
    block = MoEBlock(hidden=2048, inter=768, experts=128, top_k=8, recipe=scalemm.recipes.FP8Rowwise())
    y = block(x)                                   # x [..., hidden]

Everything stays on the device: the expert counts come from scatter_add_ (torch.bincount would
read the largest index back to the host), the permutation from a stable argsort, and the offsets
are their cumulative sum; nothing calls .item() or .tolist(). recipe=None runs the experts in high
precision (torch._grouped_mm), the baseline. The router stays a plain nn.Linear (its logits pick
the experts: it is usually kept in high precision).
"""
from __future__ import annotations

import torch

import scalemm
from scalemm.nn import GroupedLinear
from scalemm.recipes import FP8Rowwise


def route(logits: torch.Tensor, top_k: int):
    """(weights [T, k] fp32, normalised over the k picks; experts [T, k]) from router logits [T, E]."""
    probs = torch.softmax(logits.float(), dim=-1)
    weights, experts = probs.topk(top_k, dim=-1)
    return weights / weights.sum(-1, keepdim=True), experts


def permute(experts: torch.Tensor, num_experts: int):
    """(order, offsets): order [T*k] lists the (token, slot) pairs sorted by expert (stable: tokens
    keep their order inside an expert); offsets int32 [E] are the cumulative row ends per expert."""
    flat = experts.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.zeros(num_experts, dtype=torch.int64, device=flat.device)
    counts.scatter_add_(0, flat, torch.ones_like(flat))
    return order, counts.cumsum(0).to(torch.int32)


class MoEBlock(torch.nn.Module):
    def __init__(self, hidden: int, inter: int, experts: int, top_k: int, *, recipe=FP8Rowwise(), device=None,
                 dtype=None, fuse_wgrad_accumulation: bool = False):
        super().__init__()
        self.hidden, self.inter, self.experts, self.top_k = hidden, inter, experts, top_k
        self.router = torch.nn.Linear(hidden, experts, bias=False, device=device, dtype=dtype)
        kw = dict(recipe=recipe, device=device, dtype=dtype, fuse_wgrad_accumulation=fuse_wgrad_accumulation)
        self.gate_up = GroupedLinear(experts, hidden, 2 * inter, **kw)
        self.down = GroupedLinear(experts, inter, hidden, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        x = x.reshape(-1, self.hidden)
        weights, experts = route(self.router(x), self.top_k)
        order, offsets = permute(experts, self.experts)
        token = order // self.top_k  # the token of each sorted (token, slot) pair
        h = self.gate_up(x[token], offsets)  # [T*k, 2 inter] = [gate | up]
        y = self.down(scalemm.swiglu(h), offsets)  # SiLU(gate) * up, one kernel each way; [T*k, hidden]
        y = y * weights.reshape(-1)[order, None].to(y.dtype)
        out = torch.zeros_like(x, dtype=y.dtype).index_add_(0, token, y)  # unpermute, sum the k slots
        return out.reshape(*lead, self.hidden)
