"""Collection settings for the whole tree (the package doctests are collected from their modules)."""

# The compiled kernels' module has no doctests and imports numba (the optional [fast] extra) at its
# top: collecting it would fail without numba and compile every kernel with it. protocol.kernels
# imports it on first use; tests/test_kernels.py tests it (and skips, saying why, without numba).
collect_ignore = ["protocol/_numba_kernels.py"]
