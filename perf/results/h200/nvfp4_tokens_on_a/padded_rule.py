"""nvfp4_w4a16_on_a's picks against timings of both W4A16 kernels (ab.py --padded JSON: "w4a16_swapped" and
"w4a16_on_a" per point): python3 padded_rule.py padded.json flip.json flip2.json [--rows 256-511]
Prints the geomean speed of the rule's picks over the swapped kernel's, the same for the padding term without its
waves model and for the faster kernel at every point, and the points where the rule picked the slower by > 3%."""
import argparse
import json
import math

from scalemm.cutlass_kernels.configs import sm90


def main():
    p = argparse.ArgumentParser()
    p.add_argument("files", nargs="+")
    p.add_argument("--rows", default="256-511", help="weight rows to keep, lo-hi")
    args = p.parse_args()
    lo, hi = map(int, args.rows.split("-"))
    points = {}
    for f in args.files:
        for r in json.load(open(f))["rows"]:
            if lo <= r["N"] <= hi:
                points[(r["M"], r["N"], r["K"])] = (r["layer"], r["us"]["w4a16_swapped"] / r["us"]["w4a16_on_a"])

    def tile_rule(M, N, K):  # the forty-fifth session's rule: the swapped tile's condition alone
        sw = sm90.default_nvfp4_config(M, N, K)
        return sm90.nvfp4_tokens_on_a(M, N, K) and not sw.stream_k and sw.tile_n <= sm90.NVFP4_W4A16_ON_A_MAX_TOKEN_TILE

    def term_alone(M, N, K):  # the forty-sixth session's: the tile condition or the padding alone
        return tile_rule(M, N, K) or (sm90.nvfp4_tokens_on_a(M, N, K) and N >= sm90.NVFP4_W4A16_ON_A_PADDED_MIN_ROWS
                                      and sm90._weight_row_padding(N) >= sm90.NVFP4_W4A16_ON_A_MIN_ROW_PADDING)

    rules = {"nvfp4_w4a16_on_a": sm90.nvfp4_w4a16_on_a, "padding term alone": term_alone, "tile rule alone": tile_rule,
             "the faster at every point": lambda M, N, K: points[(M, N, K)][1] > 1}
    for name, rule in rules.items():
        picks = [(k, v) for k, v in points.items()]
        g = math.exp(sum(math.log(v[1]) for k, v in picks if rule(*k)) / len(picks))
        wrong = [(v[0], *k, round(v[1], 3)) for k, v in picks if rule(*k) != (v[1] > 1) and abs(v[1] - 1) > 0.03]
        print(f"{name:28s} {g:.4f}x the swapped kernel over {len(picks)} points; {len(wrong)} picks > 3% slower")
        if name == "nvfp4_w4a16_on_a":
            for w in wrong:
                print("   ", w)


if __name__ == "__main__":
    main()
