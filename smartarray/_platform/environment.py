"""The environment variables smartarray reads, parsed strictly.

A switch such as ``SMARTARRAY_STRICT`` is on for ``1``, ``true``, ``yes``, ``on`` and off for
``0``, ``false``, ``no``, ``off`` or empty (case-insensitive, surrounding spaces ignored);
anything else is refused with an error naming the variable, rather than guessed: reading
``false`` as on once made a GPU program run on the simulator. This module imports
nothing from smartarray or numba: ``smartarray/__init__`` reads ``SMARTARRAY_STRICT`` before
numba.cuda loads. It is the one place that reads the environment (the fake driver's switches
too; ``tests/structure/test_layers.py`` names the other readers left, with their reasons).
"""

from __future__ import annotations

import os

_ON = ("1", "true", "yes", "on")
_OFF = ("", "0", "false", "no", "off")


def parse_flag(name: str, value: str) -> bool:
    """Whether the switch ``name`` set to ``value`` is on.

    Raises
    ------
    ValueError
        ``value`` is neither on nor off; the message names ``name`` and what is accepted.
    """
    word = value.strip().lower()
    if word in _ON:
        return True
    if word in _OFF:
        return False
    raise ValueError(
        f"environment variable {name} must be a boolean: 1, true, yes, on (on) or 0, false, "
        f"no, off, empty (off), case-insensitive; got {value!r}"
    )


def text(name: str, default: str = "") -> str:
    """The value of the environment variable ``name``, surrounding spaces stripped (unset:
    ``default``): for a value with a grammar of its own (a size, a list, a preset's name)."""
    value = os.environ.get(name)
    return default if value is None else value.strip()


def flag(name: str) -> bool:
    """Whether the switch ``name`` is on in the environment (unset: off); see :func:`parse_flag`."""
    return parse_flag(name, os.environ.get(name, ""))


def integer(name: str, default: int) -> int:
    """The integer in the environment variable ``name`` (unset or empty: ``default``).

    Raises
    ------
    ValueError
        The value is not a base-10 integer; the message names ``name``.
    """
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw, 10)
    except ValueError:
        raise ValueError(f"environment variable {name} must be an integer, got {raw!r}") from None
