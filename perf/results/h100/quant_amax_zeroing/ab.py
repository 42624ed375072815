"""Same-process A/B of the grouped quantizers' per-group amax buffers (the current-scaling stats' g_amax, delayed
scaling's amax_out) zeroed by cudaMemsetAsync after the group table kernel (`memsets`, one graph node each) against
zeroed by the group table kernel itself (`in table`). Needs the A/B build whose launcher takes the memsets when
SCALEMM_EXP_MEMSET is set (experiment.diff).

  python3 perf/results/h100/quant_amax_zeroing/ab.py --out OUT [--no-steps]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
from grouped_quant_ab import main  # noqa: E402

if __name__ == "__main__":
    main("SCALEMM_EXP_MEMSET", ('memsets', 'memsets'), ('in table', 'in table'))
