"""Kernel specs the default NVFP4 dispatch runs at ab_rows.py's points (132 SMs; --grouped: at
../nvfp4_grouped_rows_decode/ab_grouped_rows.py's) for the scalemm on sys.path (PYTHONPATH=a build's install):
`python specs_rows.py [--grouped] [--build] [--tests] [--jobs N] [--pack OUT.tgz]` (--tests: also the NVFP4 GPU
tests' kernels; the pack: those kernels' JIT-cache entries, ../nvfp4_wgmma_stages/pack_specs.py)."""
import os
import sys

import torch

from scalemm import epilogues as epi
from scalemm.cutlass_kernels import configs as _configs
from scalemm.gemm_nvfp4 import (dequant_kernel_spec, nvfp4_gemm_kernel_spec, nvfp4_grouped_kernel_spec,
                                skinny_kernel_spec)
from scalemm.jit import build_many
from scalemm.quantize import kernel_specs as quant_specs
from scalemm.quantize_grouped import kernel_specs as grouped_quant_specs

# --grouped: the points of ../nvfp4_grouped_rows_decode/ab_grouped_rows.py instead of ab_rows.py's (their lists read
# from the scripts' sources, without running them)
_here = os.path.dirname(os.path.abspath(__file__))
_ns = {}
if "--grouped" in sys.argv:
    _src = open(os.path.join(_here, "..", "nvfp4_grouped_rows_decode", "ab_grouped_rows.py")).read()
    exec(_src[_src.index("EXPERTS = "):_src.index("grouped = []")], _ns)
    SHAPES, EXPERTS, MS, TS = [], _ns["EXPERTS"], (), (2, 4, 8, 16)
else:
    _src = open(os.path.join(_here, "ab_rows.py")).read()
    exec(_src[_src.index("FIT = "):_src.index("p = argparse")], _ns)
    SHAPES, EXPERTS, MS, TS = _ns["FIT"] + _ns["HELD_OUT"], _ns["EXPERTS"], (1, 2, 4, 8, 16), (8, 16, 32)
sm90 = _configs.for_arch("sm90")
bf = torch.bfloat16
tree = epi.scaled(bf, bias=True, activation=None)
specs = {}


def skinny(c, x4):
    for mainloop in {c.mainloop, "stepped"} if c.mainloop == "resident" else {c.mainloop}:
        from dataclasses import replace
        s = skinny_kernel_spec(replace(c, mainloop=mainloop), act_dtype="nvfp4" if x4 and mainloop != "wgmma" else bf,
                               out_dtype=bf)
        specs[s.name] = s


for N, K in SHAPES:
    for M in MS:
        for x4 in (False, True):
            c = sm90.default_nvfp4_skinny_config(M, N, K, nvfp4_activations=x4, num_sms=132)
            if c is None:
                s, _ = nvfp4_gemm_kernel_spec(sm90.default_nvfp4_config(M, N, K, num_sms=132).compiled(), act_dtype=bf,
                                              out_dtype=bf, epilogue=tree)
                specs[s.name] = s
            else:
                skinny(c, x4)
for E, N, K, _ in EXPERTS:
    for T in TS:
        c = sm90.default_nvfp4_grouped_skinny_config(T, E, N, K)
        for x4 in (False, True):
            if c is None:
                s, _ = nvfp4_grouped_kernel_spec(sm90.default_nvfp4_grouped_config(T, E, N, K).compiled(),
                                                 act_dtype=bf, out_dtype=bf, epilogue=tree)
                specs[s.name] = s
            else:
                skinny(c, x4)
allspecs = (list(specs.values()) + [dequant_kernel_spec()] + list(quant_specs())
            + [s for s in grouped_quant_specs() if s.name.endswith("bfloat16")])
if "--tests" in sys.argv:  # + what tests/test_nvfp4_gemm_gpu.py and the quantizer GPU tests launch
    from scalemm.gemm_nvfp4 import build_set
    allspecs = list({s.name: s for s in allspecs + build_set("tests") + list(grouped_quant_specs())}.values())
print(len(allspecs), sorted(s.name for s in allspecs))
if "--build" in sys.argv:
    jobs = int(sys.argv[sys.argv.index("--jobs") + 1]) if "--jobs" in sys.argv else 2
    print("failed:", [x[0].name for x in build_many(allspecs, jobs=jobs) if x[1]])
if "--pack" in sys.argv:
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "nvfp4_wgmma_stages"))
    from pack_specs import pack
    pack(sys.argv[sys.argv.index("--pack") + 1], allspecs)
