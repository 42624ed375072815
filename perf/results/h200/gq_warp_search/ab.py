"""Same-process A/B of changes to the grouped FP8 quantizer's passes (forty-ninth session, 2026-11-29). Needs
experiment.diff applied to the commit README.txt names (every change below as a macro). The harness:
perf/grouped_quant_builds.py.
- The quantize pass's chunk heads found by a warp-cooperative search of the position table (warp_count_le: two
  rounds of dependent loads instead of a binary search's eight, then one round for both chunks' group bounds and
  amax), against the per-lane binary search (-DSCALEMM_GQ_WARP_SEARCH=0, "search").
- The amax pass's loads by cp.async into a shared-memory ring of S stages (-DSCALEMM_GSTATS_RING=S, rows per warp
  SCALEMM_GSTATS_ROWS), against registers.
- The columnwise stores of the cast-then-transpose pass from one address per tile (round 3), and the amax pass
  walking its tiles from the last one back (round 4: the end of x, written last by its producer, may still be in
  L2, and the quantize pass then starts from the front, which the amax pass read last).
- Per-token scaling (round 5): the columnwise copy's e4m3 bytes made in the row phase with each (chunk group,
  column) scale from shared memory and transposed through the byte tile, as per-group scaling does, instead of an
  fp32 tile scaled in the column phase (-DSCALEMM_GQ_TOKEN_FP32_TILE=1); two tiles per CTA or one
  (-DSCALEMM_GQ_TOKEN_TWO_TILES=0).
- Per-token scaling (round 6): two 64-column tiles per CTA (both tiles' loads first), the fp32 tile used by one
  after the other (-DSCALEMM_GQ_TOKEN_TWO_TILES=0: one tile), compiled for 4 or 3 CTAs per SM
  (-DSCALEMM_GQ_TOKEN_BLOCKS=3).
- Round 7: the loads of x (quant_numerics.cuh load8, both passes) with an L2 prefetch-size hint (ld.global.nc
  .L2::256B / .L2::128B, optionally .L1::no_allocate; -DSCALEMM_LOAD_HINT=1/3/2) against plain __ldg.
- Round 8: per-token scaling of 16-bit inputs: the row phase keeps the raw values in a 16 KB tile (128-byte rows,
  16-byte chunks swizzled) instead of fp32 values in 32 KB, and each column-phase thread reads one 4-byte word per
  row (two columns) instead of one float: half the shared-memory loads (-DSCALEMM_GQ_TOKEN_HALF_TILE=0: the fp32
  tile); compiled for 4 CTAs per SM (62 registers), 1 (72 registers, 3 per SM) or 5 (-DSCALEMM_GQ_TOKEN_BLOCKS).
- Round 9: the group table (group_table_kernel, one block) from 128 threads where G <= 128, against 1024 for every G
  (-DSCALEMM_GQ_TABLE_SMALL=0): each block scan sums the warps' totals serially, 3 steps instead of 31.
- The cast-then-transpose quantize pass (both copies, per-group scaling) over 2 or 4 64-column tiles per CTA
  (-DSCALEMM_GQ_CAST_TILES=n: every tile's loads issued before the first is converted; one prelude per n tiles),
  optionally compiled for 4 CTAs per SM (-DSCALEMM_GQ_MIN_BLOCKS=4).

  python3 perf/results/h200/gq_warp_search/ab.py --build [--round N]
  python3 perf/results/h200/gq_warp_search/ab.py --out OUT [--round N]
Rounds 1 and 2 with experiment.diff applied to 25d4c4d; round 3 with experiment3.diff applied to 0b570ce; round 4
with experiment4.diff applied to ab0af2b; rounds 5, 6 and 7 (the default) with experiment5/6/7.diff applied to
1d4f66b (round 5's "bytes" and round 6's "tok2" are their diffs' defaults, not the kept code; round 7's "ldg" is
plain __ldg, the kept code); round 8 with experiment8.diff applied to the commit that added the 1500-group test;
round 9 (the default) with experiment9.diff applied to the commit after the final runs. README.txt has the results.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
from grouped_quant_builds import Experiment, main  # noqa: E402

ROUND1 = Experiment(  # warp search and the amax pass's ring (ab_round1.txt)
    new="warp",
    builds={"search": ("SCALEMM_GQ_WARP_SEARCH=0",),
            "ring3": ("SCALEMM_GSTATS_RING=3",),
            "ring6r8": ("SCALEMM_GSTATS_RING=6", "SCALEMM_GSTATS_ROWS=8"),
            "ring3r8": ("SCALEMM_GSTATS_RING=3", "SCALEMM_GSTATS_ROWS=8")},
    delayed_per_build=True,
    step_builds=("warp", "search", "ring3", "ring6r8"))

ROUND2 = Experiment(  # column tiles per CTA of the cast-then-transpose pass (ab_round2.txt)
    new="tiles1",
    builds={"tiles2": ("SCALEMM_GQ_CAST_TILES=2",),
            "tiles4": ("SCALEMM_GQ_CAST_TILES=4",),
            "tiles2b4": ("SCALEMM_GQ_CAST_TILES=2", "SCALEMM_GQ_MIN_BLOCKS=4")},
    modes=(("tensor", True),),
    delayed_per_build=True,
    step_builds=("tiles1", "tiles2", "tiles4", "tiles2b4"))

ROUND3 = Experiment(  # the columnwise stores from one address per tile (ab_round3.txt); experiment3.diff
    new="stores",
    builds={"old stores": ("SCALEMM_GQ_STORE_OLD=1",)},
    modes=(("tensor", True),),
    delayed_per_build=True)

ROUND4 = Experiment(  # the amax pass from the last tile back (ab_round4.txt); experiment4.diff
    new="reverse",
    builds={"forward": ("SCALEMM_GSTATS_REVERSE=0",)})

ROUND5 = Experiment(  # per-token: the columnwise bytes made in the row phase, through a byte tile (ab_round5.txt)
    new="bytes",
    builds={"fp32 tile": ("SCALEMM_GQ_TOKEN_FP32_TILE=1",), "bytes 1 tile": ("SCALEMM_GQ_TOKEN_TWO_TILES=0",)},
    modes=(("token", True), ("tensor", True)),
    step_builds=("bytes", "fp32 tile", "bytes 1 tile"))

ROUND6 = Experiment(  # per-token: two 64-column tiles per CTA through one fp32 tile in turn (ab_round6.txt)
    new="tok2",
    builds={"tok1": ("SCALEMM_GQ_TOKEN_TWO_TILES=0",), "tok2b3": ("SCALEMM_GQ_TOKEN_BLOCKS=3",)},
    modes=(("token", True),),
    step_builds=("tok2", "tok1", "tok2b3"))

ROUND7 = Experiment(  # L2 prefetch-size hints on the loads of x (ab_round7.txt)
    new="ldg",
    builds={"L2::256B": ("SCALEMM_LOAD_HINT=1",), "no_allocate L2::256B": ("SCALEMM_LOAD_HINT=2",),
            "L2::128B": ("SCALEMM_LOAD_HINT=3",)},
    delayed_per_build=True,
    step_builds=("ldg", "L2::256B", "no_allocate L2::256B"))

ROUND8 = Experiment(  # per-token, 16-bit inputs: the raw values in a half-size tile, column pairs (ab_round8.txt)
    new="half b4",
    builds={"fp32 tile": ("SCALEMM_GQ_TOKEN_HALF_TILE=0",), "half b1": ("SCALEMM_GQ_TOKEN_BLOCKS=1",),
            "half b5": ("SCALEMM_GQ_TOKEN_BLOCKS=5",)},
    modes=(("token", True), ("tensor", True)),
    step_builds=("half b4", "fp32 tile", "half b5"))

ROUND9 = Experiment(  # the group table from a 128-thread block for G <= 128 (ab_round9.txt)
    new="table128",
    builds={"table1024": ("SCALEMM_GQ_TABLE_SMALL=0",)})

if __name__ == "__main__":
    rnd = "9"
    if "--round" in sys.argv:
        i = sys.argv.index("--round")
        rnd = sys.argv[i + 1]
        del sys.argv[i:i + 2]
    main({"1": ROUND1, "2": ROUND2, "3": ROUND3, "4": ROUND4, "5": ROUND5, "6": ROUND6, "7": ROUND7,
          "8": ROUND8, "9": ROUND9}[rnd])
