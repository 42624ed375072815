"""Same-process A/B of the grouped amax pass (grouped_stats_kernel): max |x| on the raw bits (quant_numerics.cuh
MagCols; the default) against the fp32 conversions of the previous code (-DSCALEMM_GROUPED_STATS_FLOAT=1), and 8 rows
per thread at three CTAs per SM. Needs experiment.diff applied to the commit README.txt names (the A/B build: both
paths and the rows / CTAs per SM as macros). The harness: perf/grouped_quant_builds.py.

  python3 perf/results/h200/grouped_stats_bits/ab.py --build
  python3 perf/results/h200/grouped_stats_bits/ab.py --out OUT
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
from grouped_quant_builds import Experiment, main  # noqa: E402

EXPERIMENT = Experiment(new="bits", builds={"float": ("SCALEMM_GROUPED_STATS_FLOAT=1",),
                                   "bits r8b3": ("SCALEMM_GROUPED_STATS_ROWS=8", "SCALEMM_GROUPED_STATS_MIN_BLOCKS=3")})

if __name__ == "__main__":
    main(EXPERIMENT)
