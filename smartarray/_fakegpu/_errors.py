"""CUDA driver result codes the fake driver returns, and the exception that carries one."""

from __future__ import annotations

CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_NOT_INITIALIZED = 3
CUDA_ERROR_INVALID_DEVICE = 101
CUDA_ERROR_INVALID_IMAGE = 200
CUDA_ERROR_INVALID_CONTEXT = 201
CUDA_ERROR_PEER_ACCESS_UNSUPPORTED = 217
CUDA_ERROR_INVALID_HANDLE = 400
CUDA_ERROR_NOT_FOUND = 500
CUDA_ERROR_NOT_READY = 600
CUDA_ERROR_ILLEGAL_ADDRESS = 700
CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704
CUDA_ERROR_PEER_ACCESS_NOT_ENABLED = 705
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


class InterpreterGap(CudaError):
    """A kernel calls what the fake driver's interpreter cannot run (an intrinsic with no
    Python body, a warp-level primitive): the fake driver's limit, not a GPU fault. The call
    that ran it fails with ``CUDA_ERROR_NOT_SUPPORTED``, named on stderr; unlike a fault it is
    not sticky, so one such kernel does not fail the rest of the process."""

    def __init__(self, message: str) -> None:
        super().__init__(CUDA_ERROR_NOT_SUPPORTED, message)
