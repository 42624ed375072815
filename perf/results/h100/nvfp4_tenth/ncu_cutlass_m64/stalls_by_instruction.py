"""Stall samples by reason and the hottest SASS instructions of an ncu source-page CSV (ncu -i REP --page source
--print-source sass --csv): python3 stalls_by_instruction.py sass.csv"""
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
hdr = rows[1]; data = rows[2:]
ix = {h: i for i, h in enumerate(hdr)}
stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
tot = sum(int(r[ix["Warp Stall Sampling (All Samples)"]]) for r in data)
print("samples", tot, "instructions", len(data))
agg = collections.Counter()
for r in data:
    for s in stalls: agg[s] += int(r[ix[s]])
print("by reason:", [(k, round(100*v/tot,1)) for k, v in agg.most_common(10)])
# hot instructions
hot = sorted(data, key=lambda r: -int(r[ix["Warp Stall Sampling (All Samples)"]]))[:25]
for r in hot:
    st = sorted(((int(r[ix[s]]), s[6:]) for s in stalls), reverse=True)[:3]
    print(f'{int(r[ix["Warp Stall Sampling (All Samples)"]]):5d} ex={int(r[ix["Instructions Executed"]]):7d} {r[ix["Address"]][-5:]} {r[ix["Source"]].strip()[:60]:60s} {st}')
# loop region: instructions executed count histogram
cnt = collections.Counter(int(r[ix["Instructions Executed"]]) for r in data)
print("most common exec counts:", cnt.most_common(8))
