"""perf/gemm_sweep.py's reporting on CPU: the GPU timings are replaced by made-up numbers, so the table,
the decode / prefill geomeans per accumulation mode, --tuned and the JSON can be checked without a GPU."""
import importlib.util
import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import scalemm

gemm_module = sys.modules["scalemm.gemm"]  # (scalemm.gemm is the function)
SWEEP = Path(__file__).resolve().parents[1] / "perf" / "gemm_sweep.py"


@pytest.fixture
def sweep(monkeypatch):
    spec = importlib.util.spec_from_file_location("gemm_sweep_under_test", SWEEP)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def time_point(M, N, K, fast_accum, configs=(), with_bf16=True, tuned=False, num_sms=132):
        # scalemm 2x torch at decode, 0.5x at prefill; full accumulation 1.5x slower on both sides;
        # the tuned config 10% faster than the heuristic's
        base = 10.0 * (1 if fast_accum else 1.5)
        ours = base / 2 if M <= 128 else base * 2
        r = {"scalemm": ours, "torch_rowwise": base, "torch_tensorwise": base, "torch_bf16": 3 * base}
        if tuned:
            r["scalemm_tuned"] = ours / 1.1
        return r

    def time_point_nvfp4(M, N, K, num_sms=132, torchao=None):
        # bf16 30 us; W4A16 3x faster at decode, 0.9x at prefill; W4A4 a little slower; skinny only <= 64
        bf16 = 30.0
        r = {"torch_bf16": bf16, "nvfp4_w4a16": bf16 / (3 if M <= 64 else 0.9),
             "nvfp4_w4a4": bf16 / (2.5 if M <= 64 else 0.85), "scalemm_fp8": bf16 / 2}
        if M <= 64:
            r["nvfp4_skinny"] = bf16 / 4
        if M <= 16:
            r["torchao_w4a16"] = bf16 * 2
        return r

    monkeypatch.setattr(module, "time_point", time_point)
    monkeypatch.setattr(module, "time_point_nvfp4", time_point_nvfp4)
    monkeypatch.setattr(module, "torchao_nvfp4", lambda: None)
    monkeypatch.setattr(module, "eager_overhead", lambda: {"scalemm": 20.0, "torch_rowwise": 19.0})
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda i: SimpleNamespace(name="Fake H100", multi_processor_count=132))
    monkeypatch.setattr(scalemm, "tune", lambda shapes, fast_accum: tuned_calls.append((list(shapes), fast_accum)))
    monkeypatch.setattr(gemm_module, "resolve_config",
                        lambda M, N, K, **kw: scalemm.cutlass_kernels.GemmConfig(128, 256, 128, 1, 2, swizzle=2))
    tuned_calls = []
    module.tuned_calls = tuned_calls
    return module


def _run(module, monkeypatch, *args):
    monkeypatch.setattr(sys, "argv", ["gemm_sweep.py", *args])
    module.main()


def test_sweep_reports_decode_and_prefill_per_mode(sweep, monkeypatch, tmp_path, capsys):
    _run(sweep, monkeypatch, "--out", str(tmp_path), "--quick", "--formats", "fp8")
    out = capsys.readouterr().out
    data = json.loads((tmp_path / "gemm_sweep.json").read_text())
    fast, full = data["summary"]["fast"], data["summary"]["full"]
    for s in (fast, full):
        assert s["decode_geomean_vs_rowwise"] == pytest.approx(2.0)
        assert s["prefill_geomean_vs_rowwise"] == pytest.approx(0.5)
        assert s["decode_points"] == 5 and s["prefill_points"] == 4  # llama3-8b.qkv at 1..128, 1024..16384 + square
    n = fast["decode_points"] + fast["prefill_points"]
    assert fast["geomean_speedup_vs_rowwise"] == pytest.approx(math.exp((5 * math.log(2) + 4 * math.log(0.5)) / n))
    assert {r["fast_accum"] for r in data["rows"]} == {True, False} and not data["tuned"]
    # both modes on one line per point, then a geomean table with a column per mode
    line = next(x for x in out.splitlines() if x.startswith("llama3-8b.qkv") and " 16 " in x)
    assert "fast accum" not in line and line.count("|") == 2 and "t64x16x256" in line and "t64x16x128" in line
    header = next(x for x in out.splitlines() if x.startswith("layer"))
    assert header.index("fast accum: config") < header.index("full accum: config") < header.index("bf16")
    table = out[out.index("Geomean speed-up"):]
    assert "decode (M <= 128)" in table and "prefill (M >= 1024)" in table
    assert "tuned" not in table


def test_sweep_tuned_runs_tune_first_and_compares(sweep, monkeypatch, tmp_path, capsys):
    _run(sweep, monkeypatch, "--out", str(tmp_path), "--quick", "--tuned", "--no-slow-accum", "--formats", "fp8")
    out = capsys.readouterr().out
    (shapes, modes), = sweep.tuned_calls
    assert modes == (True,) and (16, 6144, 4096) in shapes and (8192, 8192, 8192) in shapes
    data = json.loads((tmp_path / "gemm_sweep.json").read_text())
    assert data["tuned"] and set(data["summary"]) == {"fast", "eager_us_per_call_M1_4096"}
    s = data["summary"]["fast"]
    assert s["tuned_over_heuristic"] == pytest.approx(1.1)
    assert s["decode_tuned_geomean_vs_rowwise"] == pytest.approx(2.2)
    assert s["prefill_tuned_geomean_vs_rowwise"] == pytest.approx(0.55)
    row = data["rows"][0]
    assert row["tuned_config"] == "t128x256x128_c1x2_coop_s2" and row["us"]["scalemm_tuned"] < row["us"]["scalemm"]
    assert "tuned over heuristic: decode" in out


def test_sweep_nvfp4_rows_and_targets(sweep, monkeypatch, tmp_path, capsys):
    """--formats fp8,nvfp4 (the default): the NVFP4 table after the FP8 one, geomeans vs bf16 per target
    group (decode M <= 16 with N, K >= 4096; M = 64; prefill M >= 4096) and W4A16 vs torchao."""
    _run(sweep, monkeypatch, "--out", str(tmp_path), "--quick", "--no-slow-accum")
    out = capsys.readouterr().out
    data = json.loads((tmp_path / "gemm_sweep.json").read_text())
    assert data["rows"] and data["nvfp4"]["rows"]
    s = data["nvfp4"]["summary"]
    assert s["decode"]["points"] == 2  # llama3-8b.qkv (6144 x 4096) at M = 1, 16
    assert s["decode"]["nvfp4_w4a16"]["geomean_vs_bf16"] == pytest.approx(3.0)
    assert s["decode"]["nvfp4_skinny"]["min_vs_bf16"] == pytest.approx(4.0)
    assert s["decode"]["w4a16_speedup_vs_torchao"]["geomean"] == pytest.approx(6.0)
    assert s["m64"]["points"] == 1 and "torchao_w4a16" not in s["m64"]
    assert s["prefill"]["nvfp4_w4a4"]["geomean_vs_bf16"] == pytest.approx(0.85)
    assert "nvfp4_skinny" not in s["prefill"]
    assert (tmp_path / "gemm_sweep_nvfp4.png").exists()
    assert out.index("NVFP4-weight GEMM") < out.index("NVFP4 geomean speed-up")
    assert "scalemm W4A16 vs torchao: geomean 6.00x" in out


def test_sweep_nvfp4_only(sweep, monkeypatch, tmp_path, capsys):
    _run(sweep, monkeypatch, "--out", str(tmp_path), "--quick", "--formats", "nvfp4")
    data = json.loads((tmp_path / "gemm_sweep.json").read_text())
    assert "rows" not in data and data["nvfp4"]["summary"]["all"]["points"] == len(data["nvfp4"]["rows"])
    with pytest.raises(SystemExit):
        _run(sweep, monkeypatch, "--out", str(tmp_path), "--formats", "int4")


def test_sweep_layers_filter(sweep, monkeypatch, tmp_path):
    """--layers keeps the points whose label starts with one of the prefixes; a filter that keeps none exits."""
    _run(sweep, monkeypatch, "--out", str(tmp_path), "--m-min", "1024", "--layers", "llama3-8b.o,square",
         "--formats", "fp8", "--no-slow-accum")
    data = json.loads((tmp_path / "gemm_sweep.json").read_text())
    assert {(r["layer"], r["M"]) for r in data["rows"]} == {
        ("llama3-8b.o", 1024), ("llama3-8b.o", 4096), ("llama3-8b.o", 16384), ("square", 8192)}
    with pytest.raises(SystemExit, match="matches no point"):
        _run(sweep, monkeypatch, "--out", str(tmp_path), "--layers", "gpt-5")


def test_prefill_model_fit_recovers_its_constants(capsys):
    """perf/fp8_prefill_model.py's fit, on times made up from PREFILL_TILE_MODEL itself: it recovers every kernel's
    a, b, c, the refitted rule picks what sm90.prefill_config picks, and the summary names the rule's geomean."""
    path = SWEEP.parent / "fp8_prefill_model.py"
    spec = importlib.util.spec_from_file_location("fp8_prefill_model_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from scalemm.cutlass_kernels.configs import sm90
    rows = []
    for _, M, N, K in module.points("both", 4e12):
        us = {e[0].label(): sm90.predicted_prefill_us(*e, M, N, K, 132) for e in sm90.PREFILL_TILE_MODEL}
        us.update(scalemm=us[sm90.prefill_config(M, N, K, 132).label()], torch_rowwise=100.0, torch_tensorwise=100.0)
        rows.append({"layer": "x", "M": M, "N": N, "K": K, "us": us})
    assert len(rows) > 100
    fitted = module.fit(rows)
    for cfg, a, b, c in sm90.PREFILL_TILE_MODEL:
        _, fa, fb, fc = fitted[cfg.label()]
        assert fa == pytest.approx(a, rel=1e-6) and fb == pytest.approx(b, rel=1e-5, abs=1e-6)
        assert fc == pytest.approx(c, rel=1e-5, abs=1e-6)
    summary = module.summarize(rows, fitted)
    assert summary["refitted rule"] == summary["rule (scalemm)"]  # the rule of sm90.prefill_config, refitted or not
    # ... which leaves ping-pong out where it has at most one tile per SM, below the model's own least time there
    assert summary["best kernel of the model"]["geomean"] >= summary["rule (scalemm)"]["geomean"]
    assert "rule (scalemm)" in capsys.readouterr().out
    # a kernel timed beside the model's (--extra), 10% faster per wave than ping-pong 128x128 in clusters of 2 along
    # N: fitted from its own times with its N tiles rounded to whole clusters, and picked where it is predicted fastest
    extra = module.config_of_key("t128x128x128_c1x2_ping")
    assert (extra.cluster_m, extra.cluster_n, extra.schedule) == (1, 2, "pingpong")
    _, a, b, c = sm90.PREFILL_TILE_MODEL[0]
    for r in rows:
        r["us"][extra.label()] = sm90.predicted_prefill_us(extra, a, 0.9 * b, c, r["M"], r["N"], r["K"], 132)
    assert [k.label() for k in module.extra_kernels(rows)] == [extra.label()]
    fitted = module.fit(rows, [extra])
    assert fitted[extra.label()][2] == pytest.approx(0.9 * b, rel=1e-5)
    summary = module.summarize(rows, fitted)
    assert summary["refitted rule"] == summary["rule (scalemm)"]
    assert summary["best kernel, extra included"]["geomean"] >= summary["refitted rule + extra kernels"]["geomean"]
    assert summary["refitted rule + extra kernels"]["geomean"] > summary["refitted rule"]["geomean"]
    with pytest.raises(SystemExit, match="--extra"):
        module.config_of_key("t128x128x128_c1x2_ping_swap")
    assert module.config_of_key("t128x128x128_c1x1_coop_sk").stream_k  # stream-K kernels too
    assert module.config_of_key("t128x128x128_c1x1_coop_sk").key() == "t128x128x128_c1x1_coop_sk"


def test_prefill_model_point_sets(monkeypatch):
    """perf/fp8_prefill_model.py's point sets beyond the sweep: the narrow layers (NARROW_LAYERS at 1024-8192 tokens),
    the sweep's and the narrow layers at 256-768 tokens ("mid"), --tokens for either, and nothing else takes --tokens."""
    path = SWEEP.parent / "fp8_prefill_model.py"
    spec = importlib.util.spec_from_file_location("fp8_prefill_model_points", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    narrow = module.points("narrow", 4e12)
    assert len(narrow) == 4 * len(module.NARROW_LAYERS) and {p[1] for p in narrow} == {1024, 2048, 4096, 8192}
    assert all(label.startswith("narrow.") and N <= 2048 for label, _, N, _ in narrow)
    mid = module.points("mid", 4e12)
    assert {p[1] for p in mid} == {256, 384, 512, 768}
    sweep_layers = {label for label, M, _, _ in module.points("sweep", 4e12)}
    assert {label for label, *_ in mid} == (sweep_layers | {label for label, *_ in narrow}) - {"square"}
    assert {p[1] for p in module.points("mid", 4e12, (144, 240))} == {144, 240}
    assert {p[1] for p in module.points("narrow", 4e12, (3000,))} == {3000}
    assert module.points("both", 4e12) == module.points("sweep", 4e12) + module.points("models", 4e12)
    for bad in (["--points", "sweep", "--tokens", "512"], ["--points", "mid", "--tokens", "5x"],
                ["--points", "mid", "--tokens", "0"]):
        monkeypatch.setattr(sys, "argv", ["fp8_prefill_model.py", *bad])
        with pytest.raises(SystemExit, match="--tokens"):
            module.main()
