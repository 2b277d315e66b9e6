"""Exception and warning classes of smartarray.

Every class subclasses what users already catch (``ValueError``, ``TypeError``,
``MemoryError``, ``RuntimeError``), so ``except ValueError`` keeps working, and
``except SmartArrayError`` catches everything the library raises on purpose.
"""

from __future__ import annotations

__all__ = [
    "CoherenceError",
    "RegistrationError",
    "SmartArrayError",
    "SmartArrayWarning",
    "TransferError",
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


class SmartArrayWarning(UserWarning):
    """Base class of the warnings smartarray issues (performance hints among them)."""


class _DtypeMismatchError(SmartArrayError, TypeError, ValueError):
    """A copy between arrays of different dtypes: numba.cuda raises ``TypeError`` there, and
    smartarray raised ``ValueError``; both ``except`` clauses catch it."""
