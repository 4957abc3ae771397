"""Collection settings for the whole tree (the package doctests are collected from their modules)."""

import importlib.util

# The compiled kernels' module imports numba at its top; without the optional [fast] extra it is not
# collected (protocol.kernels then runs the NumPy code; tests/test_kernels.py skips and says why).
collect_ignore = [] if importlib.util.find_spec("numba") else ["protocol/_numba_kernels.py"]
