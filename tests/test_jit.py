"""The JIT on its own: nvcc, the cache, a hit, a race, a failure. Compiles; runs no GPU code."""
import json
import subprocess
import sys
import textwrap

import pytest

from scalemm import jit
from scalemm.jit import KernelSpec, toolchain

pytestmark = pytest.mark.nvcc


def _spec(value=7, name="selftest"):
    return KernelSpec(name=name, template="jit_selftest.cu", params={"VALUE": str(value)}, cutlass=False)


def _value(kernel):
    import ctypes
    out = ctypes.c_int64(0)
    kernel.function("scalemm_selftest_value", [ctypes.POINTER(ctypes.c_int64)])(ctypes.byref(out))
    return out.value


def test_build_load_call(fresh_cache):
    k = jit.build(_spec(41))
    assert _value(k) == 41
    entry = k.path.parent
    assert entry.parent == fresh_cache / "kernels"
    meta = json.loads((entry / "meta.json").read_text())
    assert meta["params"] == {"VALUE": "41"} and "sm_90a" in " ".join(meta["command"])
    assert (entry / "source.cu").read_text().count("= 41;") == 2


def test_cache_hit_does_not_call_nvcc(fresh_cache, monkeypatch):
    k1 = jit.build(_spec(5))
    jit._loaded.clear()
    calls = []
    real_popen = subprocess.Popen  # every way of running nvcc goes through Popen
    def spy(cmd, *a, **kw):
        if cmd and "nvcc" in str(cmd[0]) and "--version" not in cmd:
            calls.append(cmd)
        return real_popen(cmd, *a, **kw)
    monkeypatch.setattr(subprocess, "Popen", spy)
    k2 = jit.build(_spec(5))
    assert calls == [] and k2.path == k1.path and _value(k2) == 5
    assert jit.is_cached(_spec(5)) and not jit.is_cached(_spec(6))


def test_key_changes_with_source_and_params(fresh_cache):
    a, b = _spec(1), _spec(2)
    assert jit.cache_key(a, a.render()) != jit.cache_key(b, b.render())
    assert jit.cache_key(a, a.render()) == jit.cache_key(_spec(1), _spec(1).render())


def test_nonzero_launcher_code_raises(fresh_cache):
    k = jit.build(_spec(3))
    fail = k.function("scalemm_selftest_fail", [jit.i64])
    fail(0)
    with pytest.raises(jit.KernelError, match="selftest.scalemm_selftest_fail failed: CUTLASS status 2"):
        fail(1002)
    with pytest.raises(jit.KernelError, match="missing_fn"):
        k.function("missing_fn", [])


def test_compile_error_names_kernel_log_and_command(fresh_cache):
    bad = KernelSpec(name="broken", template="jit_selftest.cu", params={"VALUE": "this is not C++"}, cutlass=False)
    with pytest.raises(jit.BuildError) as e:
        jit.build(bad)
    msg = str(e.value)
    assert "'broken'" in msg and "build.log" in msg and "reproduce:" in msg and "nvcc" in msg
    log = msg.split("log: ")[1].split("\n")[0]
    assert "error" in open(log).read()
    assert not list((fresh_cache / "kernels").glob("broken-*"))  # nothing half-built is published


def test_arch_is_part_of_the_spec_key_and_command(fresh_cache):
    hopper = _spec(8)
    blackwell = KernelSpec(name="selftest", template="jit_selftest.cu", params={"VALUE": "8"}, cutlass=False,
                           arch="sm100a")
    assert jit.cache_key(hopper, hopper.render()) != jit.cache_key(blackwell, blackwell.render())
    so = jit.build(blackwell, load=False)
    meta = json.loads((so.parent / "meta.json").read_text())
    assert meta["arch"] == "sm100a" and "code=sm_100a" in " ".join(meta["command"])
    assert "sm_90a" not in " ".join(meta["command"]) and b"sm_100a" in so.read_bytes()
    assert json.loads((jit.build(hopper, load=False).parent / "meta.json").read_text())["arch"] == "sm90a"


def test_unfilled_placeholder_is_an_error():
    with pytest.raises(ValueError, match="VALUE"):
        KernelSpec(name="x", template="jit_selftest.cu", cutlass=False).render()


def test_two_processes_race_to_build_the_same_kernel(fresh_cache):
    script = textwrap.dedent("""
        import ctypes, sys
        from scalemm import jit
        k = jit.build(jit.KernelSpec(name="race", template="jit_selftest.cu", params={"VALUE": "99"}, cutlass=False))
        out = ctypes.c_int64(0)
        k.function("scalemm_selftest_value", [ctypes.POINTER(ctypes.c_int64)])(ctypes.byref(out))
        print(out.value, k.path)
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (o, e) in zip(procs, outs):
        assert p.returncode == 0, e
    vals = [o.split() for o, _ in outs]
    assert vals[0][0] == vals[1][0] == "99" and vals[0][1] == vals[1][1]
    entries = [p for p in (fresh_cache / "kernels").iterdir()]
    assert len(entries) == 1 and entries[0].name.startswith("race-")  # no temp dirs left behind


def test_toolchain_facts():
    release, (major, minor) = toolchain.nvcc_version()
    assert major >= 12 and release.startswith("release")
    assert toolchain.cutlass_version().startswith("4.2")


def test_key_follows_included_headers_only(tmp_path, monkeypatch):
    inc = tmp_path / "include"
    (inc / "scalemm").mkdir(parents=True)
    (inc / "scalemm" / "a.cuh").write_text('#include "scalemm/b.cuh"\n')
    (inc / "scalemm" / "b.cuh").write_text("int b = 1;\n")
    (inc / "scalemm" / "unrelated.cuh").write_text("int u = 1;\n")
    monkeypatch.setattr(toolchain, "INCLUDE_DIR", inc)
    spec = _spec(1)
    src = '#include "scalemm/a.cuh"\n' + spec.render()
    k0 = jit.cache_key(spec, src)
    (inc / "scalemm" / "unrelated.cuh").write_text("int u = 2;\n")
    assert jit.cache_key(spec, src) == k0
    (inc / "scalemm" / "b.cuh").write_text("int b = 2;\n")  # included through a.cuh
    assert jit.cache_key(spec, src) != k0


def test_refuses_nvcc_newer_than_the_driver(monkeypatch):
    monkeypatch.setattr(toolchain, "driver_cuda_version", lambda: (12, 4))
    monkeypatch.setattr(toolchain, "nvcc_version", lambda: ("release 13.0, V13.0.88", (13, 0)))
    with pytest.raises(jit.ToolchainError, match="newer than the driver"):
        toolchain.check_nvcc_against_driver()
    monkeypatch.setattr(toolchain, "driver_cuda_version", lambda: (13, 0))
    toolchain.check_nvcc_against_driver()  # equal is fine
    monkeypatch.setattr(toolchain, "driver_cuda_version", lambda: None)
    toolchain.check_nvcc_against_driver()  # no driver (a CPU build machine): compiling is allowed


def test_missing_nvcc_is_a_clear_error(monkeypatch):
    toolchain.nvcc_path.cache_clear()
    monkeypatch.setenv("CUDA_HOME", "/nonexistent")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(toolchain.Path, "is_file", lambda self: False)
    try:
        with pytest.raises(jit.ToolchainError, match="nvcc not found"):
            toolchain.nvcc_path()
    finally:
        toolchain.nvcc_path.cache_clear()
