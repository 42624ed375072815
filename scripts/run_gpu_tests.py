"""Run GPU tests in N pytest processes side by side, so that the kernels they JIT-build on first use compile in
parallel (one nvcc each) instead of one after another: on a bare device machine with a cold JIT cache a test file
that launches 20 kernels otherwise spends most of its time compiling.

  python3 scripts/run_gpu_tests.py --shards 12 tests/test_grouped_gemm_gpu.py tests/test_train_gpu.py -k "not convergence"

Everything after the options goes to pytest (files, -k, -m; `-m gpu` is added when no -m is given). The tests are
collected once and dealt to the shards in turn; each shard's output is written to --log-dir (default: a temporary
directory, and all of them in one file, shards.log, for a device call that brings back only a few files) and its
summary line printed, with the failures' lines (pytest's, at a width that keeps the error's type). The kernel
cache's file locks keep two shards from building the same kernel twice (the second waits for the first).

Shards share the GPU's memory: tests with large tensors in several shards at once can run out of it
(torch.OutOfMemoryError) where each passes alone. --rerun-failed runs the tests that failed in the shards once more,
in one process after the shards, and reports them apart. A shard still running at --timeout is stopped; what its
tests did until then is read from pytest's progress characters (a stopped pytest prints no summary), and the test
running at the limit and those after it are listed by name. Exit status: 0 when every test passed, in its shard or
(with --rerun-failed) in the rerun.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import time


def collect(pytest_args: list[str]) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          *pytest_args], capture_output=True, text=True)
    ids = [line.strip() for line in out.stdout.splitlines() if "::" in line]
    if out.returncode not in (0, 5) or not ids:  # 5: nothing collected
        sys.stdout.write(out.stdout[-4000:] + out.stderr[-4000:])
    return ids


PROGRESS = {".": "passed", "F": "failed", "E": "error", "s": "skipped", "x": "xfailed", "X": "xpassed"}


def progress(lines: list[str]) -> list[str]:
    """The outcomes, in order, of a `pytest -q` run from its progress lines ("..F.s   [ 40%]", the last one maybe
    cut short), one per test that ended (an error in a passed test's teardown would add one more)."""
    out = []
    for line in lines:
        m = re.fullmatch(r"([.FEsxX]+)\s*(\[\s*\d+%\])?", line.strip())
        if m:
            out += [PROGRESS[c] for c in m.group(1)]
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shards", type=int, default=os.cpu_count() or 1)
    p.add_argument("--log-dir", default=None)
    p.add_argument("--timeout", type=float, default=1200,
                   help="seconds for the whole run: shards still running then are stopped, and reported")
    p.add_argument("--rerun-failed", action="store_true",
                   help="run the tests that failed in the shards again, alone in one process (within --timeout)")
    args, pytest_args = p.parse_known_args(argv)
    if "-m" not in pytest_args:
        pytest_args = ["-m", "gpu", *pytest_args]
    ids = collect(pytest_args)
    if not ids:
        print("no tests collected")
        return 1
    # -k / -m stay for each shard (they select among the given ids anyway); the files are replaced by the ids
    options = [a for i, a in enumerate(pytest_args)
               if a.startswith("-") or (i > 0 and pytest_args[i - 1] in ("-k", "-m"))]
    shards = [ids[i::args.shards] for i in range(min(args.shards, len(ids)))]
    log_dir = args.log_dir or tempfile.mkdtemp(prefix="scalemm-gpu-tests-")
    os.makedirs(log_dir, exist_ok=True)
    env = {**os.environ, "COLUMNS": "240"}  # pytest's short summary then keeps the error's type and message
    pytest = [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", *options]
    procs = []
    for i, shard in enumerate(shards):
        log = open(os.path.join(log_dir, f"shard-{i}.log"), "w")
        procs.append((subprocess.Popen([*pytest, *shard], stdout=log, stderr=subprocess.STDOUT, env=env), log))
    totals, failed, failed_ids, texts = collections.Counter(), False, [], []
    unexplained = False  # a shard that ended badly without naming its failures (a crash, an internal error)
    deadline = time.monotonic() + args.timeout
    for i, (proc, log) in enumerate(procs):
        try:
            rc = proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rc = "timeout"
        log.close()
        text = open(log.name).read()
        texts.append(f"===== shard {i} ({log.name}) =====\n{text}")
        lines = text.strip().splitlines()
        summary = lines[-1] if lines else "(no output)"
        if rc == "timeout":
            outcomes = progress(lines)  # a stopped pytest prints no summary: read its progress characters
            found = collections.Counter(outcomes)
            left = shards[i][len(outcomes):]
            summary = (f"stopped at the time limit ({args.timeout:.0f} s) after " +
                       (", ".join(f"{n} {w}" for w, n in found.items()) or "no test ended"))
            found.update({"timed out (shards)": 1, "not run (stopped)": len(left)})
        else:
            found = collections.Counter({w: int(n) for n, w in
                                         re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", summary)})
        totals.update(found)
        print(f"shard {i}: {summary}  [{log.name}]")
        if rc == "timeout":
            for test, outcome in zip(shards[i], outcomes):
                if outcome not in ("passed", "skipped", "xfailed"):
                    print(f"  {outcome.upper()} {test}")
            for j, test in enumerate(left):
                print(f"  {'RUNNING AT THE LIMIT' if j == 0 else 'NOT RUN'} {test}")
        named = 0
        for line in lines:
            if line.startswith(("FAILED", "ERROR")):
                print("  " + line)
                failed_ids.append(line.split(" ", 1)[1].split(" - ", 1)[0])
                named += 1
        unexplained |= rc not in (0, 5) and (rc != 1 or not named)  # pytest's 1: tests failed, and said which
        failed |= rc not in (0, 5)
    with open(os.path.join(log_dir, "shards.log"), "w") as f:
        f.write("\n".join(texts))
    order = ("passed", "failed", "error", "errors", "skipped", "xfailed", "xpassed", "deselected", "timed out (shards)",
             "not run (stopped)")
    print(f"{len(ids)} tests in {len(shards)} shards: " + ", ".join(f"{totals[w]} {w}" for w in order if totals[w]))
    if not (failed and args.rerun_failed and failed_ids and not unexplained):
        return 1 if failed else 0  # (a shard stopped at the time limit counts as unexplained: its rc is not 1)
    # the failures once more, alone (nothing else on the GPU): what passes here failed for want of shared resources
    # (memory) or is flaky; the report keeps both results
    left = deadline - time.monotonic()
    try:
        rerun = subprocess.run([*pytest, *failed_ids], capture_output=True, text=True, env=env, timeout=max(left, 1))
    except subprocess.TimeoutExpired:
        print(f"rerun of the {len(failed_ids)} failed tests: stopped at the time limit")
        return 1
    lines = rerun.stdout.strip().splitlines()
    print(f"rerun alone of the {len(failed_ids)} tests that failed in the shards: {lines[-1] if lines else '(no output)'}")
    for line in lines:
        if line.startswith(("FAILED", "ERROR")):
            print("  " + line)
    with open(os.path.join(log_dir, "shards.log"), "a") as f:
        f.write(f"\n===== rerun alone =====\n{rerun.stdout}{rerun.stderr}")
    return 0 if rerun.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
