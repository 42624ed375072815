"""Serve a model's linear layers on NVFP4 (or FP8) weights: scalemm.nn.convert_for_inference, end to end.

    python examples/quantize_for_inference.py                   # a small bf16 MLP stack; CUDA if there is one
    python examples/quantize_for_inference.py --mode w4a4 --layers 4 --hidden 1024

What it shows:
  - convert_for_inference swaps the eligible nn.Linear modules in place and reports the ones it skipped, with why;
  - the converted model runs under torch.inference_mode, eagerly or captured in a CUDA graph (call it once first:
    the weights' prepared copies are made on their first call), and compiles with torch.compile(fullgraph=True);
  - its output against the bf16 model's (SQNR), and its weight memory.
CPU tensors run scalemm's reference path (the same numerics, slowly), so the script runs anywhere.
"""
from __future__ import annotations

import argparse
import copy
import math

import torch

from scalemm.nn import convert_for_inference


def mlp_stack(layers: int, hidden: int, device, dtype=torch.bfloat16) -> torch.nn.Sequential:
    """layers blocks of hidden -> 4 hidden -> hidden with SiLU, and a head of 50 outputs (not a multiple of 8: it
    stays bf16, and the report says why)."""
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(hidden, 4 * hidden), torch.nn.SiLU(), torch.nn.Linear(4 * hidden, hidden)]
    mods.append(torch.nn.Linear(hidden, 50))
    return torch.nn.Sequential(*mods).to(device=device, dtype=dtype)


def weight_bytes(model: torch.nn.Module) -> int:
    return sum(t.numel() * t.element_size() for name, t in model.state_dict().items() if "bias" not in name)


def sqnr_db(y: torch.Tensor, ref: torch.Tensor) -> float:
    err = (y.double() - ref.double()).pow(2).sum().item()
    return 10 * math.log10(ref.double().pow(2).sum().item() / max(err, 1e-30))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--format", default="nvfp4", choices=("nvfp4", "fp8"))
    p.add_argument("--mode", default="w4a16", choices=("w4a16", "w4a4"), help="NVFP4 only")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--compile", action="store_true", help="also run torch.compile(fullgraph=True) of the model")
    args = p.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = mlp_stack(args.layers, args.hidden, device)
    quantized = copy.deepcopy(model)
    kw = dict(mode=args.mode) if args.format == "nvfp4" else {}
    report = convert_for_inference(quantized, args.format, **kw)
    print(report)
    x = torch.randn(args.tokens, args.hidden, device=device, dtype=torch.bfloat16)
    with torch.inference_mode():
        ref, y = model(x), quantized(x)
        print(f"{args.format} {args.mode if args.format == 'nvfp4' else ''} on {device}: SQNR {sqnr_db(y, ref):.1f} dB "
              f"against bf16; weights {weight_bytes(quantized) / 2**20:.2f} MiB (bf16 {weight_bytes(model) / 2**20:.2f} MiB)")
        if device == "cuda":  # a CUDA graph of the converted model: a replay does no host work
            static_x = x.clone()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_y = quantized(static_x)
            static_x.copy_(torch.randn_like(x))
            graph.replay()
            assert torch.equal(static_y, quantized(static_x))
            print("CUDA graph replay: same output as an eager call")
        if args.compile:
            compiled = torch.compile(quantized, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
            # scalemm's ops are opaque nodes; inductor may fuse the SiLU between them differently from eager
            print(f"torch.compile(fullgraph=True): SQNR {sqnr_db(compiled(x), y):.1f} dB against the eager model")
    return report, sqnr_db(y, ref)


if __name__ == "__main__":
    main()
