"""The tuned-config cache (scalemm.tuned) and tuning (scalemm.tuning) on CPU: keys, lookup precedence over the heuristic, the file
under concurrent writers and corruption, shapes and candidates, the CLI; and one GPU test that tunes a
small shape and runs it."""
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import replace

import pytest
import torch

import scalemm
from scalemm import tuned, tuning
from scalemm.cutlass_kernels import configs
from scalemm.cutlass_kernels.configs import GemmConfig

gemm_module = sys.modules["scalemm.gemm"]  # (scalemm.gemm is the function)
BF16 = torch.bfloat16
H100 = "NVIDIA H100 80GB HBM3"
CUDA0 = torch.device("cuda", 0)
TUNED = GemmConfig(128, 128, 128, 1, 2, "cooperative", raster="n", swizzle=4)  # no heuristic picks it


@pytest.fixture
def cache(fresh_cache, fake_gpu):
    """An empty JIT cache (so an empty tuned-config file), an H100 faked, and no plans or table of
    another test's cache."""
    fake_gpu(capability=(9, 0), name=H100, num_sms=132)
    tuned.reload()
    yield fresh_cache
    tuned.reload()


def _entry(M, N, K, config=TUNED, *, fast_accum=True, out_dtype=BF16, gpu=f"{H100} (132 SMs)", arch="sm90", **rec):
    return tuned.make_entry("gemm", tuned.gemm_shape(M, N, K), config, gpu=gpu, arch=arch, fast_accum=fast_accum,
                             out_dtype=out_dtype, **rec)


def _resolve(M, N, K, fast_accum=True, out_dtype=BF16):
    return gemm_module.resolve_config(M, N, K, fast_accum=fast_accum, out_dtype=out_dtype, device=CUDA0)


# ---------------------------------------------------------------------------------------
# keys
# ---------------------------------------------------------------------------------------

def test_m_bucket():
    assert [tuned.m_bucket(M) for M in (1, 2, 3, 4, 5, 16, 17, 64, 65, 128, 129, 1000, 1024, 1025, 4096)] == \
        [1, 2, 4, 4, 8, 16, 32, 64, 128, 128, 256, 1024, 1024, 2048, 4096]
    for bad in (0, -1, 1.0, True):
        with pytest.raises(ValueError):
            tuned.m_bucket(bad)


def test_key_contents(fake_gpu):
    fake_gpu(name=H100, num_sms=132)
    fields = tuned.key_fields("gemm", tuned.gemm_shape(33, 6144, 4096), gpu=tuned.gpu_name(CUDA0), arch="sm90",
                               fast_accum=False, out_dtype=torch.float32)
    assert fields == {"gpu": "NVIDIA H100 80GB HBM3 (132 SMs)", "arch": "sm90", "scalemm": scalemm.__version__,
                      "op": "gemm", "dtypes": "e4m3->f32", "accum": "full", "m_bucket": 64, "N": 6144, "K": 4096}
    key = tuned.entry_key(fields)
    assert key == (f"gpu=NVIDIA H100 80GB HBM3 (132 SMs) | arch=sm90 | scalemm={scalemm.__version__} | op=gemm | "
                   "dtypes=e4m3->f32 | accum=full | m_bucket=64 | N=6144 | K=4096")
    k, e = _entry(33, 6144, 4096, fast_accum=False, out_dtype=torch.float32, us=1.5)
    assert k == key and e["fields"] == fields and e["us"] == 1.5 and e["label"] == TUNED.label()
    assert GemmConfig(**e["config"]) == TUNED  # the whole config, run-time knobs included


# ---------------------------------------------------------------------------------------
# lookup precedence
# ---------------------------------------------------------------------------------------

def test_cached_entry_overrides_the_heuristic(cache, monkeypatch):
    heuristic = configs.default_config(40, 4096, 4096, fast_accum=True)
    assert _resolve(40, 4096, 4096) == heuristic != TUNED  # empty cache: the heuristic
    tuned.store(dict([_entry(64, 4096, 4096)]))
    for M in (33, 40, 64):  # the bucket (32, 64]
        assert _resolve(M, 4096, 4096) == TUNED
    # anything else in the key differs: the heuristic
    assert _resolve(32, 4096, 4096) == configs.default_config(32, 4096, 4096)
    assert _resolve(65, 4096, 4096) == configs.default_config(65, 4096, 4096)
    assert _resolve(64, 4096, 4096, fast_accum=False) == configs.default_config(64, 4096, 4096, fast_accum=False)
    assert _resolve(64, 4096, 4096, out_dtype=torch.float32) == configs.default_config(64, 4096, 4096)
    assert _resolve(64, 4096, 4104) == configs.default_config(64, 4096, 4104)
    # gemm's plan (what it launches) takes it; an explicit config= wins over it
    monkeypatch.setattr(gemm_module, "_launcher", lambda spec: ("launcher", spec.name))
    cfg, _, launch, _ = gemm_module._plan(40, 4096, 4096, True, BF16, None, None, CUDA0)
    assert cfg == TUNED and TUNED.key() in launch[1]
    explicit = GemmConfig(64, 128, 128, 1, 1, "pingpong")
    assert gemm_module._plan(40, 4096, 4096, True, BF16, None, explicit, CUDA0)[0] == explicit
    # SCALEMM_TUNED=0: the heuristic alone
    monkeypatch.setenv("SCALEMM_TUNED", "0")
    assert _resolve(40, 4096, 4096) == heuristic


def test_chunked_promotion_entries_round_trip_and_older_entries_load(cache):
    """A tuned full-accumulation winner with scalemm's chunked promotion comes back with its promotion_chunks; an
    entry written before the field existed (no "promotion_chunks" key) loads as CUTLASS's promotion."""
    chunked = GemmConfig(128, 256, 128, 1, 1, "cooperative", stream_k=True, promotion_chunks=2)
    key, entry = _entry(4096, 8192, 8192, chunked, fast_accum=False)
    assert entry["config"]["promotion_chunks"] == 2
    old_key, old = _entry(8192, 8192, 8192, GemmConfig(128, 192, 128, 2, 1, "cooperative"), fast_accum=False)
    del old["config"]["promotion_chunks"]
    tuned.store({key: entry, old_key: old})
    tuned.reload()
    assert _resolve(4096, 8192, 8192, fast_accum=False) == chunked
    assert _resolve(8192, 8192, 8192, fast_accum=False) == GemmConfig(128, 192, 128, 2, 1, "cooperative")


GROUPED_TUNED = GemmConfig(128, 64, 128, 1, 1, "cooperative", swap_ab=True)


def _grouped_entry(T, G, N, K, config=GROUPED_TUNED, *, fast_accum=True, out_dtype=BF16):
    return tuned.make_entry("grouped_gemm", tuned.grouped_shape(T, G, N, K), config, gpu=f"{H100} (132 SMs)",
                             arch="sm90", fast_accum=fast_accum, out_dtype=out_dtype)


def test_grouped_entry_overrides_the_grouped_heuristic(cache, monkeypatch):
    grouped_module = sys.modules["scalemm.grouped"]

    def resolve(T, G, N=4096, K=7168, fast_accum=True):
        return grouped_module.resolve_grouped_config(T, G, N, K, fast_accum=fast_accum, out_dtype=BF16, device=CUDA0)

    heuristic = configs.default_grouped_config(512, 8, 4096, 7168)
    assert resolve(512, 8) == heuristic != GROUPED_TUNED
    assert tuned.grouped_shape(512, 8, 4096, 7168) == {"G": 8, "rows_bucket": 64, "N": 4096, "K": 7168}
    assert tuned.grouped_shape(0, 8, 16, 16)["rows_bucket"] == 1 and tuned.grouped_shape(9, 8, 16, 16)["rows_bucket"] == 2
    tuned.store(dict([_grouped_entry(512, 8, 4096, 7168)]))
    for T in (257, 400, 512):  # mean rows per group in (32, 64]
        assert resolve(T, 8) == GROUPED_TUNED
    assert resolve(256, 8) == configs.default_grouped_config(256, 8, 4096, 7168)  # 32 rows per group
    assert resolve(1024, 16) == configs.default_grouped_config(1024, 16, 4096, 7168)  # another G
    assert resolve(512, 8, fast_accum=False) == configs.default_grouped_config(512, 8, 4096, 7168, fast_accum=False)
    # a dense entry of the same numbers is not a grouped one, and the other way round
    assert _resolve(64, 4096, 7168) == configs.default_config(64, 4096, 7168)
    # memoized per key: a call costs no key building after the first of its bucket
    built = []
    real = tuned.key_fields
    monkeypatch.setattr(tuned, "key_fields", lambda *a, **k: built.append(a) or real(*a, **k))
    for T in (300, 301, 302, 400, 300):
        resolve(T, 8)
    assert len(built) == 0  # 257..512 were looked up above
    resolve(100, 8)
    assert len(built) == 1


def test_entries_are_per_gpu_arch_and_version(cache, fake_gpu):
    tuned.store(dict([_entry(64, 4096, 4096, gpu="NVIDIA H200 (132 SMs)"),
                       _entry(64, 4096, 2048, arch="sm100"),
                       tuned.make_entry("gemm", tuned.gemm_shape(64, 4096, 1024), TUNED, gpu=f"{H100} (132 SMs)",
                                         arch="sm90", fast_accum=True, out_dtype=BF16)]))
    assert _resolve(64, 4096, 4096) == configs.default_config(64, 4096, 4096)  # another GPU's entry
    assert _resolve(64, 4096, 2048) == configs.default_config(64, 4096, 2048)  # another arch's
    assert _resolve(64, 4096, 1024) == TUNED
    fake_gpu(capability=(9, 0), name=H100, num_sms=114)  # same name, other SM count (a PCIe card, a MIG slice)
    tuned.reload()
    assert _resolve(64, 4096, 1024) == configs.default_config(64, 4096, 1024, num_sms=114)
    # another scalemm version's entry is kept in the file and not used
    fake_gpu(capability=(9, 0), name=H100, num_sms=132)
    key, entry = _entry(64, 4096, 512)
    entry["fields"]["scalemm"] = "0.0.1"
    tuned.store({tuned.entry_key(entry["fields"]): entry})
    assert _resolve(64, 4096, 512) == configs.default_config(64, 4096, 512)
    assert len(tuned.entries()) == 4


def test_lookups_use_the_table_loaded_once(cache, monkeypatch):
    tuned.store(dict([_entry(64, 4096, 4096)]))
    assert _resolve(64, 4096, 4096) == TUNED
    reads = []
    real = tuned._read_entries
    monkeypatch.setattr(tuned, "_read_entries", lambda *a: reads.append(a) or real(*a))
    for M in (33, 48, 64, 1, 4096):
        _resolve(M, 4096, 4096)
    assert reads == []  # an in-memory dict after the first load
    # another process's write is seen after reload()
    key, entry = _entry(64, 4096, 2048)
    data = json.loads(tuned.cache_path().read_text())
    data["entries"][key] = entry
    tuned.cache_path().write_text(json.dumps(data))
    assert _resolve(64, 4096, 2048) != TUNED
    tuned.reload()
    assert _resolve(64, 4096, 2048) == TUNED and len(reads) == 1


def test_nothing_is_tuned_by_a_call(cache, monkeypatch):
    """gemm never times anything: with an empty cache its plan is the heuristic, and tune is not called."""
    monkeypatch.setattr(tuning, "tune", lambda *a, **k: pytest.fail("tune called from a GEMM"))
    monkeypatch.setattr(gemm_module, "_launcher", lambda spec: None)
    assert gemm_module._plan(7, 4096, 4096, False, BF16, None, None, CUDA0)[0] == \
        configs.default_config(7, 4096, 4096, fast_accum=False)
    assert not tuned.cache_path().exists()


# ---------------------------------------------------------------------------------------
# the file: corruption, concurrency, format
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("garbage", ["{not json", "", "[1, 2]", '{"format": 1}', '{"format": 99, "entries": {}}',
                                     "\x00\xff" * 10])
def test_corrupted_file_warns_is_ignored_and_rebuilt(cache, garbage):
    path = tuned.cache_path()
    path.parent.mkdir(parents=True)
    path.write_bytes(garbage.encode("latin-1"))
    with pytest.warns(RuntimeWarning, match="tuned-config cache .* (is not valid|cannot be read).*ignoring it"):
        assert _resolve(64, 4096, 4096) == configs.default_config(64, 4096, 4096)  # no crash: the heuristic
    with pytest.warns(RuntimeWarning, match="rebuilding it"):
        tuned.store(dict([_entry(64, 4096, 4096)]))
    data = json.loads(path.read_text())
    assert data["format"] == tuned.FORMAT and list(data["entries"]) == [_entry(64, 4096, 4096)[0]]
    assert _resolve(64, 4096, 4096) == TUNED


def test_malformed_entries_are_skipped(cache):
    good_key, good = _entry(64, 4096, 4096)
    bad_cfg_key, bad_cfg = _entry(64, 4096, 2048)
    bad_cfg["config"]["tile_m"] = 7
    data = {"format": tuned.FORMAT, "entries": {good_key: good, bad_cfg_key: bad_cfg, "x": {"fields": {}},
                                                 "y": [1]}}
    tuned.cache_path().parent.mkdir(parents=True)
    tuned.cache_path().write_text(json.dumps(data))
    with pytest.warns(RuntimeWarning) as record:
        assert _resolve(64, 4096, 4096) == TUNED
    messages = " ".join(str(w.message) for w in record)
    assert "malformed entry 'x'" in messages and "malformed entry 'y'" in messages
    assert "unusable config" in messages
    assert _resolve(64, 4096, 2048) == configs.default_config(64, 4096, 2048)


def test_file_is_readable_json(cache):
    tuned.store(dict([_entry(1, 6144, 4096, us=3.25, heuristic_us=3.5), _entry(4096, 6144, 4096)]))
    text = tuned.cache_path().read_text()
    data = json.loads(text)
    assert data["format"] == tuned.FORMAT and "scalemm.gemm" in data["about"]
    assert text.count("\n") > 20  # indented, one field a line
    (key, e), = [(k, e) for k, e in data["entries"].items() if e["fields"]["m_bucket"] == 1]
    assert "m_bucket=1 | N=6144 | K=4096" in key and e["us"] == 3.25 and e["config"]["raster"] == "n"
    assert not [p for p in tuned.cache_path().parent.iterdir() if p.name != tuned.FILE_NAME]  # no temp files


_WRITER = textwrap.dedent("""
    import sys, torch
    from scalemm import tuned
    from scalemm.cutlass_kernels.configs import GemmConfig
    proc, count = int(sys.argv[1]), int(sys.argv[2])
    for i in range(count):  # one store per entry: many interleaved read-merge-replace cycles
        key, entry = tuned.make_entry("gemm", tuned.gemm_shape(1, 8 * (proc + 1), 16 * (i + 1)),
                                       GemmConfig(swizzle=[1, 2, 4, 8][i % 4]), gpu="G (1 SMs)", arch="sm90",
                                       fast_accum=True, out_dtype=torch.bfloat16, writer=proc)
        tuned.store({key: entry})
""")


def test_concurrent_writers_all_land(fresh_cache, tmp_path):
    procs, count = 6, 8
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    env = dict(os.environ, SCALEMM_CACHE_DIR=str(fresh_cache))
    running = [subprocess.Popen([sys.executable, str(script), str(p), str(count)], env=env,
                                stderr=subprocess.PIPE, text=True) for p in range(procs)]
    for p in running:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    path = fresh_cache / "tuning" / tuned.FILE_NAME
    data = json.loads(path.read_text())  # valid JSON
    got = {(e["writer"], e["fields"]["N"], e["fields"]["K"]) for e in data["entries"].values()}
    assert got == {(p, 8 * (p + 1), 16 * (i + 1)) for p in range(procs) for i in range(count)}
    assert sorted(x.name for x in path.parent.iterdir()) == [tuned.FILE_NAME]  # no temp files left


# ---------------------------------------------------------------------------------------
# shapes, candidates, plan
# ---------------------------------------------------------------------------------------

def test_model_presets_expand_to_every_linear_layer(tmp_path):
    shapes = configs.model_linear_shapes("llama3-8b")
    assert shapes == {name.split(".")[1]: nk for name, nk in configs.MODEL_LINEAR_SHAPES.items()
                      if name.startswith("llama3-8b.")}
    assert configs.model_linear_shapes("llama3-70b")["qkv"] == configs.MODEL_LINEAR_SHAPES["llama3-70b.qkv"]
    spec = {"hidden": 2048, "intermediate": 5632, "heads": 16, "kv_heads": 4, "head_dim": 64}
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(spec))
    for model in (spec, json.dumps(spec), str(path)):
        assert configs.model_linear_shapes(model) == {"qkv": (1536, 2048), "o": (2048, 1024), "gate_up": (11264, 2048),
                                                      "down": (2048, 5632)}
    assert tuning.expand_shapes(model=spec, tokens=(1, 4096)) == [
        (1, 1536, 2048), (1, 2048, 1024), (1, 11264, 2048), (1, 2048, 5632),
        (4096, 1536, 2048), (4096, 2048, 1024), (4096, 11264, 2048), (4096, 2048, 5632)]
    assert len(tuning.expand_shapes(model="llama3-8b")) == 4 * 8  # default tokens: 1 .. 16384
    assert tuning.expand_shapes([(16, 4096, 4096), (16, 4096, 4096)], model="llama3-8b", tokens=(16,))[0] == (16, 4096, 4096)
    for bad, match in ((dict(spec, heads=0), "positive int"), ({"hidden": 1}, "needs 'intermediate'"),
                       (dict(spec, kv_heads=3), "multiple of kv_heads"), (dict(spec, layers=3), "unknown model keys"),
                       ("llama9", "neither a preset")):
        with pytest.raises(ValueError, match=match):
            configs.model_linear_shapes(bad)


@pytest.mark.parametrize("shapes,match", [([(1, 4096, 4100)], "K = 4100 must be a multiple of 16"),
                                          ([(1, 4100, 4096)], "N = 4100 must be a multiple of 8"),
                                          ([(0, 4096, 4096)], "M must be a positive int"),
                                          ([(1, 4096)], r"a shape is \(M, N, K\)")])
def test_bad_shapes(shapes, match):
    with pytest.raises(ValueError, match=match):
        tuning.expand_shapes(shapes)
    with pytest.raises(ValueError, match="give model="):
        tuning.expand_shapes([(1, 8, 16)], tokens=(1,))


@pytest.mark.parametrize("grouped,match", [([(64, 0, 4096, 4096)], "G must be a positive int"),
                                           ([(64, 8, 4096, 4100)], "K = 4100 must be a multiple of 16"),
                                           ([(64, 8, 4096)], r"a grouped shape is \(T, G, N, K\)")])
def test_bad_grouped_shapes(grouped, match):
    with pytest.raises(ValueError, match=match):
        tuning.expand_grouped(grouped)


def test_accumulator_register_limits():
    """Which tiles count as usable (no spills, ptxas -v): 128 accumulator registers, 192 for cooperative
    tiles with full accumulation (128x192 compiles without spills, 128x256 spills) and for ping-pong tiles with
    fast accumulation (a warpgroup's whole 128x192 tile)."""
    coop = lambda n, **kw: GemmConfig(128, n, 128, 2, 1, "cooperative", **kw)  # noqa: E731
    assert configs.sm90.usable(coop(192), fast_accum=False) and configs.sm90.usable(coop(160), fast_accum=False)
    assert not configs.sm90.usable(coop(256), fast_accum=False) and configs.sm90.usable(coop(256), fast_accum=True)
    assert configs.sm90.accumulator_registers(coop(192), fast_accum=False) == 192
    assert not configs.sm90.usable(GemmConfig(64, 256, 128, 1, 1, "pingpong"), fast_accum=False)
    assert not configs.sm90.usable(GemmConfig(64, 192, 128, 1, 1, "pingpong"), fast_accum=False)  # not compiled
    assert not configs.sm90.usable(GemmConfig(128, 192, 256, 1, 1, "cooperative"), fast_accum=False)  # tile_k
    pp = lambda n: GemmConfig(128, n, 128, 2, 1, "pingpong")  # noqa: E731
    assert configs.sm90.usable(pp(192), fast_accum=True) and not configs.sm90.usable(pp(256), fast_accum=True)
    assert not configs.sm90.usable(pp(128), fast_accum=False)  # CUTLASS's promotion doubles it: 256
    assert configs.sm90.usable(coop(192), fast_accum=True)  # cooperative, fast: 96 per thread


def test_candidates_are_valid_kernels():
    """Every candidate of every bucket makes template parameters for its mode (CUTLASS's constraints that
    GemmConfig knows), no spilling tile is timed, and the heuristic's pick comes first."""
    tree = scalemm.epilogues.scaled("bf16")
    for M in (1, 7, 16, 32, 48, 64, 100, 128, 129, 512, 1024, 4096, 16384):
        for N, K in ((6144, 4096), (576, 7168), (57344, 8192)):
            for fa in (True, False):
                cands = configs.tuning_candidates(M, N, K, fast_accum=fa)
                assert cands[0] == configs.default_config(M, N, K, fast_accum=fa)
                assert len(cands) == len(set(cands)) >= 4
                for c in cands:
                    assert configs.sm90.usable(c, fast_accum=fa)
                    assert c == c.compiled()  # run-time knobs come from runtime_variants
                    spec, _ = gemm_module.gemm_kernel_spec(c, fast_accum=fa, out_dtype=BF16, epilogue=tree)
                    spec.render()
                if not fa:  # full accumulation: CUTLASS's promotion up to 128x192, 128x256 only chunked
                    assert all(c.tile_n * c.tile_m <= 128 * 192 or c.promotion_chunks >= 2
                               for c in cands if c.schedule == "cooperative")
                    assert all(c.tile_n * c.tile_m <= 64 * 128 for c in cands if c.schedule == "pingpong")
                    assert all(c.promotion_chunks == 0 for c in cands if c.schedule == "pingpong")
                    assert all(c.promotion_chunks >= 1 for c in cands if c.schedule == "cooperative" and c.tile_m == 128
                               and c != GemmConfig(128, 192, 128, 2, 1, "cooperative"))
                else:
                    assert not any(c.promotion_chunks for c in cands)
                if M > 128:  # the 192-wide tile in both modes, and with full accumulation 128x256 chunked
                    assert GemmConfig(128, 192, 128, 2, 1, "cooperative") in cands
                    if not fa:
                        assert GemmConfig(128, 256, 128, 2, 1, "cooperative", promotion_chunks=2) in cands
                        assert GemmConfig(128, 192, 128, 2, 1, "cooperative", promotion_chunks=1) in cands
    variants = configs.sm90.runtime_variants(GemmConfig(128, 256, 128, 2, 1))
    assert len(variants) == 11 and len({v.compiled() for v in variants}) == 1
    assert GemmConfig(128, 256, 128, 2, 1) not in variants


def test_extended_wgmma_widths_render_with_the_define():
    """Tile widths outside CUTLASS's standard SM90 wgmma shapes (128x160, 128x224, the 64 x 48 / 72 / 80 / 144 decode
    tiles) need its extended shapes (otherwise a smaller atom): their kernels define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
    before the first include; the standard widths' sources are unchanged."""
    tree = scalemm.epilogues.scaled("bf16")
    grouped_spec = sys.modules["scalemm.grouped"].grouped_gemm_kernel_spec
    extended = (40, 48, 72, 80, 112, 144, 160, 224)
    for n in (32, 40, 48, 64, 72, 80, 96, 112, 128, 144, 160, 192, 224, 256):
        cfg = GemmConfig(128, n, 128, 2, 1, "pingpong" if n <= 192 else "cooperative")
        for spec in (gemm_module.gemm_kernel_spec(cfg, fast_accum=True, out_dtype=BF16, epilogue=tree)[0],
                     grouped_spec(cfg, fast_accum=True, out_dtype=BF16, epilogue=tree)[0],  # grouped and wgrad too
                     grouped_spec(replace(cfg, cluster_m=1), fast_accum=True, out_dtype=BF16, epilogue=tree,
                                  wgrad=True)[0]):
            lines = spec.render().splitlines()
            first = next(i for i, line in enumerate(lines) if line.startswith("#include"))
            defined = [i for i, line in enumerate(lines) if line == "#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED"]
            assert defined == ([first - 1] if n in extended else []), (n, spec.name)
    assert configs.sm90.STANDARD_MMA_WIDTHS == (8, 16, 32, 64, 96, 128, 192, 256)


def test_grouped_candidates_and_plan():
    for T, G in ((8, 8), (100, 8), (512, 8), (16384, 256), (3, 64)):
        for fa in (True, False):
            cands = configs.grouped_tuning_candidates(T, G, 4096, 7168, fast_accum=fa)
            assert cands[0] == configs.default_grouped_config(T, G, 4096, 7168, fast_accum=fa)
            assert len(cands) == len(set(cands)) >= 6 and not any(c.stream_k for c in cands)
            tree = scalemm.epilogues.scaled("bf16")
            for c in cands:
                assert configs.sm90.usable(c, fast_accum=fa)
                sys.modules["scalemm.grouped"].grouped_gemm_kernel_spec(c, fast_accum=fa, out_dtype=BF16,
                                                                        epilogue=tree)[0].render()
    work = tuning.plan([(1, 4096, 7168)], grouped=[(400, 8, 4096, 7168), (512, 8, 4096, 7168), (64, 8, 4096, 7168)],
                       fast_accum=True)
    assert [(w["op"], w["dims"]) for w in work] == [("gemm", (1, 4096, 7168)), ("grouped_gemm", (512, 8, 4096, 7168)),
                                                    ("grouped_gemm", (64, 8, 4096, 7168))]
    assert work[1]["shape"] == {"G": 8, "rows_bucket": 64, "N": 4096, "K": 7168}


def test_plan_groups_shapes_by_entry():
    work = tuning.plan([(33, 4096, 4096), (64, 4096, 4096), (40, 4096, 4096), (4096, 4096, 4096)],
                       fast_accum=(True, False))
    assert [(w["dims"][0], w["fast_accum"]) for w in work] == [(64, True), (64, False), (4096, True), (4096, False)]
    for w in work:
        assert w["candidates"][0] == w["heuristic"] == configs.default_config(w["dims"][0], 4096, 4096,
                                                                                fast_accum=w["fast_accum"])
    mine = [GemmConfig(64, 128, 128, 1, 1, "pingpong"), GemmConfig(128, 256, 128, 2, 1)]
    work = tuning.plan([(4096, 4096, 4096)], fast_accum=False, candidates=mine)
    # the heuristic first; the 128x256 tile spills without fast accumulation: not timed
    assert work[0]["candidates"] == [configs.default_config(4096, 4096, 4096, fast_accum=False), mine[0]]


def test_tune_needs_a_gpu_with_kernels(fake_gpu, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        scalemm.tune([(16, 4096, 4096)])
    fake_gpu(capability=(10, 0), name="NVIDIA B200")
    with pytest.raises(NotImplementedError, match="no kernels for sm_100"):
        scalemm.tune([(16, 4096, 4096)])


# ---------------------------------------------------------------------------------------
# python -m scalemm tune
# ---------------------------------------------------------------------------------------

def test_cli_dry_run_and_show(fresh_cache, capsys):
    from scalemm.__main__ import main
    assert main(["tune", "--dry-run", "--model", "llama3-8b", "--tokens", "1,4096", "16x4096x4096"]) == 0
    out = capsys.readouterr().out
    assert "9 shapes, 0 grouped -> 18 entries (sm90)" in out and "candidate kernels" in out
    assert "M=4096   (bucket 4096) N=28672  K=4096   full: heuristic t128x192x128_c2x1_coop" in out
    assert main(["tune", "--dry-run", "--accum", "fast", "1,4096,4096", "--grouped", "512,8,4096,7168"]) == 0
    out = capsys.readouterr().out
    assert "1 shapes, 1 grouped -> 2 entries" in out
    assert "grouped T=512 G=8 N=4096 K=7168 (rows bucket 64) fast: heuristic t128x256x128_c1x1_coop" in out
    assert main(["tune", "--show"]) == 0
    assert "tuned.json: 0 entries" in capsys.readouterr().out
    tuned.store(dict([_entry(64, 4096, 4096, speedup_over_heuristic=1.2, heuristic="h")]))
    assert main(["tune", "--show"]) == 0
    out = capsys.readouterr().out
    assert "1 entries" in out and f"m_bucket=64 N=4096 K=4096: {TUNED.label()} (1.200x over h)" in out
    tuned.reload()


def test_cli_errors(capsys, monkeypatch):
    from scalemm.__main__ import main
    with pytest.raises(SystemExit):
        main(["tune", "4096,4096"])
    assert "a shape is M,N,K" in capsys.readouterr().err
    assert main(["tune", "--model", "nope"]) == 2
    assert "neither a preset" in capsys.readouterr().err
    assert main(["tune"]) == 2
    assert "nothing to tune" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["tune", "--grouped", "8,4096,4096"])
    assert "a grouped shape is T,G,N,K" in capsys.readouterr().err
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["tune", "16,4096,4096"]) == 1
    assert "times kernels on the GPU: needs a CUDA GPU" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------
# on a GPU
# ---------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_tune_one_shape_and_use_it(tmp_path, monkeypatch):
    """Tune a small shape (kernels of the `tests` build set: no long compile), check the winner is what
    gemm resolves and runs, and that the output matches the exact product."""
    monkeypatch.setattr(tuned, "cache_path", lambda: tmp_path / "tuning" / tuned.FILE_NAME)
    tuned.reload()
    try:
        M, N, K = 100, 4096, 4096
        cands = [GemmConfig(128, 128, 128, 2, 1, "cooperative"), GemmConfig(64, 128, 128, 1, 1, "pingpong")]
        results = scalemm.tune([(M, N, K)], fast_accum=False, candidates=cands, min_gain=1.0)
        (r,) = results
        assert r["dims"] == (M, N, K) and r["label"] in {c.label() for c in cands} and r["us"] > 0
        assert set(r["times"]) >= {c.label() for c in cands}
        assert json.loads((tmp_path / "tuning" / tuned.FILE_NAME).read_text())["entries"][r["key"]]["label"] == r["label"]
        dev = torch.device("cuda", torch.cuda.current_device())
        assert gemm_module.resolve_config(M, N, K, fast_accum=False, out_dtype=BF16, device=dev) == r["config"]
        # a config that is not the heuristic's, stored by hand, is what gemm runs, and its output is right
        forced = cands[0]
        assert forced != configs.default_config(M, N, K, fast_accum=False)
        tuned.store(dict([tuned.make_entry("gemm", tuned.gemm_shape(M, N, K), forced, gpu=tuned.gpu_name(dev),
                                             arch="sm90", fast_accum=False, out_dtype=BF16)]))
        g = torch.Generator(device="cuda").manual_seed(0)
        a = (torch.randn(M, K, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
        b = (torch.randn(N, K, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
        sa, sb = torch.rand(M, device="cuda") + 0.5, torch.rand(N, device="cuda") + 0.5
        assert gemm_module._plan(M, N, K, False, BF16, None, None, dev)[0] == forced
        y = scalemm.gemm(a, b, sa, sb)
        ref = (a.double() @ b.double().T) * sa.double()[:, None] * sb.double()[None, :]
        assert ((y.double() - ref).norm() / ref.norm()).item() < 4e-3
    finally:
        monkeypatch.undo()
        tuned.reload()


@pytest.mark.gpu
def test_tune_grouped_and_use_it(tmp_path, monkeypatch):
    """The same for a grouped problem (kernels of the `tests` build set), and the grouped output checked."""
    monkeypatch.setattr(tuned, "cache_path", lambda: tmp_path / "tuning" / tuned.FILE_NAME)
    tuned.reload()
    grouped_module = sys.modules["scalemm.grouped"]
    try:
        T, G, N, K = 512, 8, 2048, 1024
        cands = [GemmConfig(128, 128, 128, 1, 1, "cooperative"), GemmConfig(128, 32, 128, 1, 1, "cooperative", swap_ab=True)]
        (r,) = scalemm.tune(grouped=[(T, G, N, K)], fast_accum=False, candidates=cands, min_gain=1.0)
        assert r["op"] == "grouped_gemm" and r["label"] in {c.label() for c in cands} | {r["heuristic"]}
        dev = torch.device("cuda", torch.cuda.current_device())
        assert grouped_module.resolve_grouped_config(T, G, N, K, fast_accum=False, out_dtype=BF16, device=dev) == r["config"]
        forced = cands[1]
        tuned.store(dict([tuned.make_entry("grouped_gemm", tuned.grouped_shape(T, G, N, K), forced,
                                             gpu=tuned.gpu_name(dev), arch="sm90", fast_accum=False, out_dtype=BF16)]))
        assert grouped_module.resolve_grouped_config(T, G, N, K, fast_accum=False, out_dtype=BF16, device=dev) == forced
        g = torch.Generator(device="cuda").manual_seed(1)
        a = (torch.randn(T, K, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
        w = (torch.randn(G, N, K, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
        offs = torch.arange(1, G + 1, device="cuda", dtype=torch.int32) * (T // G)
        sa, sb = torch.rand(T, device="cuda") + 0.5, torch.rand(G, N, device="cuda") + 0.5
        y = scalemm.grouped_gemm(a, w, offs, sa, sb, scale_a_per="token")
        rows = T // G
        ref = torch.cat([(a[i * rows:(i + 1) * rows].double() @ w[i].double().T) * sb[i].double()[None, :]
                         for i in range(G)]) * sa.double()[:, None]
        assert ((y.double() - ref).norm() / ref.norm()).item() < 4e-3
    finally:
        monkeypatch.undo()
        tuned.reload()


# ---------------------------------------------------------------------------------------
# tune's control flow on CPU: builds, runs and timings faked
# ---------------------------------------------------------------------------------------

@pytest.fixture
def fake_tuning(cache, monkeypatch):
    """scalemm.tune on a faked H100: nvcc, the GPU runs and the timings are replaced. `state` sets which
    labels fail to build / to run / give a wrong result, and each label's microseconds."""
    import contextlib
    import scalemm.jit
    import scalemm.timing
    state = SimpleState()
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)

    def build_many(specs, jobs=None, progress=True):
        state.built += [s.name for s in specs]
        return [(s, "nvcc: error") for s in specs if any(k in s.name for k in state.no_build)]

    def problem(item, device):
        def call(cfg, i, out=None):
            state.runs.append(cfg.label())
            if cfg.label() in state.no_run:
                raise RuntimeError("CUTLASS can_implement refused the problem")
            return torch.full((4, 4), 2.0 if cfg.label() in state.wrong else 1.0)
        return call, 2, f"{item['op']} {item['dims']}"

    def bench(fns, copies):
        state.benched.append(sorted(fns))
        for fn in fns.values():
            fn(0)
        return {k: state.us.get(k, 100.0) for k in fns}

    monkeypatch.setattr(scalemm.jit, "build_many", build_many)
    monkeypatch.setattr(tuning, "_problem", problem)
    monkeypatch.setattr(scalemm.timing, "bench", bench)
    return state


class SimpleState:
    def __init__(self):
        self.built, self.runs, self.benched = [], [], []
        self.no_build, self.no_run, self.wrong, self.us = set(), set(), set(), {}


def test_tune_picks_the_fastest_checked_candidate_and_stores_it(fake_tuning, capsys):
    M, N, K = 16, 4096, 4096  # decode: one wave of tiles, no run-time variants
    cands = configs.tuning_candidates(M, N, K, fast_accum=True)
    heuristic, fast, broken, wrong, unbuildable = cands[0], cands[1], cands[2], cands[3], cands[4]
    fake_tuning.us = {heuristic.label(): 10.0, fast.label(): 9.0, broken.label(): 1.0, wrong.label(): 1.0,
                      unbuildable.label(): 1.0}
    fake_tuning.no_run, fake_tuning.wrong = {broken.label()}, {wrong.label()}
    fake_tuning.no_build = {unbuildable.key()}
    (r,) = scalemm.tune([(M, N, K)], fast_accum=True)
    out = capsys.readouterr().out
    assert r["config"] == fast and r["us"] == 9.0 and r["heuristic_us"] == 10.0 and r["speedup_over_heuristic"] == 1.1111
    assert len(fake_tuning.benched) == 1 and broken.label() not in fake_tuning.benched[0]
    assert wrong.label() not in fake_tuning.benched[0] and unbuildable.label() not in fake_tuning.benched[0]
    assert f"{broken.label()} fails at" in out and f"{wrong.label()} differs from the heuristic's result" in out
    assert "does not build, skipped" in out
    assert _resolve(M, N, K) == fast  # stored, and gemm resolves it
    entry = next(iter(tuned.entries().values()))
    assert entry["tuned_shape"] == [M, N, K] and entry["heuristic"] == heuristic.label() and entry["timed"] >= 2


def test_tune_keeps_the_heuristic_within_min_gain(fake_tuning):
    cands = configs.tuning_candidates(16, 4096, 4096, fast_accum=False)
    fake_tuning.us = {cands[0].label(): 10.0, cands[1].label(): 9.95}
    (r,) = scalemm.tune([(16, 4096, 4096)], fast_accum=False)
    assert r["config"] == cands[0] and r["label"] == r["heuristic"]
    (r,) = scalemm.tune([(16, 4096, 4096)], fast_accum=False, min_gain=1.0, save=False)
    assert r["config"] == cands[1]
    assert _resolve(16, 4096, 4096, fast_accum=False) == cands[0]  # save=False wrote nothing


def test_tune_times_run_time_variants_of_the_winner_when_tiles_fill_waves(fake_tuning):
    M, N, K = 4096, 8192, 4096
    cands = configs.tuning_candidates(M, N, K, fast_accum=True)
    best = cands[2]
    variant = configs.sm90.runtime_variants(best)[4]
    fake_tuning.us = {cands[0].label(): 10.0, best.label(): 9.0, variant.label(): 8.0}
    (r,) = scalemm.tune([(M, N, K)], fast_accum=True)
    assert len(fake_tuning.benched) == 2
    assert set(fake_tuning.benched[1]) == {cands[0].label(), best.label()} | {
        v.label() for v in configs.sm90.runtime_variants(best)}
    assert r["config"] == variant and _resolve(M, N, K) == variant
    (r,) = scalemm.tune([(M, N, K)], fast_accum=True, runtime_knobs=False, save=False)
    assert r["config"] == best


def test_tune_grouped_and_a_failing_entry(fake_tuning, capsys):
    T, G, N, K = 512, 8, 4096, 7168
    cands = configs.grouped_tuning_candidates(T, G, N, K, fast_accum=True)
    fake_tuning.us = {cands[0].label(): 10.0, cands[3].label(): 5.0}
    heuristic_dense = configs.default_config(16, 4096, 4096)
    fake_tuning.no_run = {heuristic_dense.label()}  # the dense entry's heuristic fails: that entry is reported
    results = scalemm.tune([(16, 4096, 4096)], grouped=[(T, G, N, K)], fast_accum=True)
    assert [r["op"] for r in results] == ["grouped_gemm"] and results[0]["config"] == cands[3]
    assert "FAILED (RuntimeError: CUTLASS can_implement refused the problem)" in capsys.readouterr().out
    assert len(fake_tuning.benched) == 1  # grouped kernels have no run-time variants
    grouped_module = sys.modules["scalemm.grouped"]
    assert grouped_module.resolve_grouped_config(T, G, N, K, fast_accum=True, out_dtype=BF16, device=CUDA0) == cands[3]
    assert any(name.startswith("fp8_grouped_") for name in fake_tuning.built)


def test_full_accumulation_heuristic_weighs_wide_tiles_against_waves():
    """Full accumulation above 128 tokens: the chunked promotion on cooperative 128 x (128, 192, 256) tiles, the
    width with the least waves x TILE_COST_FULL (fitted on an H100, perf/fp8_full_accum.py --sweep: 128x256 at
    4096 x 4096, 128x192 at 8192 x 8192, 1024 x 6144 and 4096 x 5376 (5.1 waves of 256-wide tiles), 128x128 at
    1024 x 2048)."""
    def pick(M, N, **kw):
        cfg = configs.default_config(M, N, 4096, fast_accum=False, **kw)
        assert (cfg.tile_m, cfg.tile_k, cfg.schedule) == (128, 128, "cooperative")
        assert cfg.cluster_m == configs.sm90.full_cluster_m(M, N, cfg.tile_n, kw.get("num_sms", 132))
        plain = replace(cfg, promotion_chunks=0, promotion_overlap=False)
        assert cfg == configs.sm90.full_accumulation(plain, overlap=True)
        # overlapped where a second temporary fits: 128 wide in one chunk over k-tile pairs, 192 in two chunks
        assert (cfg.promotion_chunks, cfg.promotion_overlap) == {128: (1, True), 192: (2, True), 256: (2, False)}[cfg.tile_n]
        return cfg.tile_n
    assert pick(4096, 4096) == 256 and pick(1024, 4096) == 256 and pick(8192, 8192) == 192
    assert pick(1024, 6144) == 192 and pick(4096, 5376) == 192 and pick(4096, 576) == 192
    assert pick(1024, 2048) == 128 and pick(1024, 1536) == 128 and pick(256, 4096) == 128
    # the waves depend on the SM count (1024 x 10240: 8 x 80 = 640 tiles of 128, 5 waves on 132 SMs, 9 on 78)
    assert pick(1024, 10240) == 128 and pick(1024, 10240, num_sms=78) != 128
    # clusters of 1 for one wave of tiles (one tile per CTA) or, below 1024 tokens, an odd count of 128-token tiles
    # (perf/results/h100/fp8_full_one_wave/: 384 tokens 0.50-0.74x -> 0.95-1.44x of torch rowwise)
    cm = configs.sm90.full_cluster_m
    assert cm(1024, 2048, 128, 132) == 1 and cm(1024, 2176, 128, 132) == 2  # 128 / 136 tiles
    assert cm(384, 8192, 192, 132) == 1 and cm(512, 8192, 192, 132) == 2 and cm(1152, 8192, 192, 132) == 2
    assert cm(384, 8192, 192, 264) == 1 and cm(640, 16384, 192, 66) == 2  # 640 >= 1024 * 66 / 132
    assert configs.default_config(384, 8192, 8192, fast_accum=False) == configs.sm90.full_tile_config(192, 1)
    for M, N in ((1024, 4096), (4096, 6144), (8192, 8192), (129, 4096)):
        assert configs.sm90.usable(configs.default_config(M, N, 4096, fast_accum=False), fast_accum=False)
    # 17-128 tokens: swap-AB cooperative 128 x 32 (while those tiles fit one wave) or 128 x 64, chunked; decode
    # (up to 16 tokens) keeps the swap-AB ping-pong tiles under CUTLASS's promotion
    G = configs.GemmConfig
    assert configs.default_config(64, 4096, 4096, fast_accum=False) == G(128, 32, 128, 1, 1, "cooperative",
                                                                          swap_ab=True, promotion_chunks=1)
    assert configs.default_config(64, 9216, 4096, fast_accum=False).tile_n == 64  # 144 32-wide tiles > 132 SMs
    assert configs.default_config(64, 9216, 4096, fast_accum=False, num_sms=264).tile_n == 32
    assert configs.default_config(128, 4096, 4096, fast_accum=False).tile_n == 64
    assert configs.default_config(16, 4096, 4096, fast_accum=False).promotion_chunks == 0


def test_full_accumulation_chunks_fit_the_registers():
    """full_accumulation gives cooperative 128-row tiles (swap-AB too) the fewest promotion chunks whose
    accumulators fit (tile + one chunk <= 192 registers per thread) and leaves other tiles to CUTLASS's
    promotion."""
    full = configs.sm90.full_accumulation
    coop = lambda n, **kw: configs.GemmConfig(128, n, 128, 2, 1, "cooperative", **kw)  # noqa: E731
    assert full(coop(128)).promotion_chunks == 1 and full(coop(192)).promotion_chunks == 1
    assert full(configs.GemmConfig(128, 32, 128, 1, 1, "cooperative", swap_ab=True)).promotion_chunks == 1
    assert full(coop(256)).promotion_chunks == 2 and full(coop(256, stream_k=True)).promotion_chunks == 2
    assert configs.sm90.accumulator_registers(full(coop(256)), fast_accum=False) == 192
    for keep in (configs.GemmConfig(64, 128, 128, 1, 1, "pingpong"), configs.GemmConfig(256, 128, 128, 2, 1),
                 configs.GemmConfig(64, 16, 256, 1, 1, "pingpong", swap_ab=True), coop(256, promotion_chunks=4)):
        assert full(keep) == keep
    assert not configs.sm90.usable(coop(256, promotion_chunks=2), fast_accum=True)
    # overlap (dense): 128 wide in 1 chunk over pairs of k-tiles, 192 in 2 chunks, with two temporaries; 256 (no
    # registers for them) and swap-AB tiles as without it
    assert full(coop(128), overlap=True) == coop(128, promotion_chunks=1, promotion_overlap=True)
    assert full(coop(192), overlap=True) == coop(192, promotion_chunks=2, promotion_overlap=True)
    assert full(coop(256), overlap=True) == full(coop(256))
    swap = configs.GemmConfig(128, 64, 128, 1, 1, "cooperative", swap_ab=True)
    assert full(swap, overlap=True) == full(swap)
    for n in (128, 192):
        assert configs.sm90.accumulator_registers(full(coop(n), overlap=True), fast_accum=False) == 192
        assert configs.sm90.usable(full(coop(n), overlap=True), fast_accum=False)


def test_promotion_overlap_config():
    """promotion_overlap: one chunk (k-tile pairs) or an even chunk count, its own kernel name, the mainloop's third
    template argument, and two temporaries' registers."""
    G = configs.GemmConfig
    for bad in (0, 3):
        with pytest.raises(ValueError, match="promotion_overlap"):
            G(128, 192, 128, 2, 1, "cooperative", promotion_chunks=bad, promotion_overlap=True)
    cfg = G(128, 192, 128, 2, 1, "cooperative", promotion_chunks=2, promotion_overlap=True)
    plain = G(128, 192, 128, 2, 1, "cooperative", promotion_chunks=2)
    assert cfg.key() == plain.key() + "o"
    assert configs.sm90.accumulator_registers(cfg, fast_accum=False) == 96 + 2 * 48
    assert configs.sm90.accumulator_registers(plain, fast_accum=False) == 96 + 48
    from scalemm import epilogues as epi
    emitted = epi.emit(epi.scaled("bfloat16", bias=True), "bfloat16")
    assert "FP8FastAccum, 2, true>" in cfg.cpp(fast_accum=False, out_dtype="bfloat16", epilogue=emitted)["MAINLOOP_SCHEDULE"]
    assert "FP8FastAccum, 2>" in plain.cpp(fast_accum=False, out_dtype="bfloat16", epilogue=emitted)["MAINLOOP_SCHEDULE"]
    pairs = G(128, 128, 128, 2, 1, "cooperative", promotion_chunks=1, promotion_overlap=True)
    assert pairs.key().endswith("_pc1o") and configs.sm90.accumulator_registers(pairs, fast_accum=False) == 64 + 2 * 64
    assert "FP8FastAccum, 1, true>" in pairs.cpp(fast_accum=False, out_dtype="bfloat16", epilogue=emitted)["MAINLOOP_SCHEDULE"]


def test_fast_accumulation_small_n_weighs_tile_widths_by_waves():
    """Fast accumulation at 129-255 tokens, where ping-pong 64x256 does not apply: the cooperative width (128,
    192, 256) with the least waves x TILE_COST (128x128 where one wave suffices). From PREFILL_MIN_TOKENS (256) the
    prefill rules take over."""
    def tile_n(M, N, K=4096):
        cfg = configs.default_config(M, N, K)
        assert (cfg.tile_m, cfg.cluster_m, cfg.schedule) == (128, 2, "cooperative")
        return cfg.tile_n
    assert configs.sm90.PREFILL_MIN_TOKENS == 256
    assert tile_n(255, 16384, 16384) == 256 and tile_n(255, 24576, 16384) == 192  # K > 8192: no ping-pong 64x256
    assert tile_n(200, 4096) == 128 and tile_n(129, 2048) == 128 and tile_n(255, 1536) == 128
    assert configs.default_config(255, 6144, 4096).schedule == "pingpong"  # ping-pong 64x256 comes first
    assert configs.default_config(255, 6144, 4096).tile_m == 64
    assert configs.default_config(384, 8192, 4096).tile_m == 64  # beyond one wave ping-pong 64x256 stays below 1024
    assert configs.default_config(1024, 6144, 4096).tile_m == 128  # ... and beyond one wave, the model from 1024
    assert configs.default_config(512, 6144, 16384) == configs.sm90.prefill_config(512, 6144, 16384, 132)  # K > 8192
    assert configs.default_config(300, 4096, 4096) == configs.sm90.PREFILL_ONE_WAVE_TILES[1]  # one wave: 96 tiles


def test_prefill_rule_takes_the_least_predicted_time():
    """From 1024 tokens (fast accumulation) the rule is PREFILL_TILE_MODEL's least predicted time: ping-pong tiles
    where K is short (their epilogue hides behind the other warpgroup's mainloop) and only with more tiles than SMs,
    the cooperative 128x256 only where its waves fit better, the 160 / 224 widths where they fill N in whole tiles;
    the M tiles count in whole clusters; fewer SMs move the threshold down."""
    sm90 = configs.sm90
    model = sm90.PREFILL_TILE_MODEL
    assert len({e[0] for e in model}) == len(model) and all(sm90.usable(e[0], fast_accum=True) for e in model)
    for M, N, K in [(1024, 4096, 4096), (4096, 5376, 4096), (8192, 8192, 8192), (16384, 7168, 2048),
                    (3000, 576, 7168), (2048, 16384, 53248), (1100, 14336, 12288), (4096, 576, 7168)]:
        pick = sm90.prefill_config(M, N, K, 132)
        times = {e[0]: sm90.predicted_prefill_us(*e, M, N, K, 132) for e in model
                 if e[0].schedule == "cooperative" or sm90.tile_count(e[0], M, N) > 132}
        assert pick in times and times[pick] == min(times.values())
        # what scalemm runs: the model's pick unless the output is one wave of 128x128 tiles (3000 x 576: 120)
        assert configs.default_config(M, N, K) == (sm90.one_wave_prefill_config(M, N, 132) or pick)
    # ping-pong with at most one tile per SM is left out: 4096 x 576 in 128 x 160 tiles is 128 tiles
    assert sm90.tile_count(configs.GemmConfig(128, 160, 128, 2, 1, "pingpong"), 4096, 576) == 128
    # swap-AB puts N on the tile's M side: 4096 / 128 x ceil(100 / 32)
    assert sm90.tile_count(configs.GemmConfig(128, 32, 128, 1, 1, "cooperative", swap_ab=True), 100, 4096) == 32 * 4
    # measured on an H100 (perf/results/h100/fp8_prefill_160/; x: of torch._scaled_mm rowwise)
    assert configs.default_config(4096, 5120, 2048).key() == "t128x160x128_c2x1_ping"  # 0.90x -> 1.03x
    assert configs.default_config(16384, 7168, 2048).schedule == "pingpong"
    assert configs.default_config(4096, 5376, 4096).key() == "t128x192x128_c2x1_ping"  # 1.03x
    assert configs.default_config(4096, 576, 7168).key() == "t128x192x128_c2x1_coop"   # 1.23x, ping-pong 160 1.13x
    assert configs.default_config(1024, 16384, 53248).key() == "t128x256x128_c2x1_coop"
    # 5 M tiles in clusters of 2 run as 6: 2 waves of 128x128 ping-pong on 6144 / 128 x 6 = 288 tiles, not 240
    cfg = configs.GemmConfig(128, 128, 128, 2, 1, "pingpong")
    assert sm90.tile_waves(cfg, 640, 6144, 132) == 3 and sm90.tile_waves(cfg, 512, 6144, 132) == 2
    assert sm90.tile_waves(configs.GemmConfig(64, 256, 128, 1, 1, "pingpong"), 640, 6144, 132) == 2
    # clusters of 2 along N round the N tiles the same way: 4 x 33 tiles of 128 x 128 run as 4 x 34 (2 waves, not 1)
    assert sm90.tile_waves(configs.GemmConfig(128, 128, 128, 1, 2, "pingpong"), 512, 33 * 128, 132) == 2
    assert sm90.tile_waves(configs.GemmConfig(128, 128, 128, 1, 1, "pingpong"), 512, 33 * 128, 132) == 1
    # at most one wave of 128x128 tiles: cooperative tiles in clusters of 1, 128x64 where 128x128 would busy at most
    # half the SMs (perf/results/h100/fp8_prefill_narrow/: Llama-3-8B k at 2048 tokens 0.87x -> 1.01x of torch
    # rowwise, at 1024 tokens 1.14x -> 1.21x; DeepSeek-V3 kv_a at 2048 0.82x -> 0.99x)
    narrow, square = sm90.PREFILL_ONE_WAVE_TILES
    assert (narrow.tile_n, square.tile_n) == (64, 128) and {narrow.cluster_m, square.cluster_m} == {1}
    assert all(c.schedule == "cooperative" and sm90.usable(c, fast_accum=True) for c in (narrow, square))
    for M, N in [(1024, 1024), (1024, 576), (1024, 512), (2048, 512)]:  # 64 / 40 / 32 / 64 tiles of 128x128
        assert configs.default_config(M, N, 4096) == narrow
    for M, N in [(1024, 1536), (2048, 576), (2048, 1024), (4096, 512), (1024, 2048)]:  # 96 / 80 / 128 / 128 / 128
        assert configs.default_config(M, N, 7168) == square
    for M, N in [(1024, 2176), (4096, 576), (2048, 1536)]:  # 136 / 160 / 192 tiles: the model (clusters of 2)
        assert configs.default_config(M, N, 7168).cluster_m == 2
    assert configs.default_config(1024, 1024, 4096, num_sms=114) == square  # 128 narrow tiles: two waves on 114 SMs
    assert configs.default_config(1024, 1024, 4096, fast_accum=False).tile_n != 64  # full accumulation: its own rule
    # below 256 tokens the earlier rules; with fewer SMs the prefill rule starts sooner
    assert configs.default_config(250, 6144, 4096).tile_m == 64
    assert configs.default_config(230, 6144, 4096, num_sms=114).tile_m == 128


def test_grouped_candidates_include_the_widest_full_accumulation_tile():
    """The grouped tuner times 128x192 in both modes and, with full accumulation, the cooperative tiles with the
    chunked promotion (128x256 in 2 chunks); never a spilling 256-wide tile with CUTLASS's promotion."""
    wide = configs.GemmConfig(128, 192, 128, 1, 1, "cooperative")
    for fa in (True, False):
        cands = configs.grouped_tuning_candidates(65536, 128, 1536, 2048, fast_accum=fa)
        assert wide in cands
        assert all(configs.sm90.usable(c, fast_accum=fa) for c in cands)
    full = configs.grouped_tuning_candidates(65536, 128, 1536, 2048, fast_accum=False)
    assert configs.GemmConfig(128, 256, 128, 1, 1, "cooperative", promotion_chunks=2) in full
    assert all(c.tile_n < 256 or c.schedule != "cooperative" or c.promotion_chunks == 2 for c in full)
