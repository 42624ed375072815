"""perf/train_bench.py on CPU (--smoke: tiny shapes, the reference path): the JSON and, with --profile,
one profiled step per contender in train_profile.txt."""
import importlib.util
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "perf" / "train_bench.py"


def _load(name):
    """perf/train_bench.py loaded as module `name` (perf/ on sys.path while it imports)."""
    spec = importlib.util.spec_from_file_location(name, BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(BENCH.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH.parent))
    return module


def _run_bench(name, argv):
    """perf/train_bench.py's main(argv)."""
    _load(name).main(argv)


def test_smoke_run_writes_json_and_profiles(tmp_path):
    _run_bench("train_bench_under_test", ["--smoke", "--only", "moe", "--profile", "--out", str(tmp_path)])
    result = json.loads((tmp_path / "train_bench.json").read_text())
    contenders = [r["contender"] for r in result["rows"]]
    assert contenders[0] == "bf16" and "scalemm_fp8_rowwise" in contenders and "scalemm_nvfp4" in contenders
    assert all(r["ms"] > 0 for r in result["rows"])
    profile = (tmp_path / "train_profile.txt").read_text()
    for n in contenders:  # one table per contender, with the scalemm ops visible in the scalemm ones
        assert f"experts, 64 tok: {n}\n" in profile
    assert "scalemm::train_grouped_gemm" in profile


def test_smoke_run_of_the_expert_layers_alone(tmp_path):
    """--only moe-layers: gate_up and down each alone, every contender, against bf16 with an SQNR."""
    _run_bench("train_bench_layers_under_test", ["--smoke", "--only", "moe-layers", "--out", str(tmp_path)])
    rows = json.loads((tmp_path / "train_bench.json").read_text())["rows"]
    assert [r["block"] for r in rows[::len(rows) // 2]] == ["qwen3-30b-a3b gate_up layer, 64 tok",
                                                           "qwen3-30b-a3b down layer, 64 tok"]
    fp8 = [r for r in rows if r["contender"] == "scalemm_fp8_rowwise"]
    assert len(fp8) == 2 and all(r["ms"] > 0 and r["output_sqnr_db_vs_bf16"] > 20 for r in fp8)


def test_contenders_filter_and_aligned_groups(tmp_path):
    """--contenders keeps bf16 and the matching contenders; --group-multiple 16 rounds every expert's routed rows
    up to 16 (empty experts stay empty), the groups torchao's FP8 grouped GEMM needs."""
    _run_bench("train_bench_filter_under_test", ["--smoke", "--only", "moe", "--contenders", "tensorwise",
                                                 "--group-multiple", "16", "--out", str(tmp_path)])
    rows = json.loads((tmp_path / "train_bench.json").read_text())["rows"]
    assert [r["contender"] for r in rows] == ["bf16", "scalemm_fp8_tensorwise"]
    module = _load("train_bench_sizes_under_test")
    raw, aligned = module.moe_sizes(64, 16, 4, 1), module.moe_sizes(64, 16, 4, 16)
    assert int(raw.sum()) == 64 * 4
    assert ((aligned % 16 == 0) & (aligned >= raw) & (aligned - raw < 16)).all()
    assert ((aligned == 0) == (raw == 0)).all()


def test_activation_option_is_shared_by_every_contender(tmp_path, monkeypatch):
    """--activation: every contender's block (bf16's too) runs the same SwiGLU, scalemm.swiglu by default or torch's
    eager F.silu(gate) * up; the JSON records which."""
    import scalemm
    import torch.nn.functional as F
    calls = {"scalemm": 0, "torch": 0}
    swiglu, silu = scalemm.swiglu, F.silu

    def counted_swiglu(h):
        calls["scalemm"] += 1
        return swiglu(h)

    def counted_silu(x, *args, **kwargs):
        calls["torch"] += 1
        return silu(x, *args, **kwargs)
    monkeypatch.setattr(scalemm, "swiglu", counted_swiglu)
    monkeypatch.setattr(F, "silu", counted_silu)
    for act in ("scalemm", "torch"):
        calls.update(scalemm=0, torch=0)
        out = tmp_path / act
        _run_bench(f"train_bench_act_{act}_under_test", ["--smoke", "--only", "moe", "--contenders", "rowwise",
                                                         "--activation", act, "--out", str(out)])
        result = json.loads((out / "train_bench.json").read_text())
        assert result["options"]["activation"] == act
        assert [r["contender"] for r in result["rows"]] == ["bf16", "scalemm_fp8_rowwise"]
        other = "torch" if act == "scalemm" else "scalemm"
        assert calls[act] > 0 and calls[other] == 0, calls
