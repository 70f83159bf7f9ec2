"""`cmake --install` and `pip install` into one prefix: the installed package finds the
libweft.so installed beside it, with no WEFT_LIBRARY and no LD_LIBRARY_PATH, and carries
its py.typed marker."""

import os
import re
import shutil
import subprocess
import sys

import pytest

import weft

PYTHON_DIR = os.path.dirname(os.path.dirname(weft.__file__))


def test_installed_package_finds_installed_library(tmp_path):
    build, cmake = os.environ.get("TEST_WEFT_BUILD_DIR"), os.environ.get("TEST_WEFT_CMAKE")
    if not build or not cmake:
        pytest.skip("TEST_WEFT_BUILD_DIR and TEST_WEFT_CMAKE are set by CTest")
    for module in ("pip", "setuptools"):
        if subprocess.run([sys.executable, "-c", "import " + module]).returncode != 0:
            pytest.skip("%s is not installed for %s" % (module, sys.executable))
    prefix = tmp_path / "prefix"
    subprocess.run([cmake, "--install", build, "--prefix", str(prefix)], check=True,
                   capture_output=True)
    src = tmp_path / "src"  # pip builds inside its source folder: keep python/ clean
    shutil.copytree(PYTHON_DIR, src, ignore=shutil.ignore_patterns("build", "*.egg-info",
                                                                   "__pycache__"))
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation",
                          "--no-deps", "--no-index", "--disable-pip-version-check",
                          "--prefix", str(prefix), str(src)], capture_output=True, text=True)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    inits = [os.path.join(d, "__init__.py") for d, _, files in os.walk(prefix)
             if d.endswith(os.sep + "weft") and "__init__.py" in files]
    assert len(inits) == 1, inits
    # PEP 561: the marker that tells type checkers the package has type hints.
    assert os.path.isfile(os.path.join(os.path.dirname(inits[0]), "py.typed")), \
        "weft/py.typed was not installed (pyproject.toml's package-data)"
    site = os.path.dirname(os.path.dirname(inits[0]))
    env = {k: v for k, v in os.environ.items() if k not in ("WEFT_LIBRARY", "LD_LIBRARY_PATH")}
    env["PYTHONPATH"] = site
    code = ("import numpy as np, weft\n"
            "print(weft.library_path)\n"
            "with weft.init() as c:\n"
            "    x = np.arange(3.0); c.world.allreduce(x); assert x.tolist() == [0, 1, 2]\n")
    r = subprocess.run([sys.executable, "-c", code], env=env, cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    found = r.stdout.strip()
    assert os.path.realpath(found).startswith(os.path.realpath(prefix)), found


def test_venv_package_runs_under_weftrun(tmp_path):
    """`pip install ./python` into a new virtual environment (its own prefix, no weft
    library there), then from a clean environment (no PYTHONPATH, WEFT_LIBRARY or
    LD_LIBRARY_PATH) `weftrun -n 2 -- <venv>/bin/python -c "... dist.init_process_group
    ('weft') ..."`: the package loads the library of the weftrun that started it."""
    build = os.environ.get("TEST_WEFT_BUILD_DIR")
    if not build:
        pytest.skip("TEST_WEFT_BUILD_DIR is set by CTest")
    try:
        import torch  # noqa: F401
    except ImportError:
        pytest.skip("no PyTorch for %s" % sys.executable)
    venv = tmp_path / "venv"
    made = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages",
                           str(venv)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip("no venv for %s: %s" % (sys.executable, made.stderr.strip()))
    py = str(venv / "bin" / "python")
    src = tmp_path / "src"
    shutil.copytree(PYTHON_DIR, src, ignore=shutil.ignore_patterns("build", "*.egg-info",
                                                                   "__pycache__"))
    pip = subprocess.run([py, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
                          "--no-index", "--disable-pip-version-check", str(src)],
                         capture_output=True, text=True)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    env = {k: v for k, v in os.environ.items()
           if k not in ("WEFT_LIBRARY", "LD_LIBRARY_PATH", "PYTHONPATH", "MASTER_ADDR")
           and not k.startswith("WEFT_")}
    code = ("import torch, torch.distributed as dist, weft, weft.torch\n"
            "dist.init_process_group('weft')\n"
            "t = torch.ones(3) * (dist.get_rank() + 1)\n"
            "dist.all_reduce(t)\n"
            "assert t.tolist() == [3.0] * 3, t\n"
            "assert weft.__file__.startswith(%r), weft.__file__\n"
            "print('VENV-OK', weft.library_path)\n" % str(venv))
    r = subprocess.run([os.path.join(build, "bin", "weftrun"), "-n", "2", "--timeout", "100",
                        "--tag-output", "--", py, "-c", code], env=env, cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    found = re.findall(r"^\[rank \d\] VENV-OK (\S+)$", r.stdout, re.M)
    assert len(found) == 2, r.stdout
    for f in found:
        assert os.path.realpath(f).startswith(os.path.realpath(os.path.join(build, "lib"))), f
