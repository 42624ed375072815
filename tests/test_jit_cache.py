"""The JIT cache against damage and odd states: broken entries, interrupted builds, unwritable
or shared caches, a machine without nvcc. Compiles the tiny selftest kernel; runs no GPU code."""
import ctypes
import hashlib
import json
import warnings

import pytest

from scalemm import jit
from scalemm.jit import KernelSpec

pytestmark = pytest.mark.nvcc


def _spec(value=7, name="selftest"):
    return KernelSpec(name=name, template="jit_selftest.cu", params={"VALUE": str(value)}, cutlass=False)


def _value(kernel):
    out = ctypes.c_int64(0)
    kernel.function("scalemm_selftest_value", [ctypes.POINTER(ctypes.c_int64)])(ctypes.byref(out))
    return out.value


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

    def refuse(path, *a, **kw):
        raise OSError(f"{path}: cannot open shared object file")
    monkeypatch.setattr(jit.ctypes, "CDLL", refuse)
    with pytest.warns(RuntimeWarning, match="rebuilding"), pytest.raises(jit.KernelError) as e:
        jit.build(spec)
    msg = str(e.value)
    assert "'selftest'" in msg and "kernel.so" in msg and "build.log" in msg and "cannot open" in msg
