"""GEMM shapes of real models, independent of the GPU architecture: what perf/gemm_sweep.py times
and what `scalemm.tune(model=...)` / `python -m scalemm tune --model` expands.

A model preset gives the sizes that fix every dense linear layer of a transformer block:
hidden, intermediate (the MLP's), heads, kv_heads and optionally head_dim (default hidden //
heads). Its layers, as nn.Linear weights [N, K]:
  qkv      N = (heads + 2 * kv_heads) * head_dim, K = hidden      (fused Q, K, V projection)
  o        N = hidden,                 K = heads * head_dim
  gate_up  N = 2 * intermediate,       K = hidden                 (fused gate and up projection)
  down     N = hidden,                 K = intermediate
"""
from __future__ import annotations

import json
from pathlib import Path

# (N, K) of real models' linear layers (nn.Linear weight [N, K]): what perf/gemm_sweep.py times.
MODEL_LINEAR_SHAPES = {
    "llama3-8b.qkv": (6144, 4096), "llama3-8b.o": (4096, 4096),
    "llama3-8b.gate_up": (28672, 4096), "llama3-8b.down": (4096, 14336),
    "llama3-70b.qkv": (10240, 8192), "llama3-70b.o": (8192, 8192),
    "llama3-70b.gate_up": (57344, 8192), "llama3-70b.down": (8192, 28672),
    "dsv3.q_a": (1536, 7168), "dsv3.q_b": (24576, 1536), "dsv3.kv_a": (576, 7168), "dsv3.o": (7168, 16384),
    "dsv3.shared_gate_up": (4096, 7168), "dsv3.shared_down": (7168, 2048),
    "qwen3-30b-a3b.qkv": (5120, 2048), "qwen3-30b-a3b.o": (2048, 4096),
    "qwen3-235b-a22b.qkv": (9216, 4096), "qwen3-235b-a22b.expert_gate_up": (3072, 4096),
}
DECODE_M = (1, 16, 32, 64, 128)
PREFILL_M = (1024, 4096, 16384)

# Dense transformer blocks (published configs): `model_linear_shapes` turns one into its layers.
MODEL_PRESETS = {
    "llama3-8b": {"hidden": 4096, "intermediate": 14336, "heads": 32, "kv_heads": 8},
    "llama3-70b": {"hidden": 8192, "intermediate": 28672, "heads": 64, "kv_heads": 8},
    "qwen2.5-7b": {"hidden": 3584, "intermediate": 18944, "heads": 28, "kv_heads": 4},
    "qwen2.5-72b": {"hidden": 8192, "intermediate": 29568, "heads": 64, "kv_heads": 8},
    "llama3-405b": {"hidden": 16384, "intermediate": 53248, "heads": 128, "kv_heads": 8},
    "mistral-large-2": {"hidden": 12288, "intermediate": 28672, "heads": 96, "kv_heads": 8, "head_dim": 128},
    "gemma-3-27b": {"hidden": 5376, "intermediate": 21504, "heads": 32, "kv_heads": 16, "head_dim": 128},
    # attention projections and one MoE expert's MLP (intermediate = the expert's)
    "gpt-oss-120b": {"hidden": 2880, "intermediate": 2880, "heads": 64, "kv_heads": 8, "head_dim": 64},
}
_PRESET_KEYS = {"hidden", "intermediate", "heads", "kv_heads", "head_dim", "name"}


def sweep_points(max_flop: float = 4e12):
    """(label, M, N, K) over the model shapes, plus the 8192^3 anchor; skips points over max_flop."""
    pts = [(f"{name}", M, N, K) for name, (N, K) in MODEL_LINEAR_SHAPES.items()
           for M in DECODE_M + PREFILL_M if 2 * M * N * K <= max_flop]
    return pts + [("square", 8192, 8192, 8192)]


def load_model(model) -> dict:
    """A model preset: a name of MODEL_PRESETS, a path to a JSON file, a JSON object as text, or a
    dict; checked (positive ints, heads divisible by kv_heads)."""
    if isinstance(model, str):
        if model in MODEL_PRESETS:
            spec = dict(MODEL_PRESETS[model], name=model)
        elif model.lstrip().startswith("{"):
            spec = json.loads(model)
        elif Path(model).is_file():
            spec = json.loads(Path(model).read_text())
            spec.setdefault("name", Path(model).stem)
        else:
            raise ValueError(f"model {model!r} is neither a preset ({', '.join(MODEL_PRESETS)}), a JSON file nor "
                             "a JSON object")
    elif isinstance(model, dict):
        spec = dict(model)
    else:
        raise TypeError(f"model must be a preset name, a JSON path or text, or a dict, got {type(model).__name__}")
    if not isinstance(spec, dict):
        raise ValueError(f"a model must be a JSON object, got {type(spec).__name__}")
    unknown = set(spec) - _PRESET_KEYS
    if unknown:
        raise ValueError(f"unknown model keys {sorted(unknown)}: use {sorted(_PRESET_KEYS)}")
    for key in ("hidden", "intermediate", "heads", "kv_heads"):
        if key not in spec:
            raise ValueError(f"the model needs {key!r} (it has {sorted(spec)})")
    spec.setdefault("head_dim", spec["heads"] and spec["hidden"] // spec["heads"])
    for key in ("hidden", "intermediate", "heads", "kv_heads", "head_dim"):
        value = spec[key]
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"model {key!r} must be a positive int, got {value!r}")
    if spec["heads"] % spec["kv_heads"]:
        raise ValueError(f"heads ({spec['heads']}) must be a multiple of kv_heads ({spec['kv_heads']})")
    spec.setdefault("name", "model")
    return spec


def model_linear_shapes(model) -> dict[str, tuple[int, int]]:
    """{layer: (N, K)} of a model preset's dense linear layers (see the module docstring)."""
    m = load_model(model)
    h, d, q, kv, i = m["hidden"], m["head_dim"], m["heads"], m["kv_heads"], m["intermediate"]
    return {"qkv": ((q + 2 * kv) * d, h), "o": (h, q * d), "gate_up": (2 * i, h), "down": (h, i)}


def model_gemm_shapes(model, tokens=DECODE_M + PREFILL_M) -> list[tuple[int, int, int]]:
    """(M, N, K) for every linear layer of `model` at every token count in `tokens`, without duplicates
    (layers of one shape share an entry), in order."""
    layers = model_linear_shapes(model)
    return list(dict.fromkeys((M, N, K) for M in tokens for N, K in layers.values()))
