"""The JIT cache against damage and odd states: broken entries, interrupted builds, unwritable
or shared caches, a machine without nvcc. Compiles the tiny selftest kernel; runs no GPU code."""
import ctypes
import hashlib
import json
import warnings

import pytest
from test_jit import _spec, _value

from scalemm import jit

pytestmark = pytest.mark.nvcc


def _new_process():
    """Forget what this process loaded and checked, as a new process would."""
    jit._reset_process_state()


def _sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _truncate_so(entry):
    so = entry / "kernel.so"
    so.write_bytes(so.read_bytes()[:4096])


def _garbage_so_with_matching_hash(entry):
    # the hash matches (as if meta.json had been rewritten too), but dlopen refuses the file
    (entry / "kernel.so").write_bytes(b"not an ELF file")
    meta = json.loads((entry / "meta.json").read_text())
    meta["sha256"] = _sha256(entry / "kernel.so")
    (entry / "meta.json").write_text(json.dumps(meta))


def _other_hash(entry):
    meta = json.loads((entry / "meta.json").read_text())
    meta["sha256"] = "0" * 64
    (entry / "meta.json").write_text(json.dumps(meta))


DAMAGE = {
    "truncated kernel.so": _truncate_so,
    "kernel.so does not load": _garbage_so_with_matching_hash,
    "no kernel.so": lambda entry: (entry / "kernel.so").unlink(),
    "no meta.json": lambda entry: (entry / "meta.json").unlink(),
    "meta.json does not parse": lambda entry: (entry / "meta.json").write_text("{not json"),
    "recorded hash differs": _other_hash,
    "empty entry folder": lambda entry: [p.unlink() for p in entry.iterdir()],
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_damaged_entry_is_rebuilt_with_one_warning(fresh_cache, damage):
    spec = _spec(21)
    entry = jit.build(spec, load=False).parent  # built, not loaded: this process never dlopened it
    DAMAGE[damage](entry)
    _new_process()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # is_cached checks without loading: only dlopen finds the file it cannot load
        assert jit.is_cached(spec) == (damage == "kernel.so does not load")
        kernel = jit.build(spec)
    assert _value(kernel) == 21 and kernel.path == entry / "kernel.so"
    about_it = [w for w in caught if "selftest" in str(w.message)]
    assert len(about_it) == 1 and "rebuilding" in str(about_it[0].message), [str(w.message) for w in caught]
    meta = json.loads((entry / "meta.json").read_text())
    assert meta["sha256"] == _sha256(entry / "kernel.so")
    assert [p.name for p in (fresh_cache / "kernels").iterdir()] == [entry.name]  # nothing left aside


def test_kernel_that_still_does_not_load_after_a_rebuild_is_a_clear_error(fresh_cache, monkeypatch):
    spec = _spec(22)
    jit.build(spec, load=False)
    _new_process()

    real_cdll = ctypes.CDLL

    def refuse(path, *a, **kw):  # dlopen refuses every kernel.so, however often it is rebuilt
        if str(path).endswith("kernel.so"):
            raise OSError(f"{path}: cannot open shared object file")
        return real_cdll(path, *a, **kw)
    monkeypatch.setattr(ctypes, "CDLL", refuse)
    with pytest.warns(RuntimeWarning, match="rebuilding"), pytest.raises(jit.KernelError) as e:
        jit.build(spec)
    msg = str(e.value)
    assert "'selftest'" in msg and "kernel.so" in msg and "build.log" in msg and "cannot open" in msg


def _dead_pid():
    import subprocess
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _age(path, seconds):
    import os
    import time
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_stale_temp_folders_are_removed_by_the_next_build(fresh_cache):
    import os
    import socket
    import subprocess
    host, day = socket.gethostname(), 24 * 3600
    kernels = fresh_cache / "kernels"
    live = subprocess.Popen(["sleep", "60"])
    try:
        keep = [kernels / f".tmp-{live.pid}@{host}@selftest-live",          # a build in progress here
                kernels / f".tmp-{_dead_pid()}@other-host@selftest-recent"]  # another host's pid means nothing here
        drop = [kernels / f".tmp-{_dead_pid()}@{host}@selftest-killed",     # its owner is dead
                kernels / f".tmp-{live.pid}@other-host@selftest-old",       # older than a day, whoever owns it
                kernels / ".selftest-oldformat"]                             # an older scalemm's temp folder
        for d in keep + drop:
            (d / "nested").mkdir(parents=True)
        for d in drop[1:]:
            _age(d, 2 * day)
        jit.build(_spec(31), load=False)
        assert all(d.is_dir() for d in keep) and not any(d.exists() for d in drop)
    finally:
        live.kill()
        live.wait()


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has finished
    except FileNotFoundError:
        return False


def test_interrupted_build_kills_nvcc_and_leaves_no_temp_folder(fresh_cache, tmp_path, monkeypatch):
    import subprocess
    import time
    from scalemm.jit import toolchain
    pids = tmp_path / "pids"
    # "nvcc" here is a shell that starts a child (as nvcc starts cicc and ptxas) and waits for it
    monkeypatch.setattr(toolchain, "nvcc_command", lambda *a, **kw: [
        "sh", "-c", f"sleep 60 & echo $$ $! > {pids}.tmp && mv {pids}.tmp {pids}; wait"])

    class InterruptedWhileWaiting(subprocess.Popen):  # Ctrl-C while the build runs
        def communicate(self, *a, **kw):
            while not pids.exists():
                time.sleep(0.02)
            raise KeyboardInterrupt
    monkeypatch.setattr(subprocess, "Popen", InterruptedWhileWaiting)
    with pytest.raises(KeyboardInterrupt):
        jit.build(_spec(32))
    shell, child = map(int, pids.read_text().split())
    deadline = time.time() + 10
    while (_alive(shell) or _alive(child)) and time.time() < deadline:
        time.sleep(0.05)
    assert not _alive(shell) and not _alive(child)
    assert list((fresh_cache / "kernels").iterdir()) == []


def test_unwritable_cache_is_a_clear_error(tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("SCALEMM_CACHE_DIR", str(blocker / "cache"))  # cannot be created: a file is in the way
    jit._reset_process_state()
    with pytest.raises(jit.CacheError, match=rf"{blocker / 'cache'}.*not writable.*SCALEMM_CACHE_DIR"):
        jit.build(_spec(33))


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_published_entries_follow_the_umask(fresh_cache, umask):
    import os
    old = os.umask(umask)
    try:
        entry = jit.build(_spec(34), load=False).parent
    finally:
        os.umask(old)
    assert entry.stat().st_mode & 0o777 == 0o777 & ~umask  # mkdtemp made it 0700
    for name in ("source.cu", "meta.json", "build.log"):
        assert (entry / name).stat().st_mode & 0o777 == 0o666 & ~umask, name
    assert (entry / "kernel.so").stat().st_mode & 0o666 == 0o666 & ~umask


@pytest.fixture
def without_nvcc(monkeypatch, tmp_path):
    """Hide the CUDA toolkit, as on a deployment image that ships a prebuilt cache."""
    from scalemm.jit import toolchain

    def hide():
        monkeypatch.setenv("PATH", str(tmp_path / "bin-without-nvcc"))
        monkeypatch.delenv("CUDA_HOME", raising=False)
        monkeypatch.delenv("CUDA_PATH", raising=False)
        monkeypatch.setattr(toolchain, "CUDA_HOME_FALLBACK", tmp_path / "no-cuda", raising=False)
        toolchain.nvcc_path.cache_clear()
        toolchain.nvcc_version.cache_clear()
        jit._reset_process_state()
        with pytest.raises(jit.ToolchainError, match="nvcc not found"):
            toolchain.nvcc_path()
    yield hide
    monkeypatch.undo()
    toolchain.nvcc_path.cache_clear()
    toolchain.nvcc_version.cache_clear()


def test_prebuilt_cache_loads_without_nvcc(fresh_cache, without_nvcc):
    spec = _spec(41)
    so = jit.build(spec, load=False)
    without_nvcc()
    assert jit.is_cached(spec)
    kernel = jit.build(spec)
    assert kernel.path == so and _value(kernel) == 41


def test_without_nvcc_a_kernel_not_in_the_cache_is_a_clear_error(fresh_cache, without_nvcc):
    jit.build(_spec(42), load=False)
    without_nvcc()
    assert not jit.is_cached(_spec(43))
    with pytest.raises(jit.ToolchainError, match=rf"'selftest' is not in the JIT cache {fresh_cache}.*nvcc"):
        jit.build(_spec(43))


def test_without_nvcc_a_damaged_entry_is_reported_not_rebuilt(fresh_cache, without_nvcc):
    spec = _spec(44)
    entry = jit.build(spec, load=False).parent
    _truncate_so(entry)
    without_nvcc()
    with pytest.warns(RuntimeWarning, match="unusable"), pytest.raises(jit.ToolchainError, match="not in the JIT cache"):
        jit.build(spec)


def test_entries_belong_to_the_nvcc_that_built_them(fresh_cache, monkeypatch, without_nvcc):
    import shutil
    from scalemm.jit import toolchain
    spec = _spec(45)
    built = jit.build(spec, load=False).parent
    meta = json.loads((built / "meta.json").read_text())
    assert meta["nvcc"] == toolchain.nvcc_version()[0] and meta["nvcc_version"] == list(toolchain.nvcc_version()[1])
    # the same kernel as a newer toolkit (CUDA 99.1) would have built it
    newer = built.parent / built.name.replace(built.name.rsplit("-nvcc", 1)[1], "99.1.0")
    assert newer != built
    shutil.copytree(built, newer)
    (newer / "meta.json").write_text(json.dumps({**meta, "nvcc": "release 99.1, V99.1.0", "nvcc_version": [99, 1]}))

    # with nvcc, a process uses only what its own nvcc built
    jit._reset_process_state()
    assert jit.build(spec, load=False) == built / "kernel.so"
    with monkeypatch.context() as m:
        m.setattr(toolchain, "nvcc_version", lambda: ("release 99.2, V99.2.0", (99, 2)))
        assert not jit.is_cached(spec)

    # without nvcc, the newest build the driver can run
    without_nvcc()
    monkeypatch.setattr(toolchain, "driver_cuda_version", lambda: None)  # no driver: nothing to check against
    assert jit.build(spec, load=False) == newer / "kernel.so"
    monkeypatch.setattr(toolchain, "driver_cuda_version", lambda: tuple(meta["nvcc_version"]))
    assert jit.build(spec, load=False) == built / "kernel.so"
    monkeypatch.setattr(toolchain, "driver_cuda_version", lambda: (12, 0))
    with pytest.raises(jit.ToolchainError, match=r"driver.*CUDA 12\.0"):
        jit.build(spec, load=False)


def test_cache_key_needs_no_cuda_toolkit(without_nvcc):
    without_nvcc()
    spec = _spec(46)
    assert jit.cache_key(spec, spec.render())  # CUTLASS kernels also read the nvidia-cutlass wheel's version.h


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "rename aside"])
def test_publish_replaces_a_broken_entry(tmp_path, monkeypatch, exchange):
    from scalemm.jit import cache
    if not exchange:  # a file system without RENAME_EXCHANGE (NFS)
        monkeypatch.setattr(cache, "_exchange", lambda a, b: False)
    (tmp_path / "kernels" / "k-1-nvcc13.0" / "stale").mkdir(parents=True)
    tmp = cache.new_temp(tmp_path, "k")
    (tmp / "kernel.so").write_text("new")
    cache.publish(tmp, tmp_path / "kernels" / "k-1-nvcc13.0")
    assert [p.name for p in (tmp_path / "kernels").iterdir()] == ["k-1-nvcc13.0"]
    assert [p.name for p in (tmp_path / "kernels" / "k-1-nvcc13.0").iterdir()] == ["kernel.so"]


def test_ctrl_c_during_build_many_stops_every_nvcc(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import textwrap
    import time
    script = textwrap.dedent(f"""
        import os
        from scalemm import jit
        from scalemm.jit import toolchain
        # "nvcc": a shell that starts a child (as nvcc starts cicc and ptxas) and waits for it
        toolchain.nvcc_command = lambda src, *a, **kw: [
            "sh", "-c", "sleep 60 & echo $$ $! > {tmp_path}/pids-$$.tmp && mv {tmp_path}/pids-$$.tmp {tmp_path}/pids-$$; wait"]
        specs = [jit.KernelSpec(name=f"k{{i}}", template="jit_selftest.cu", params={{"VALUE": str(i)}}, cutlass=False)
                 for i in range(3)]
        jit.build_many(specs, jobs=2, progress=False)
    """)
    env = dict(os.environ, SCALEMM_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while len(list(tmp_path.glob("pids-*[0-9]"))) < 2 and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # what Ctrl-C sends to the foreground process; nvcc has its own group
    _, err = proc.communicate(timeout=60)
    assert "KeyboardInterrupt" in err
    pids = [int(p) for f in tmp_path.glob("pids-*[0-9]") for p in f.read_text().split()]
    assert len(pids) == 4 and not any(_alive(p) for p in pids)
    assert list((tmp_path / "cache" / "kernels").iterdir()) == []  # no temp folder left


def test_prebuild_calls_records_then_builds_in_rounds(monkeypatch):
    """jit.prebuild_calls: a call's kernels are recorded instead of compiled (the call stops at the first missing
    one), built together, and the call runs again until nothing is missing; the modules' build comes back; a call's
    own errors are ignored; a failed build is reported by name."""
    import importlib
    from scalemm import jit
    g = importlib.import_module("scalemm.gemm")  # the module (scalemm.gemm as an attribute is the function)
    real_build = g.build
    built, rounds = set(), []

    def fake_many(specs, jobs=None):
        rounds.append(sorted(s.name for s in specs))
        built.update(s.name for s in specs if s.name != "bad")
        return [(s, "error" if s.name == "bad" else None) for s in specs]
    monkeypatch.setattr(jit, "is_cached", lambda s: s.name in built)
    monkeypatch.setattr(jit, "build_many", fake_many)
    monkeypatch.setattr(jit, "build", lambda spec, **kw: spec.name)  # loading a cached kernel
    a, b, bad = (jit.KernelSpec(name=n, template="jit_selftest.cu", cutlass=False) for n in ("a", "b", "bad"))

    def call():
        g.build(a)
        g.build(b)  # reached once a is built
    assert jit.prebuild_calls([call, lambda: 1 / 0], modules=("gemm",)) == []
    assert rounds == [["a"], ["b"]] and g.build is real_build
    rounds.clear()
    assert jit.prebuild_calls([lambda: g.build(bad)], modules=("gemm",)) == ["bad"]
    assert rounds == [["bad"]] and g.build is real_build
