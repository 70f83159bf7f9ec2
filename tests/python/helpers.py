"""Inputs derived from the rank, and the torch skip, for the Python binding's tests."""

import numpy as np
import pytest


def rank_values(rank, count, dtype, seed=0):
    """Small positive integers (1..3) that depend on rank and position: sums and
    products over up to 4 ranks are exact in every weft dtype, bfloat16 included."""
    i = np.arange(count, dtype=np.int64)
    return (((rank * 7 + i * 3 + seed) % 3) + 1).astype(dtype)


def rank_floats(rank, count, dtype, seed=0):
    """Normal random floats drawn from a generator seeded by rank."""
    rng = np.random.default_rng(1000 * seed + rank)
    return rng.standard_normal(count).astype(dtype)


def torch_or_skip():
    """torch, or skip the test with the reason (the interpreter has no PyTorch)."""
    return pytest.importorskip("torch", reason="PyTorch is not importable by this Python "
                                               "interpreter: torch tests skipped")
