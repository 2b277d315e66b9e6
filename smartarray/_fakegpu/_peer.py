"""Peer access between the fake devices, and copies from one device's memory to another's.

``SMARTARRAY_FAKE_GPU_PEER`` says which devices can access which others' memory: ``1`` (the
default) every pair of distinct devices, ``0`` none, or a comma-separated list of directed
pairs ``A:B`` ("device A can access device B's memory", as ``cuDeviceCanAccessPeer(A, B)``).
Access is enabled per context and one way, as in CUDA (``cuCtxEnablePeerAccess`` from the
current context to a peer context); a kernel that touches another device's memory without it
faults (:mod:`._kernels`). Copies between devices need no peer access: CUDA stages them through
the host when the devices cannot reach each other. Every copy from one device's memory to
another's, by any entry point, is counted in ``peer_copies`` and ``peer_bytes`` (keyed by
``(source device, destination device)``).
"""

from __future__ import annotations

import ctypes

from .._platform import environment as _environment
from ._errors import (
    CUDA_ERROR_INVALID_CONTEXT,
    CUDA_ERROR_INVALID_VALUE,
    CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED,
    CUDA_ERROR_PEER_ACCESS_NOT_ENABLED,
    CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
    CudaError,
)
from ._state import DriverState

__all__ = ["PeerEntries", "allowed_pairs"]

# CUdevice_P2PAttribute: PERFORMANCE_RANK, ACCESS_SUPPORTED, NATIVE_ATOMIC_SUPPORTED,
# CUDA_ARRAY_ACCESS_SUPPORTED, ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED.
_P2P_ATTRIBUTES = range(1, 6)


def allowed_pairs(count: int) -> frozenset[tuple[int, int]]:
    """The directed pairs ``(device, peer)`` of ``SMARTARRAY_FAKE_GPU_PEER`` among ``count``.

    Raises
    ------
    ValueError
        When the variable is neither ``0``, ``1`` nor a list of pairs of existing devices.
    """
    value = _environment.text("SMARTARRAY_FAKE_GPU_PEER", "1")
    every = frozenset((a, b) for a in range(count) for b in range(count) if a != b)
    if value in ("", "1"):
        return every
    if value == "0":
        return frozenset()
    pairs = set()
    for part in value.split(","):
        pieces = part.split(":")
        try:
            a, b = (int(p) for p in pieces)
        except ValueError:
            a = b = -1
        if (a, b) not in every:
            raise ValueError(
                f"SMARTARRAY_FAKE_GPU_PEER={value!r}: expected 1 (every pair of devices can "
                "access each other), 0 (none) or directed pairs 'A:B' of two distinct devices "
                f"below SMARTARRAY_FAKE_GPU_DEVICES={count}, comma-separated ('0:1,1:0')"
            )
        pairs.add((a, b))
    return frozenset(pairs)


def _put(ptr: int, ctype: type, value: object) -> None:
    if not ptr:
        raise CudaError(CUDA_ERROR_INVALID_VALUE, "a NULL output pointer")
    ctypes.cast(ptr, ctypes.POINTER(ctype))[0] = value


class PeerEntries(DriverState):
    """Mixin of :class:`~smartarray._fakegpu.driver.FakeDriver`.

    It expects ``peer_allowed`` (:func:`allowed_pairs`), ``peer_enabled`` (a set of directed
    device pairs), ``peer_copies`` and ``peer_bytes`` (``Counter``) on the driver.
    """

    def can_access(self, device: int, owner: int) -> bool:
        """Whether a kernel on ``device`` may touch ``owner``'s memory now."""
        return device == owner or (device, owner) in self.peer_enabled

    def count_copy(self, dst: int, src: int, n: int) -> None:
        """Count a copy of ``n`` bytes if it goes from one device's memory to another's."""
        a, b = self.heaps.device_of(src), self.heaps.device_of(dst)
        if a is not None and b is not None and a != b:
            self.peer_copies[(a, b)] += 1
            self.peer_bytes[(a, b)] += n

    def _context_device(self, ctx: int | None) -> int:
        device = self._ctx_device.get(ctx or 0)
        if device is None:
            raise CudaError(CUDA_ERROR_INVALID_CONTEXT, f"context {ctx or 0:#x}")
        return device

    # queries ---------------------------------------------------------------------------------
    def cuDeviceCanAccessPeer(self, p: int, dev: int, peer: int) -> None:
        pair = (self._device(dev), self._device(peer))
        _put(p, ctypes.c_int, int(pair in self.peer_allowed))

    def cuDeviceGetP2PAttribute(self, p: int, attrib: int, src: int, dst: int) -> None:
        pair = (self._device(src), self._device(dst))
        if attrib not in _P2P_ATTRIBUTES or pair[0] == pair[1]:
            raise CudaError(CUDA_ERROR_INVALID_VALUE, f"P2P attribute {attrib} of {pair}")
        allowed = pair in self.peer_allowed
        _put(p, ctypes.c_int, 0 if attrib in (1, 5) else int(allowed))

    # enabling -----------------------------------------------------------------------------------
    def cuCtxEnablePeerAccess(self, ctx: int | None, flags: int) -> None:
        # The checks in the order CUDA's reference page lists the errors.
        device = self._context_device(self._context())
        peer = self._context_device(ctx)
        if peer == device:
            raise CudaError(CUDA_ERROR_INVALID_CONTEXT, "peer access to the current context")
        if flags:
            raise CudaError(CUDA_ERROR_INVALID_VALUE, f"cuCtxEnablePeerAccess flags {flags}")
        if (device, peer) not in self.peer_allowed:
            raise CudaError(
                CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
                f"device {device} cannot access device {peer} (SMARTARRAY_FAKE_GPU_PEER)",
            )
        if (device, peer) in self.peer_enabled:
            raise CudaError(
                CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, f"device {device} to device {peer}"
            )
        self.peer_enabled.add((device, peer))

    def cuCtxDisablePeerAccess(self, ctx: int | None) -> None:
        device = self._context_device(self._context())
        peer = self._context_device(ctx)
        if (device, peer) not in self.peer_enabled:
            raise CudaError(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, f"device {device} to {peer}")
        self.peer_enabled.discard((device, peer))

    # copies -------------------------------------------------------------------------------------
    def _peer_copy(
        self, dst: int, dst_ctx: int | None, src: int, src_ctx: int | None, n: int
    ) -> None:
        """Check that each pointer is its named context's device memory."""
        for ptr, ctx, what in ((dst, dst_ctx, "destination"), (src, src_ctx, "source")):
            device = self._context_device(ctx)
            if self.heaps.device_of(ptr) != device:
                raise CudaError(
                    CUDA_ERROR_INVALID_VALUE,
                    f"cuMemcpyPeer {what} {ptr:#x} is not device {device}'s memory",
                )

    def cuMemcpyPeer(
        self, dst: int, dst_ctx: int | None, src: int, src_ctx: int | None, n: int
    ) -> None:
        # Synchronous, and serialised with both devices' work (the runtime's cudaMemcpyPeer):
        # it runs once everything queued before it on either device ran.
        self._peer_copy(dst, dst_ctx, src, src_ctx, n)
        devices = {self._context_device(dst_ctx), self._context_device(src_ctx)}
        before = [op for op in self.queue.ops if op.stream.device in devices]
        self._copy(dst, src, n, self.queue.stream(0), "peer", wait=True, after=before)

    def cuMemcpyPeerAsync(
        self,
        dst: int,
        dst_ctx: int | None,
        src: int,
        src_ctx: int | None,
        n: int,
        stream: int | None,
    ) -> None:
        self._peer_copy(dst, dst_ctx, src, src_ctx, n)
        self._copy(dst, src, n, self.queue.stream(stream), "peerAsync", wait=False)
