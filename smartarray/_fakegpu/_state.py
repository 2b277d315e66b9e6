"""What the fake driver's entry-point groups share: the state FakeDriver holds, its helpers.

:class:`~._copies.MemoryEntries`, :class:`~._launch.ExecutionEntries` and
:class:`~._peer.PeerEntries` are parts of one class, :class:`~.driver.FakeDriver`; each inherits
:class:`DriverState`, which names (for readers and type checkers) the attributes
``FakeDriver.__init__`` sets and the helpers one part calls on another.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from ._clock import Clock
    from ._memory import DeviceHeaps, HostRegistry
    from ._queue import Op, Queue, Stream

__all__ = ["DriverState"]


class DriverState:
    """The fake driver's state and helpers, as its entry-point groups use them."""

    device_count: int
    heaps: DeviceHeaps  # device memory, one heap per device
    host: HostRegistry  # page-locked and registered host memory
    queue: Queue  # streams, events and the queued work
    clock: Clock | None  # modelled time (SMARTARRAY_FAKE_GPU_TIMING), or None
    contexts: dict[int, int]  # device -> its primary context's handle
    mempools: dict[int, int]  # device -> its memory pool's handle
    peer_allowed: frozenset[tuple[int, int]]  # (device, peer) pairs that may be enabled
    peer_enabled: set[tuple[int, int]]
    peer_copies: Counter[tuple[int, int]]  # (from, to) device: copies
    peer_bytes: Counter[tuple[int, int]]  # (from, to) device: bytes
    libraries: dict[int, bytes]
    kernels: dict[int, str]  # CUkernel / CUfunction handle -> entry name
    _kernel_attributes: dict[int, dict[int, int]]  # kernel handle -> what its cubin records
    globals: dict[tuple[int, str, int], int]  # (library, name, device) -> address
    managed: dict[int, int]  # start of a managed allocation -> its cuMemAllocManaged flags
    launch_stack: list[tuple[str, str]]  # (file, function) of the latest launch's callers
    run_kernels: bool  # whether a launched kernel's body runs (see FakeDriver.run_kernels)
    _handle_ids: Iterator[int]
    _ctx_device: dict[int, int]  # context handle -> device

    if TYPE_CHECKING:  # defined by FakeDriver or by another group

        def _run(self, fn: Callable[[], None]) -> None: ...
        def _device(self, dev: int) -> int: ...
        def _context(self) -> int: ...
        def _current_device(self) -> int: ...
        def _string_out(self, p: int, text: str) -> None: ...
        def count_copy(self, dst: int, src: int, n: int) -> None: ...
        def can_access(self, device: int, owner: int) -> bool: ...
        def global_address(self, lib: int, name: str, device: int, initial: bytes = ...) -> int: ...
        def _copy(
            self,
            dst: int,
            src: int,
            n: int,
            stream: Stream,
            label: str,
            wait: bool,
            keep: object = None,
            after: Sequence[Op] = (),
        ) -> None: ...
