"""Same-process A/B of the grouped FP8 quantizer's row mapping for the columnwise (wgrad-layout) copy: every thread
mapping its two rows with a binary search each, a division for each row's scale and a key-matching amax reduction
(`row map`) against one chunk head per warp (lanes 0 and 1 map the warp's two 16-position chunks, the warp takes them
by shuffles, one scale per chunk, one warp reduction for the amax: `chunk map`). Needs the A/B build of
quant_grouped.cuh whose launcher takes the row map when SCALEMM_EXP_ROW_MAP is set (experiment.diff); each
contender sets or clears it while its CUDA graph is captured.

  python3 perf/results/h100/quant_chunk_heads/ab.py --out OUT [--no-steps]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
from grouped_quant_ab import main  # noqa: E402

if __name__ == "__main__":
    main("SCALEMM_EXP_ROW_MAP", ('row map', 'row'), ('chunk map', 'chunk'))
