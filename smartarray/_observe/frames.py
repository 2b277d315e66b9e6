"""Find the user's source line behind a transfer: the first frame outside the libraries.

Walking the stack costs a few microseconds, so the ledger asks only while someone listens
(a trace, a DEBUG logger, NVTX, a transfer guard in a logging or refusing mode).
"""

from __future__ import annotations

import sys
from types import FrameType

__all__ = ["user_frame"]

# Modules whose frames are library code, never the line a user wrote. numba-cuda's modules
# are named ``numba.cuda...`` (through its redirector) or ``numba_cuda...``.
_LIBRARY_PREFIXES = ("smartarray", "numba", "numba_cuda", "numpy", "wrapt", "contextlib")


_DOTTED = tuple(prefix + "." for prefix in _LIBRARY_PREFIXES)
_verdicts: dict[str, bool] = {}  # module name -> library or not (a handful of names)


def _is_library(module: str) -> bool:
    verdict = _verdicts.get(module)
    if verdict is None:
        verdict = _verdicts[module] = module in _LIBRARY_PREFIXES or module.startswith(_DOTTED)
    return verdict


def user_frame(skip: int = 1) -> tuple[str, int]:
    """Return ``(filename, lineno)`` of the first frame outside smartarray, numba and NumPy.

    Parameters
    ----------
    skip : int, optional
        Frames to skip above the caller before looking.

    Returns
    -------
    tuple of (str, int)
        ``('', 0)`` when every frame on the stack is library code.
    """
    try:
        frame: FrameType | None = sys._getframe(skip + 1)
    except ValueError:
        return "", 0
    while frame is not None:
        module = frame.f_globals.get("__name__")
        if not isinstance(module, str) or not _is_library(module):
            return frame.f_code.co_filename, frame.f_lineno
        frame = frame.f_back
    return "", 0
