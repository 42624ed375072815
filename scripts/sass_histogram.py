"""Opcode histogram of the kernels in a JIT-built .so (needs cuobjdump): what an encode costs.

    python scripts/sass_histogram.py KERNEL.so [NAME_SUBSTRING ...]

With SASS_DUMP=path, the full SASS of the matching kernels is written there too.
"""
import os
import collections
import re
import subprocess
import sys


def main():
    so, subs = sys.argv[1], sys.argv[2:]
    text = subprocess.run(["cuobjdump", "-sass", so], capture_output=True, text=True).stdout
    funcs = re.split(r"\n\s*Function : ", text)[1:]
    for f in funcs:
        name = f.split("\n", 1)[0].strip()
        demangled = subprocess.run(["c++filt", name], capture_output=True, text=True).stdout.strip()
        if subs and not any(s in demangled for s in subs):
            continue
        ops = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", f)
        hist = collections.Counter(ops)
        if os.environ.get("SASS_DUMP"):
            with open(os.environ["SASS_DUMP"], "a") as fh:
                fh.write(f"\n===== {demangled}\n{f}")
        print(f"\n{demangled}\n  {len(ops)} instructions: " +
              ", ".join(f"{op} {n}" for op, n in hist.most_common(28)))


if __name__ == "__main__":
    main()
