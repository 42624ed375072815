"""python -m scalemm: argument handling (no GPU needed; the demo runs its CPU path here)."""
import pytest
import torch

from scalemm.__main__ import main


def test_no_command_prints_help_and_exits_2(capsys):
    assert main([]) == 2
    err = capsys.readouterr().err
    assert "usage: python -m scalemm" in err and "demo" in err and "build" in err and "info" in err
    assert "error: choose a command (demo, build, info, sweep, tune)" in err


@pytest.mark.parametrize("args,msg", [
    (["-m", "0"], "argument -m: must be a positive integer, got 0"),
    (["-m", "-3"], "argument -m: must be a positive integer, got -3"),
    (["-m", "x"], "argument -m: must be a positive integer, got 'x'"),
    (["-k", "40"], "argument -k: must be a positive multiple of 16, got 40"),
    (["-n", "12"], "argument -n: must be a positive multiple of 8, got 12"),
])
def test_demo_sizes_are_validated(args, msg, capsys):
    with pytest.raises(SystemExit) as e:
        main(["demo", *args])
    assert e.value.code == 2 and msg in capsys.readouterr().err


def test_build_jobs_is_validated(capsys):
    with pytest.raises(SystemExit) as e:
        main(["build", "--jobs", "0"])
    assert e.value.code == 2 and "argument --jobs: must be a positive integer, got 0" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU path of the demo")
def test_demo_runs_small_on_cpu(capsys):
    assert main(["demo", "-m", "5", "-n", "16", "-k", "32"]) == 0
    out = capsys.readouterr().out
    assert "FP8 per-token GEMM 5x16x32" in out and "nan" not in out


def test_run_gpu_tests_shards_a_selection(tmp_path):
    """scripts/run_gpu_tests.py: the selected tests dealt to shards run once each, the totals add up, and a
    failing test makes the exit status nonzero."""
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    case = tmp_path / "test_case.py"
    case.write_text("import pytest\n\n@pytest.mark.parametrize('i', range(5))\ndef test_ok(i):\n    assert i >= 0\n\n"
                    "def test_bad():\n    assert False\n")
    run = [sys.executable, str(root / "scripts" / "run_gpu_tests.py"), "--shards", "2", "--log-dir",
           str(tmp_path / "logs"), "-m", "not gpu", str(case)]
    got = subprocess.run(run, capture_output=True, text=True, cwd=tmp_path)
    assert got.returncode == 1, got.stdout + got.stderr
    assert "6 tests in 2 shards: 5 passed, 1 failed" in got.stdout
    assert "FAILED" in got.stdout and "test_bad" in got.stdout
    got = subprocess.run(run + ["-k", "ok"], capture_output=True, text=True, cwd=tmp_path)
    assert got.returncode == 0 and "5 tests in 2 shards: 5 passed" in got.stdout, got.stdout + got.stderr
    assert "===== shard 1" in (tmp_path / "logs" / "shards.log").read_text()  # every shard's log in one file


def test_run_gpu_tests_rerun_failed(tmp_path):
    """scripts/run_gpu_tests.py --rerun-failed: a test that fails in its shard but passes alone (here: it fails while
    a marker file is absent, and the first run creates it) is reported in both runs, and the exit status is 0; a test
    that fails again keeps it nonzero."""
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    mark = tmp_path / "second_try"
    case = tmp_path / "test_flaky.py"
    case.write_text("from pathlib import Path\nimport pytest\n\n@pytest.mark.parametrize('i', range(3))\ndef test_ok(i):\n"
                    f"    pass\n\ndef test_once():\n    m = Path({str(mark)!r})\n    if not m.exists():\n"
                    "        m.touch()\n        raise MemoryError('the first time')\n")
    run = [sys.executable, str(root / "scripts" / "run_gpu_tests.py"), "--shards", "2", "--rerun-failed",
           "--log-dir", str(tmp_path / "logs"), "-m", "not gpu", str(case)]
    got = subprocess.run(run, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert "4 tests in 2 shards: 3 passed, 1 failed" in got.stdout, got.stdout + got.stderr
    assert "MemoryError: the first time" in got.stdout  # the failure's type and message, not cut short
    assert "rerun alone of the 1 tests that failed in the shards: 1 passed" in got.stdout, got.stdout
    assert got.returncode == 0, got.stdout + got.stderr
    case.write_text(case.read_text() + "\ndef test_bad():\n    assert False\n")
    mark.unlink()
    got = subprocess.run(run, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert "rerun alone of the 2 tests that failed in the shards: 1 failed, 1 passed" in got.stdout, got.stdout
    assert got.returncode == 1
    # a shard that dies without naming its failures (here: the process exits mid-test) is never rescued by a rerun
    case.write_text(case.read_text().replace("def test_bad():\n    assert False\n",
                                             "def test_bad():\n    import os\n    os._exit(1)\n"))
    mark.unlink()
    got = subprocess.run(run, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert "rerun alone" not in got.stdout and got.returncode == 1, got.stdout


def test_run_gpu_tests_time_limit(tmp_path):
    """scripts/run_gpu_tests.py --timeout: shards still running at the limit are stopped and reported, with what the
    finished shards found, and the exit status is nonzero."""
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    case = tmp_path / "test_slow.py"
    case.write_text("import time\n\ndef test_quick():\n    pass\n\ndef test_slow():\n    time.sleep(60)\n")
    run = [sys.executable, str(root / "scripts" / "run_gpu_tests.py"), "--shards", "2", "--timeout", "8",
           "--log-dir", str(tmp_path / "logs"), "-m", "not gpu", str(case)]
    got = subprocess.run(run, capture_output=True, text=True, cwd=tmp_path, timeout=50)
    assert got.returncode == 1, got.stdout + got.stderr
    assert "stopped at the time limit" in got.stdout
    assert "2 tests in 2 shards: 1 passed, 1 timed out (shards), 1 not run (stopped)" in got.stdout, got.stdout
    # one shard: what ended before the limit counts (a stopped pytest prints no summary: its progress is read), the
    # failure is named, and the test running at the limit and those after it are listed
    case.write_text("import time\n\ndef test_a():\n    pass\n\ndef test_b():\n    assert False\n\n"
                    "def test_c():\n    pass\n\ndef test_slow():\n    time.sleep(60)\n\ndef test_z():\n    pass\n")
    got = subprocess.run([*run[:3], "1", *run[4:]], capture_output=True, text=True, cwd=tmp_path, timeout=50)
    assert got.returncode == 1, got.stdout + got.stderr
    assert "stopped at the time limit (8 s) after 2 passed, 1 failed" in got.stdout, got.stdout
    assert "5 tests in 1 shards: 2 passed, 1 failed, 1 timed out (shards), 2 not run (stopped)" in got.stdout, got.stdout
    assert "FAILED test_slow.py::test_b" in got.stdout and "RUNNING AT THE LIMIT test_slow.py::test_slow" in got.stdout
    assert "NOT RUN test_slow.py::test_z" in got.stdout, got.stdout
