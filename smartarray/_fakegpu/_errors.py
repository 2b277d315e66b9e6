"""CUDA driver result codes the fake driver returns, and the exception that carries one."""

from __future__ import annotations

CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_NOT_INITIALIZED = 3
CUDA_ERROR_INVALID_DEVICE = 101
CUDA_ERROR_INVALID_IMAGE = 200
CUDA_ERROR_INVALID_CONTEXT = 201
CUDA_ERROR_INVALID_HANDLE = 400
CUDA_ERROR_NOT_FOUND = 500
CUDA_ERROR_NOT_READY = 600
CUDA_ERROR_ILLEGAL_ADDRESS = 700
CUDA_ERROR_MISALIGNED_ADDRESS = 716
CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712
CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713
CUDA_ERROR_LAUNCH_FAILED = 719
CUDA_ERROR_NOT_SUPPORTED = 801
CUDA_ERROR_UNKNOWN = 999


class CudaError(Exception):
    """A driver call fails with ``code``; ``message`` goes to the fake driver's log."""

    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(message)
        self.code = code
