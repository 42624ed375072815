"""Same-process A/B of L2 prefetches in the grouped quantizer's two passes (experiment.diff: SCALEMM_STATS_PREFETCH,
the stats kernel's CTA prefetching its next tile's rows; SCALEMM_QUANT_PREFETCH_TILES = d, each quantize CTA
prefetching the rows about where the CTA d tiles on will read) against the code without them ("base"). Needs
experiment.diff applied to the commit README.txt names. The harness: perf/grouped_quant_builds.py.

  python3 perf/results/h200/grouped_quant_prefetch/ab.py --build
  python3 perf/results/h200/grouped_quant_prefetch/ab.py --out OUT
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
from grouped_quant_builds import Experiment, main  # noqa: E402

EXPERIMENT = Experiment(new="base", builds={"stats pf": ("SCALEMM_STATS_PREFETCH=1",),
                                   "both pf 528": ("SCALEMM_STATS_PREFETCH=1", "SCALEMM_QUANT_PREFETCH_TILES=528"),
                                   "both pf 1056": ("SCALEMM_STATS_PREFETCH=1", "SCALEMM_QUANT_PREFETCH_TILES=1056")},
                        step_builds=("base", "stats pf", "both pf 528"), layers=False)

if __name__ == "__main__":
    main(EXPERIMENT)
