"""`cmake --install` and `pip install` into one prefix: the installed package finds the
libweft.so installed beside it, with no WEFT_LIBRARY and no LD_LIBRARY_PATH."""

import os
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
