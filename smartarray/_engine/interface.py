"""What the layers above the engine, other than the array's own, may ask of a view's engine side.

A view of a buffer (a SmartArray: the array layer implements :class:`BufferView` in its slots
and class body) is read through these functions, never through its private slots: the interop
layer (the CUDA Array Interface, DLPack, foreign device objects) makes a view's bytes current,
orders streams and hands memory out with them and the :class:`~smartarray._engine.buffer.Buffer`
they return, whose named operations change its state. ``tests/structure/test_layers.py``
checks that no layer reads another layer's private names outside such an interface.

- :func:`buffer`: the view's base buffer, shared by every view of one array;
- :func:`span`, :func:`offset`: where the view's bytes lie in it;
- :func:`host_export`, :func:`device_handout`: the view's current data handed out as an ndarray
  (tracked: refreshed after device writes) or as a device array (never evicted while held).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from .buffer import Buffer

__all__ = ["BufferView", "buffer", "device_handout", "host_export", "offset", "span"]


class BufferView(Protocol):
    """What this interface reads of a view of a buffer (SmartArray implements it; the engine
    never names the array class, as for :class:`~smartarray._engine.buffer.ArmableView`)."""

    @property
    def _buf(self) -> Buffer: ...  # the base buffer

    @property
    def _offset(self) -> int: ...  # the first element's byte offset in the buffer

    @property
    def _lo(self) -> int: ...  # the view's bytes in the buffer: [_lo, _hi)

    @property
    def _hi(self) -> int: ...

    def _export(self, readonly: bool, unannounced: bool = False) -> np.ndarray: ...

    def _device_handout(self, wait: bool, where: str | None = None) -> Any: ...


def buffer(view: BufferView) -> Buffer:
    """The base buffer of ``view``: its named operations (``acquire``, ``sync``,
    ``order_before``, ``exported``, ...) under its ``lock`` are how a caller changes it."""
    return view._buf


def span(view: BufferView) -> tuple[int, int]:
    """The bytes ``[lo, hi)`` of the buffer that ``view``'s elements lie in."""
    return view._lo, view._hi


def offset(view: BufferView) -> int:
    """The byte offset of ``view``'s first element in its buffer."""
    return view._offset


def host_export(view: BufferView, readonly: bool, unannounced: bool = False) -> np.ndarray:
    """``view``'s host data as an ndarray handed out: tracked (refreshed after device writes),
    not synced (the caller made it current under the buffer's lock); ``unannounced``: for a
    consumer that writes without calling ``mark_changed`` (each refresh records a host write)."""
    return view._export(readonly, unannounced)


def device_handout(view: BufferView, wait: bool, where: str | None = None) -> Any:
    """A writable device array over ``view``'s device bytes, made current first (``where``: the
    device location, by default the current device's), never evicted while it or a view of it
    is held; ``wait``: the device work queued on the buffer finished first (without it the
    caller orders its work after the buffer's)."""
    return view._device_handout(wait, where)
