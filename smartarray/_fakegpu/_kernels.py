"""Kernels of the fake CUDA driver (filled in below)."""
