"""Finding libweft.so and loading it with ctypes.

Order: the WEFT_LIBRARY environment variable (a file, or a folder holding libweft.so);
the build tree when the package is used in place (python/weft -> build/lib); the lib
folder of the prefix the package was installed into (<prefix>/lib/pythonX.Y/site-packages
-> <prefix>/lib, also for Debian's <prefix>/local/lib/python3.X/dist-packages); the
library of weftrun: the lib folder beside the weftrun that started this process
(WEFTRUN_LIBDIR, which weftrun sets), else beside the first weftrun on PATH, so a package
installed anywhere (a virtual environment) runs with the library its launcher came with;
then the system loader (LD_LIBRARY_PATH, ld.so.cache).
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Tuple

from . import _protos

_NAMES = ("libweft.so", "libweft.so.1")
_HERE = os.path.dirname(os.path.abspath(__file__))


def _in_folder(folder):
    return [os.path.join(folder, n) for n in _NAMES]


def _build_tree():
    # python/weft/_lib.py -> <source>/build/lib
    return _in_folder(os.path.join(_HERE, os.pardir, os.pardir, "build", "lib"))


def _install_prefix():
    site = os.path.dirname(_HERE)
    if os.path.basename(site) not in ("site-packages", "dist-packages"):
        return []
    pyver = os.path.dirname(site)  # <libdir>/pythonX.Y
    libdir = os.path.dirname(pyver)
    prefix = os.path.dirname(libdir)
    prefixes = [prefix]
    if os.path.basename(prefix) == "local":  # Debian's pip: <prefix>/local/lib/python3/...
        prefixes.append(os.path.dirname(prefix))
    folders = [libdir]
    multiarch = getattr(sys.implementation, "_multiarch", None)
    for p in prefixes:
        folders += [os.path.join(p, "lib"), os.path.join(p, "lib64")]
        if multiarch:
            folders.append(os.path.join(p, "lib", multiarch))
    out = []
    for f in folders:
        for p in _in_folder(f):
            if p not in out:
                out.append(p)
    return out


def _launcher():
    folders = []
    env = os.environ.get("WEFTRUN_LIBDIR")
    if env:
        folders.append(env)
    for d in os.environ.get("PATH", "").split(os.pathsep):
        exe = os.path.join(d, "weftrun") if d else ""
        if exe and os.access(exe, os.X_OK):
            folders.append(os.path.join(os.path.dirname(os.path.realpath(exe)), os.pardir,
                                        "lib"))
            break
    return [p for f in folders for p in _in_folder(f)]


def _open(path):
    return ctypes.CDLL(path)


def load() -> Tuple[ctypes.CDLL, str]:
    """Load libweft and declare its functions; ImportError says everything tried."""
    tried = []
    env = os.environ.get("WEFT_LIBRARY")
    if env:
        path = os.path.join(env, _NAMES[0]) if os.path.isdir(env) else env
        try:
            return _protos.declare(_open(path)), path
        except OSError as e:
            raise ImportError(
                "weft: cannot load libweft from WEFT_LIBRARY=%s: %s" % (env, e)) from None
    tried.append("WEFT_LIBRARY (unset)")
    launcher = _launcher()
    if not launcher:
        tried.append("weftrun's lib folder (WEFTRUN_LIBDIR unset, no weftrun on PATH)")
    for where, paths in (("build tree", _build_tree()), ("install prefix", _install_prefix()),
                         ("weftrun's", launcher)):
        for p in paths:
            p = os.path.normpath(p)
            if not os.path.exists(p):
                tried.append("%s %s (absent)" % (where, p))
                continue
            try:
                return _protos.declare(_open(p)), p
            except OSError as e:
                tried.append("%s %s (%s)" % (where, p, e))
    for name in reversed(_NAMES):
        try:
            return _protos.declare(_open(name)), name
        except OSError as e:
            tried.append("system loader %s (%s)" % (name, e))
    raise ImportError(
        "weft: cannot find libweft.so. Tried: " + "; ".join(tried) +
        ". Build it (./scripts/build.sh), install it (cmake --install build), or set "
        "WEFT_LIBRARY to the file.")


lib, path = load()
