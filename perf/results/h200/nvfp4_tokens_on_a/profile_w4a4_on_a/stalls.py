"""Stall samples and instruction mix of the last kernel in an ncu source-page CSV (device_run.sh's profile stage:
ncu-<kernel>-sass.csv, here gzipped): python3 stalls.py ncu-w4a4_on_a-sass.csv.gz"""
import collections
import csv
import gzip
import sys


def num(x):
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0


def main(path):
    opener = gzip.open if path.endswith(".gz") else open
    kernels, cur = [], None
    for r in csv.reader(opener(path, "rt")):
        if r and r[0] == "Kernel Name":
            cur = {"name": r[1], "rows": []}
            kernels.append(cur)
        elif r and r[0] == "Address":
            cur["hdr"] = {n: i for i, n in enumerate(r)}
        elif cur is not None and r:
            cur["rows"].append(r)
    k = kernels[-1]
    ix = k["hdr"]
    stalls = [n for n in ix if n.startswith("stall_") and "Not Issued" not in n]
    samples = sum(num(r[ix["Warp Stall Sampling (All Samples)"]]) for r in k["rows"])
    tot = collections.Counter()
    for r in k["rows"]:
        for c in stalls:
            tot[c] += num(r[ix[c]])
    print(f"{k['name'][:100]}\n{samples:.0f} samples")
    for c, v in tot.most_common(10):
        print(f"  {c:24s}{v:8.0f} {100 * v / samples:5.1f}%")
    print("top instructions by samples (two main reasons):")
    for r in sorted(k["rows"], key=lambda r: -num(r[ix["Warp Stall Sampling (All Samples)"]]))[:15]:
        why = sorted(((num(r[ix[c]]), c) for c in stalls), reverse=True)[:2]
        print(f"  {num(r[ix['Warp Stall Sampling (All Samples)']]):6.0f}  {r[1][:56]:56s} {why}")
    mix = collections.Counter()
    for r in k["rows"]:
        words = r[1].split()
        op = words[1] if words and words[0].startswith("@") and len(words) > 1 else (words[0] if words else "")
        mix[op.split(".")[0]] += num(r[ix["Instructions Executed"]])
    print("executed warp instructions by opcode:", ", ".join(f"{o} {v / 1e6:.2f}M" for o, v in mix.most_common(16)))


if __name__ == "__main__":
    main(sys.argv[1])
