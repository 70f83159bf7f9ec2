"""Shared by the Python binding's tests. Every test file runs alone (one rank, no
launcher) and, for the multi-rank ones, under `weftrun -n N -- python3 -m pytest`: every
rank runs the same tests in the same order, so their collectives pair up.

The package and the library come from the environment CTest sets: PYTHONPATH (python/)
and WEFT_LIBRARY (this build's libweft.so).
"""

import pytest

import weft


@pytest.fixture(scope="session")
def ctx():
    c = weft.init()
    yield c
    c.finalize()


@pytest.fixture(scope="session")
def world(ctx):
    return ctx.world
