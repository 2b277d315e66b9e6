"""The transfer guard: allow, log or refuse copies between host and device, per thread.

:func:`transfer_guard` sets a mode for a ``with`` block, in the current thread only; the
environment variable ``SMARTARRAY_TRANSFER_GUARD`` (and ``SMARTARRAY_TRANSFER_GUARD_H2D``,
``_D2H``, ``_D2D`` for one direction) sets it for a whole run, as ``JAX_TRANSFER_GUARD`` does
for JAX. The memory layer calls :func:`check` before it issues a copy, and SmartArray checks
every copy of a plan before the first one, so a refused transfer moves nothing and changes
no validity.

Modes (JAX's names):

``allow``
    Every transfer goes ahead (the default).
``log``
    Implicit transfers are logged (``logging.getLogger("smartarray")``, WARNING) with the
    array, bytes, reason and source line; explicit ones go ahead silently.
``disallow``
    Implicit transfers raise :class:`~smartarray.errors.TransferGuardError`; explicit ones go
    ahead.
``log_explicit``
    Every transfer is logged.
``disallow_explicit``
    Every transfer raises.

Explicit transfers are those the user asked for by name: :func:`smartarray.to_device`,
``copy_to_host``, ``copy_to_device``, :meth:`SmartArray.get` / ``host()`` / ``gpu()``, and
``SmartArray(..., where='gpu')``. Everything else (a kernel argument made current, a host
read of device data, an ``njit`` argument, the refresh of a held host array, an element
read of a device array) is implicit.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ._observe import frames as _frames
from ._platform import environment as _environment
from .errors import TransferGuardError

__all__ = ["EXPLICIT_REASONS", "MODES", "check", "transfer_guard"]

#: The guard's modes, from most to least permissive.
MODES = ("allow", "log", "log_explicit", "disallow", "disallow_explicit")

#: The directions a guard can cover.
DIRECTIONS = ("h2d", "d2h", "d2d")

#: Reasons (as the memory layer and SmartArray record them) of transfers the user asked for.
EXPLICIT_REASONS = frozenset(
    {"to_device", "copy_to_host", "copy_to_device", "explicit get", "construction"}
)

ENV = "SMARTARRAY_TRANSFER_GUARD"


def _check_mode(mode: Any, name: str = "mode") -> str:
    if mode not in MODES:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, MODES))}, got {mode!r}")
    return mode


def _check_direction(direction: Any) -> tuple[str, ...]:
    if direction is None or direction == "all":
        return DIRECTIONS
    accepted = "'h2d', 'd2h', 'd2d', 'all' (or None) or a non-empty sequence of those"
    if isinstance(direction, str):
        items: tuple[Any, ...] = (direction,)
    else:
        try:
            items = tuple(direction)
        except TypeError:
            raise TypeError(
                f"direction must be {accepted}, got {type(direction).__name__}"
            ) from None
        if not items:  # would guard nothing, silently
            raise ValueError(f"direction must be {accepted}, got an empty {direction!r}")
    for d in items:
        if d not in DIRECTIONS:
            raise ValueError(f"direction must be {accepted}, got {direction!r}")
    return items


def _from_environment() -> dict[str, str]:
    modes: dict[str, str] = {}
    value = _environment.text(ENV)
    if value:
        mode = _check_mode(value, f"environment variable {ENV}")
        modes = dict.fromkeys(DIRECTIONS, mode)
    for d in DIRECTIONS:
        var = f"{ENV}_{d.upper()}"
        value = _environment.text(var)
        if value:
            modes[d] = _check_mode(value, f"environment variable {var}")
    return {d: m for d, m in modes.items() if m != "allow"}


# The process-wide modes from the environment, read once at import (as JAX does).
_env_modes: dict[str, str] = _from_environment()
# How many transfer_guard blocks are open in all threads: when none is and the environment
# sets nothing, check() returns at once.
_open_blocks = 0
_count_lock = threading.Lock()
_local = threading.local()


def _modes() -> dict[str, str]:
    modes = getattr(_local, "modes", None)
    return _env_modes if modes is None else modes


def armed() -> bool:
    """Whether any guard (a ``with`` block in any thread, or the environment) may act."""
    return bool(_open_blocks or _env_modes)


@contextmanager
def bypassed() -> Iterator[None]:
    """No guard acts in this thread inside the block: bookkeeping copies the user did not ask
    for, which must happen for the state's invariants (a consolidation no allowed way can do).
    """
    previous = getattr(_local, "modes", None)
    _local.modes = {}
    try:
        yield
    finally:
        _local.modes = previous


def refuses(direction: str, reason: str) -> bool:
    """Whether :func:`check` would refuse a ``direction`` copy made for ``reason`` now."""
    mode = _modes().get(direction, "allow")
    explicit = reason in EXPLICIT_REASONS
    return mode == "disallow_explicit" or (mode == "disallow" and not explicit)


def check(direction: str, nbytes: int, reason: str, array: str) -> bool:
    """Apply the current thread's guard to a copy about to be issued.

    Returns
    -------
    bool
        True when the guard wants the copy logged.

    Raises
    ------
    TransferGuardError
        The guard refuses the copy (before anything moved).
    """
    if not (_open_blocks or _env_modes):
        return False
    mode = _modes().get(direction, "allow")
    if mode == "allow":
        return False
    explicit = reason in EXPLICIT_REASONS
    if mode == "disallow_explicit" or (mode == "disallow" and not explicit):
        filename, lineno = _frames.user_frame(1)
        line = f"{os.path.basename(filename)}:{lineno}" if filename else ""
        kind = "explicit" if explicit else "implicit"
        raise TransferGuardError(
            f"transfer guard ({mode!r}) refused an {kind} {direction} copy of {nbytes} B of "
            f"array {array or '?'} ({reason})"
            + (f" at {line}" if line else "")
            + "; "
            + (
                "move the data explicitly before the block (a.get('gpu'), a.get('host'), "
                f"to_device, copy_to_host are allowed), or allow it there with "
                f"transfer_guard('allow', direction={direction!r})"
                if not explicit
                else "mode 'disallow' allows explicit transfers"
            ),
            array,
            direction,
            nbytes,
            reason,
            line,
        )
    return mode == "log_explicit" or (mode == "log" and not explicit)


@contextmanager
def transfer_guard(mode: str, direction: Any = "all") -> Iterator[None]:
    """Allow, log or refuse transfers between host and device inside a ``with`` block.

    The setting holds in the current thread only and is restored on exit; blocks nest (the
    inner one wins for the directions it names). A refused transfer raises before it is
    issued, so it moves nothing and leaves every copy's validity as it was. One kind of copy
    is never refused: a *consolidation* (keeping a copy's valid bytes to a few runs), which is
    bookkeeping rather than a transfer you asked for; it copies only the ways the guard allows
    when one exists, and is counted and traced with reason ``'consolidation'``.

    Parameters
    ----------
    mode : {'allow', 'log', 'disallow', 'log_explicit', 'disallow_explicit'}
        ``log`` and ``disallow`` act on implicit transfers only (explicit ones, such as
        :func:`smartarray.to_device`, ``copy_to_host`` and :meth:`SmartArray.get`, go
        ahead); the ``_explicit`` forms act on every transfer. Logging goes to
        ``logging.getLogger("smartarray")`` at WARNING.
    direction : {'all', 'h2d', 'd2h', 'd2d'} or sequence of them, optional
        The directions the mode applies to (default all three).

    Raises
    ------
    ValueError
        Unknown ``mode`` or ``direction``.

    Examples
    --------
    >>> import numpy as np, smartarray as sa
    >>> a = sa.SmartArray(np.arange(4.0))
    >>> d = a.gpu()  # explicit: allowed
    >>> a.gpu_changed()  # as a kernel would
    >>> with sa.transfer_guard("disallow", direction="d2h"):
    ...     try:
    ...         float(a.sum())  # an implicit download
    ...     except sa.TransferGuardError as exc:
    ...         print(exc.direction, exc.nbytes, exc.reason)
    d2h 32 host read
    >>> a.is_valid("host")
    False
    """
    global _open_blocks
    mode = _check_mode(mode)
    directions = _check_direction(direction)
    previous = getattr(_local, "modes", None)
    modes = dict(_modes())
    for d in directions:
        modes[d] = mode
    _local.modes = modes
    with _count_lock:
        _open_blocks += 1
    try:
        yield
    finally:
        _local.modes = previous
        with _count_lock:
            _open_blocks -= 1
