"""What the PyTorch examples do before they import torch and weft: one BLAS and OpenMP
thread per rank (the ranks share the cores), and the binding next door (python/, with the
library in build/) when weft is not installed. Import it first."""

import importlib.util
import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

if importlib.util.find_spec("weft") is None:  # found without importing it yet
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "python"))
