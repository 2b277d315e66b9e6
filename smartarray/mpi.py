"""MPI for SmartArrays: send and receive views moving only their bytes, and halo exchange.

Needs mpi4py (4.x) and an MPI library: ``pip install ".[mpi]"`` (from a clone) installs mpi4py
and MPICH's wheel (``mpiexec`` comes with it). Importing this module does not initialise
MPI (``from mpi4py import MPI`` does).

Use these helpers, not mpi4py's own methods, on SmartArrays and their views::

    import smartarray.mpi as sampi
    sampi.send(comm, a[1, :], dest=0, tag=7)   # downloads row 1 only, if stale on the host
    sampi.recv(comm, a[0, :], source=0, tag=7) # host write of row 0; the next kernel uploads it
    sampi.exchange_halos(comm, a, axis=0, width=1)

Messages go through the host copy (any MPI library). A CUDA-aware path through the device
copy (mpi4py 4 takes ``__dlpack__`` / ``__cuda_array_interface__`` objects) is not provided:
pass ``a.gpu()`` to mpi4py yourself, then ``a.mark_changed('gpu')`` after a receive.
"""

from __future__ import annotations

try:
    import mpi4py  # noqa: F401 - only checked here; MPI itself is initialised by the user
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "smartarray.mpi needs mpi4py and an MPI library: from a clone of smartarray, "
        "pip install '.[mpi]' (mpi4py>=4 and the mpich wheel)"
    ) from exc

from ._distributed.mpi_halos import (
    Request,
    exchange_halos,
    irecv,
    isend,
    recv,
    send,
    sendrecv,
    waitall,
)

__all__ = [
    "Request",
    "exchange_halos",
    "irecv",
    "isend",
    "recv",
    "send",
    "sendrecv",
    "waitall",
]
