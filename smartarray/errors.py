"""Exception and warning classes of smartarray.

Every class subclasses what users already catch (``ValueError``, ``TypeError``,
``MemoryError``, ``RuntimeError``), so ``except ValueError`` keeps working, and
``except SmartArrayError`` catches everything the library raises on purpose.
"""

from __future__ import annotations

# What numba.cuda raises without a CUDA target (the simulator's own class under the simulator):
# NoDeviceError subclasses it, so ``except CudaSupportError`` keeps working.
from numba.cuda.cudadrv.error import CudaSupportError as _CudaSupportError

__all__ = [
    "CoherenceError",
    "DeviceMemoryError",
    "NoDeviceError",
    "PerformanceWarning",
    "RegistrationError",
    "SmartArrayError",
    "SmartArrayWarning",
    "TransferError",
    "TransferGuardError",
]


class SmartArrayError(Exception):
    """Base class of every error smartarray raises on purpose."""


class RegistrationError(SmartArrayError, ValueError):
    """A host array was deregistered without being registered, or overlaps another one.

    Examples
    --------
    >>> import numpy as np, smartarray as sa
    >>> try:
    ...     sa.deregister(np.zeros(4))
    ... except sa.RegistrationError as exc:
    ...     print(type(exc).__name__)
    RegistrationError
    """


class TransferError(SmartArrayError, RuntimeError):
    """A copy between host and device failed; the destination is unchanged or marked stale."""


class CoherenceError(SmartArrayError, RuntimeError):
    """An operation would read or overwrite data that is not current where it runs."""


class DeviceMemoryError(SmartArrayError, MemoryError):
    """A device copy does not fit, even after evicting every array that may be evicted.

    Raised by an access that needs a device copy (a kernel launch, ``get('gpu')``) when the
    device-memory budget (:func:`~smartarray.set_device_budget`) or the GPU itself has no room
    left. Nothing moved for the access that failed; arrays evicted to make room keep their
    data on the host.

    Attributes
    ----------
    array : str
        The name of the array whose device copy did not fit.
    nbytes : int
        The bytes it needs.
    budget : int or None
        The budget in force (None: none, the GPU itself ran out).
    resident : list of tuple
        ``(name, nbytes, why it stays)`` of each device copy still resident.
    """

    def __init__(
        self,
        message: str,
        array: str = "",
        nbytes: int = 0,
        budget: int | None = None,
        resident: list[tuple[str, int, str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.array = array
        self.nbytes = nbytes
        self.budget = budget
        self.resident = list(resident or [])


class NoDeviceError(SmartArrayError, _CudaSupportError):
    """Device work was attempted in a process with no CUDA target (no GPU and driver, no simulator).

    Raised where numba.cuda first fails to initialise its driver (a kernel launch, ``to_device``,
    ``pinned=True``, ``stream()``, ``a.gpu()``, ...). It names the two ways out: a machine with an
    NVIDIA GPU and its driver, or numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, or
    ``SMARTARRAY_STRICT=1`` for the simulator with strict checks), set in the environment before
    ``numba.cuda`` is imported. numba's own error is chained as ``__cause__``. A subclass of
    numba's ``CudaSupportError``, so code that catches that keeps working.
    """


class SmartArrayWarning(UserWarning):
    """Base class of the warnings smartarray issues (performance hints among them)."""


class TransferGuardError(SmartArrayError, RuntimeError):
    """A transfer was refused by :func:`~smartarray.transfer_guard`; nothing moved.

    Attributes
    ----------
    array : str
        The name of the array (or a description of the device array) concerned.
    direction : str
        ``'h2d'``, ``'d2h'`` or ``'d2d'``.
    nbytes : int
        The bytes the refused copy would have moved.
    reason : str
        Why the copy was needed, e.g. ``'device use'`` or ``'host read'``.
    line : str
        The user's source line that asked for it (``'file.py:42'``), or ``''``.
    """

    def __init__(
        self, message: str, array: str, direction: str, nbytes: int, reason: str, line: str
    ) -> None:
        super().__init__(message)
        self.array = array
        self.direction = direction
        self.nbytes = nbytes
        self.reason = reason
        self.line = line


class PerformanceWarning(SmartArrayWarning):
    """A pattern that moves far more bytes than the program needs; the message names the fix.

    Issued once per array and cause. Silence it with
    ``warnings.filterwarnings("ignore", category=smartarray.PerformanceWarning)``.
    """


class _DtypeMismatchError(SmartArrayError, TypeError, ValueError):
    """A copy between arrays of different dtypes: numba.cuda raises ``TypeError`` there, and
    smartarray raised ``ValueError``; both ``except`` clauses catch it."""
