"""Same-process A/B of the grouped FP8 quantizer's columnwise-copy row mapping: each warp's chunk heads found by a
binary search over the position table (`search`) against read from a chunk table written by a small kernel after the
amaxes are known, one int4 per 16 positions with the group's scale in it (`table`). Needs the A/B build whose launcher
skips the table when SCALEMM_EXP_NO_CHUNK_TABLE is set (experiment.diff).

  python3 perf/results/h100/quant_chunk_table/ab.py --out OUT [--no-steps]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
from grouped_quant_ab import main  # noqa: E402

if __name__ == "__main__":
    main("SCALEMM_EXP_NO_CHUNK_TABLE", ('search', 'search'), ('table', 'table'))
