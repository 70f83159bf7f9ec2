"""Loading: where the package finds libweft.so, what it says when it cannot, that
`import weft` works without torch, and that the binding's declarations match the
library (every exported function declared; every struct laid out as the C compiler
does)."""

import os
import shutil
import subprocess
import sys

import pytest

import weft
from weft import _protos, _structs

PYTHON_DIR = os.path.dirname(os.path.dirname(weft.__file__))


def run_python(code, env_changes, cwd=None):
    env = dict(os.environ)
    for k, v in env_changes.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60)


def test_loaded_library_and_version():
    assert os.path.exists(weft.library_path)
    assert weft.version() == "%d.%d.%d" % weft.version_info()
    assert weft.version() == weft.__version__


def test_weft_library_is_tried_first_and_named_when_wrong():
    r = run_python("import weft", {"WEFT_LIBRARY": "/nonexistent/libweft.so"})
    assert r.returncode != 0
    assert "ImportError" in r.stderr and "WEFT_LIBRARY=/nonexistent/libweft.so" in r.stderr


def test_folder_in_weft_library():
    lib_dir = os.path.dirname(os.environ.get("WEFT_LIBRARY", weft.library_path))
    r = run_python("import weft; print(weft.library_path)", {"WEFT_LIBRARY": lib_dir})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == os.path.join(lib_dir, "libweft.so")


def test_import_error_lists_what_was_tried(tmp_path):
    # A copy of the package outside any build tree or prefix, with no WEFT_LIBRARY.
    shutil.copytree(os.path.join(PYTHON_DIR, "weft"), tmp_path / "weft")
    r = run_python("import weft", {"WEFT_LIBRARY": None, "LD_LIBRARY_PATH": None,
                                   "PYTHONPATH": str(tmp_path)}, cwd=str(tmp_path))
    if r.returncode == 0:
        pytest.skip("a libweft.so is installed for the system loader")
    assert "cannot find libweft.so" in r.stderr
    for what in ("WEFT_LIBRARY (unset)", "build tree", "system loader"):
        assert what in r.stderr


def test_build_tree_found_without_weft_library():
    build_lib = os.path.join(os.path.dirname(PYTHON_DIR), "build", "lib", "libweft.so")
    if not os.path.exists(build_lib):
        pytest.skip("no build/ in the source tree")
    r = run_python("import weft; print(weft.library_path)", {"WEFT_LIBRARY": None})
    assert r.returncode == 0, r.stderr
    assert os.path.samefile(r.stdout.strip(), build_lib)


def test_import_without_torch():
    code = """
import sys
class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is hidden for this test")
sys.meta_path.insert(0, NoTorch())
import numpy as np, weft
with weft.init() as c:
    x = np.ones(3, np.float32)
    c.world.allreduce(x)
    assert x.tolist() == [1.0, 1.0, 1.0]
assert "torch" not in sys.modules
try:
    import weft.torch
except ImportError as e:
    print("weft.torch:", e)
"""
    r = run_python(code, {})
    assert r.returncode == 0, r.stderr
    assert "weft.torch: torch is hidden" in r.stdout


def test_every_exported_function_is_declared():
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm")
    out = subprocess.run([nm, "-D", "--defined-only", weft.library_path],
                         capture_output=True, text=True, check=True).stdout
    exported = {line.split()[-1].split("@")[0] for line in out.splitlines()
                if " T weft_" in line}
    assert exported == set(_protos.TABLE)


def test_structs_match_the_c_layout():
    tool = os.environ.get("TEST_WEFT_STRUCT_LAYOUT")
    if not tool:
        pytest.skip("TEST_WEFT_STRUCT_LAYOUT (tests/python/struct_layout.c, built by CMake) "
                    "not set")
    lines = subprocess.run([tool], capture_output=True, text=True, check=True).stdout.split("\n")
    seen = set()
    for line in filter(None, lines):
        key, value = line.split()
        name, _, field = key.partition(".")
        cls = _structs.C_NAMES[name]
        seen.add(name)
        if field:
            assert getattr(cls, field).offset == int(value), key
        else:
            import ctypes
            assert ctypes.sizeof(cls) == int(value), key
    assert seen == set(_structs.C_NAMES)


def test_info_text_sections():
    from weft import info
    text = info.info_text(summary=False, algorithms=True)
    assert text.startswith("Collective algorithms")
    assert "WEFT_COLL_HIER_SEGMENT=" in text and "Transports (built" not in text
    both = info.info_text(config=True, algorithms=True)
    assert both.index("\nWEFT_") < both.index("\nCollective algorithms")
