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
