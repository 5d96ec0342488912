"""The device pipeline (NumPy stand-in in CI, CUDA where a GPU exists)."""
