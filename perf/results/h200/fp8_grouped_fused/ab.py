"""Same-process A/B of the grouped FP8 quantizer with current scaling: the stats pass and the quantize pass fused in
one launch (grouped_fp8_fused_kernel, the default of experiment.diff) against the two launches (grouped_stats_kernel
then grouped_quantize_kernel: the library built with -DSCALEMM_FP8_GROUPED_FUSED=0), and the quantize pass alone
(delayed scaling, a given amax: the floor the fusion aims at). Needs experiment.diff applied (the fused kernel and
its macros; scalemm kept none of it: README.txt). The harness: perf/grouped_quant_builds.py.

  git apply perf/results/h200/fp8_grouped_fused/experiment.diff
  python3 perf/results/h200/fp8_grouped_fused/ab.py --build
  python3 perf/results/h200/fp8_grouped_fused/ab.py --out OUT
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
from grouped_quant_builds import Experiment, main  # noqa: E402

EXPERIMENT = Experiment(new="fused", builds={"two launches": ("SCALEMM_FP8_GROUPED_FUSED=0",),
                                    "fused r4b3": ("SCALEMM_FUSED_STATS_ROWS=4", "SCALEMM_FUSED_MIN_BLOCKS=3"),
                                    "fused r8b4": ("SCALEMM_FUSED_STATS_ROWS=8", "SCALEMM_FUSED_MIN_BLOCKS=4")},
                        modes=(("tensor", True), ("token", True), ("tensor", False)))

if __name__ == "__main__":
    main(EXPERIMENT)
