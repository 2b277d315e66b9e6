"""The fake driver's clock: modelled time of copies, kernels and the host (opt-in).

``SMARTARRAY_FAKE_GPU_TIMING=<preset>`` (``pcie5``, ``pcie4``, ``nvlink``) turns it on; unset,
the fake driver keeps no time. The fake runs queued work lazily, in a seeded adversarial order,
when the host waits; the clock never looks at that order. It computes each operation's modelled
start and end when the operation is *queued*, from what CUDA orders it after (the previous work
of its stream, the legacy stream's rules, events waited for: the dependencies
:mod:`._queue` records) and from the engine it needs:

* per device a **compute engine** (one kernel at a time: kernels that fill the device), an
  **H2D** and a **D2H copy engine** (one per direction), and one **link per ordered device
  pair** for peer copies. An operation starts at the earliest moment that is after the host
  issued it, after everything it depends on ended, and at which its engine is free for its
  whole duration (an engine fills a gap left earlier when a later operation fits: the hardware
  queues of different streams feed one engine);
* a **copy** costs the engine latency (DMA set-up and completion) plus bytes over the link's
  rate: page-locked at the link's rate; **pageable** host memory at the staged rate;
* a **kernel** costs a launch latency plus a duration: set per kernel (by its Python name,
  :meth:`Clock.set_kernel_seconds`), else the bytes of its array arguments over the device's
  memory bandwidth;
* the **host clock** advances by each driver call's API cost (a copy's API cost is separate
  from its engine latency; a launch has its own), by page-locking (``cuMemHostAlloc``,
  ``cuMemHostRegister``: a latency plus bytes over a pinning rate), by :meth:`Clock.host_work`
  (benchmarks charge smartarray's own per-call overhead and host computation through it), and
  by **waits**: a synchronisation waits until the modelled end of what it waits for.

One rule for pageable copies (CUDA's "API synchronization behavior",
https://docs.nvidia.com/cuda/cuda-driver-api/api-sync-behavior.html: a copy between device
memory and pageable host memory "might be synchronous with respect to host"; a synchronous
copy from pageable memory returns once the bytes are staged, to pageable or page-locked host
memory once complete): **a copy to or from pageable host memory, by any entry point, runs at the
staged rate and the host waits until it ends**. Synchronous copies (no ``Async``) wait too,
except device to device. ``cuEventElapsedTime`` answers the modelled milliseconds between two
events' ends.

Memory management costs the host too, and orders work (the constants are estimates, to be
measured where a GPU is lent):

* **allocation**: ``cuMemAlloc`` (and ``cuMemAllocManaged``) costs a latency plus bytes over
  an allocation rate (the driver maps physical pages); ``cuMemHostAlloc`` and
  ``cuMemHostRegister`` cost the page-locking above. Both are **implicit synchronisation**
  (CUDA C++ Programming Guide, "Implicit Synchronization": "Two operations from different
  streams cannot run concurrently if any one of the following operations is issued
  in-between them by the host thread: a page-locked host memory allocation, a device memory
  allocation, ..."): work of the current device queued after one starts only once all its work
  queued before ended. The stream-ordered ``cuMemAllocAsync`` / ``cuMemAllocFromPoolAsync``
  are not (the point of them): a plain call's cost;
* **free**: ``cuMemFree`` waits for the device (the driver API's ``cuMemFree`` and CUDA's "API
  synchronization behavior": frees synchronise; the fake waits for the freeing context's
  device) and then costs a latency plus bytes over a free rate; ``cuMemFreeHost`` and
  ``cuMemHostUnregister`` wait the same way and cost a latency plus bytes over an unlocking
  rate;
* **host copies**: the host copying between host buffers (a host-to-host ``cuMemcpy``;
  :meth:`Clock.host_copy` for the copies a benchmark's NumPy code makes) costs bytes over a
  host-memory rate, plus bytes over a first-touch rate into memory never touched (each page
  faulted in and zeroed by the operating system).

The clock lives beside the queue, not in it: :mod:`._queue` calls :meth:`Clock.queued` when it
queues an operation and :meth:`Clock.waited` / :meth:`Clock.waited_all` when the host waits;
the driver calls :meth:`Clock.call` as an entry point starts and :meth:`Clock.copy` /
:meth:`Clock.kernel` once a copy or launch is queued.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, Protocol

from .._platform import environment as _environment
from ..coherence._cost import NVLINK_C2C, PCIE4_X16, PCIE5_X16

__all__ = ["PRESETS", "Clock", "Preset", "Span", "from_environment"]


#: ``benchmarks/bench_overhead.py``'s ratio of smartarray's host time above the driver to
#: numba's, for a launch that writes an array followed by the host's read of it
#: (``real_launch_read_smartarray_above_driver_ratio``: a SmartArray launch and ``host()``
#: against a device array's launch and ``copy_to_host``; fake driver, numba-cuda's real
#: dispatcher, the kernels' bodies off while timed (a GPU runs them off the host), a shared
#: two-core machine: the median of nine runs in fresh processes, issue 41's eleventh round,
#: 1.08-1.36, most within 1.12-1.20; 1.17 in the tenth round with the kernels interpreted on
#: the host inside the timed waits, 1.26 from the seventh to the ninth, 1.43 before).
#: A launch of current arrays alone costs less over numba's
#: (``real_launch_smartarray_above_driver_ratio``: 1.07-1.14).
SMARTARRAY_LAUNCH_READ_RATIO = 1.19
# The PCIe presets' host costs of a driver call, a copy call and a launch (below).
_PCIE_CALL_S = 0.1e-6
_PCIE_COPY_CALL_S = 4e-6
_PCIE_LAUNCH_CALL_S = 4e-6
#: What the model charges numba's equivalent of one launch and one read (``cuLaunchKernelEx``
#: 4 us, ``cuMemcpyDtoH`` 4 us, two context queries of 0.1 us each), per call: the PCIe
#: presets' ``(launch_call_s + copy_call_s + 4 * call_s) / 2``.
_NUMBA_CALL_S = (_PCIE_LAUNCH_CALL_S + _PCIE_COPY_CALL_S + 4 * _PCIE_CALL_S) / 2
_SMARTARRAY_CALL_S = round((SMARTARRAY_LAUNCH_READ_RATIO - 1) * _NUMBA_CALL_S, 12)  # 0.798 us


class _OnDevice(Protocol):
    device: int


class Op(Protocol):
    """What the clock reads and writes of the queue's operations (:class:`._queue.Op`): its
    stream's device, its label, and its modelled end (the clock's own field on it)."""

    label: str
    end: float

    @property
    def stream(self) -> _OnDevice: ...


@dataclass(frozen=True)
class Preset:
    """The constants of the clock (seconds, bytes per second); see the presets' sources.

    Attributes
    ----------
    name : str
    h2d_Bps, d2h_Bps : float
        Page-locked host to device and device to host copies (one copy engine each).
    pageable_Bps : float
        Copies to or from pageable host memory (staged through a driver buffer).
    peer_Bps : float
        Device to device copies between two devices (one link per ordered pair).
    memory_Bps : float
        Device memory bandwidth: a kernel's default duration is the bytes of its array
        arguments over it; a copy or memset within one device moves at half of it.
    copy_latency_s : float
        A copy engine's cost per copy (DMA set-up and completion), on the engine.
    kernel_latency_s : float
        A kernel's cost on the compute engine before its body runs.
    call_s : float
        Host time of any driver call (a query, a stream or event call).
    copy_call_s : float
        Host time of a copy call (the API cost; the engine latency is apart).
    launch_call_s : float
        Host time of ``cuLaunchKernel``.
    pin_latency_s, pin_Bps : float
        Page-locking ``n`` bytes (``cuMemHostAlloc``, ``cuMemHostRegister``) costs the host
        ``pin_latency_s + n / pin_Bps``.
    alloc_latency_s, alloc_Bps : float
        A device allocation of ``n`` bytes (``cuMemAlloc``, ``cuMemAllocManaged``) costs the
        host ``alloc_latency_s + n / alloc_Bps`` (the driver maps physical pages).
    free_latency_s, free_Bps : float
        ``cuMemFree`` of ``n`` bytes costs the host ``free_latency_s + n / free_Bps`` after
        its wait for the device.
    unlock_latency_s, unlock_Bps : float
        Unlocking ``n`` page-locked bytes (``cuMemFreeHost``, ``cuMemHostUnregister``)
        costs the host ``unlock_latency_s + n / unlock_Bps`` after its wait.
    host_copy_Bps, first_touch_Bps : float
        The host copying ``n`` bytes between host buffers (a host-to-host ``cuMemcpy``, or
        :meth:`Clock.host_copy`) costs ``n / host_copy_Bps``, plus ``n / first_touch_Bps``
        when the destination was never touched (each page faulted in and zeroed).
    smartarray_call_s : float
        smartarray's own host time per SmartArray launch or host read above numba's:
        ``benchmarks/bench_overhead.py``'s measured ratio of smartarray's host time above the
        driver to numba's, for a launch that writes an array followed by its host read
        (``real_launch_read_smartarray_above_driver_ratio``, about 1.19), applied
        to what this model charges numba's equivalent calls (a launch and a ``copy_to_host``:
        ``cuLaunchKernelEx``, ``cuMemcpyDtoH`` and their context queries, 4.2 us each):
        ``0.19 * 4.2 us``, about 0.80 us a call. The model charges none of numba's own Python
        cost to any variant, so smartarray's surplus is charged in proportion to the driver
        cost the model does charge. A launch of current arrays alone costs less over numba's
        (``real_launch_smartarray_above_driver_ratio``, 1.07-1.14: 0.3-0.6 us by the same
        rule); the benchmarks charge every call alike, the launch-and-read figure, which is
        the iterative workloads' loop and never the cheaper case. The clock does not charge
        it by itself: benchmarks do, through :meth:`Clock.host_work`.
    """

    name: str
    h2d_Bps: float
    d2h_Bps: float
    pageable_Bps: float
    peer_Bps: float
    memory_Bps: float
    copy_latency_s: float
    kernel_latency_s: float
    call_s: float
    copy_call_s: float
    launch_call_s: float
    pin_latency_s: float
    pin_Bps: float
    alloc_latency_s: float = 10e-6
    alloc_Bps: float = 1e12
    free_latency_s: float = 10e-6
    free_Bps: float = 2e12
    unlock_latency_s: float = 10e-6
    unlock_Bps: float = 16e9
    host_copy_Bps: float = 10e9
    first_touch_Bps: float = 4e9
    smartarray_call_s: float = _SMARTARRAY_CALL_S

    def scaled(self, factor: float) -> Preset:
        """This preset with every rate divided by ``factor`` (latencies kept).

        A copy of ``n`` bytes then takes as long as one of ``n * factor`` bytes at the
        original rates: small arrays model large ones in the same regime.
        """
        if not factor > 0:
            raise ValueError(f"factor must be > 0, got {factor!r}")
        return replace(
            self,
            name=f"{self.name}/{factor:g}",
            h2d_Bps=self.h2d_Bps / factor,
            d2h_Bps=self.d2h_Bps / factor,
            pageable_Bps=self.pageable_Bps / factor,
            peer_Bps=self.peer_Bps / factor,
            memory_Bps=self.memory_Bps / factor,
            pin_Bps=self.pin_Bps / factor,
            alloc_Bps=self.alloc_Bps / factor,
            free_Bps=self.free_Bps / factor,
            unlock_Bps=self.unlock_Bps / factor,
            host_copy_Bps=self.host_copy_Bps / factor,
            first_touch_Bps=self.first_touch_Bps / factor,
        )


# The copy API cost and the engine latency together make the planner's per-copy latency
# (coherence/_cost.py: 10 us on PCIe 5, which also covers the Python layers above the driver).
_PCIE_COPY_LATENCY_S = 2e-6

PCIE5 = Preset(
    name="pcie5",
    h2d_Bps=PCIE5_X16.bandwidth_Bps,  # 50 GB/s page-locked (nvbandwidth host_to_device_memcpy_ce)
    d2h_Bps=PCIE5_X16.bandwidth_Bps,
    pageable_Bps=20e9,  # staged: 10-25 GB/s on PCIe 5; 20 taken
    peer_Bps=PCIE5_X16.bandwidth_Bps,  # two PCIe devices without NVLink: through the switch
    memory_Bps=3.35e12,  # H100 SXM5 HBM3 (NVIDIA H100 datasheet)
    copy_latency_s=_PCIE_COPY_LATENCY_S,
    kernel_latency_s=3e-6,
    call_s=_PCIE_CALL_S,
    copy_call_s=_PCIE_COPY_CALL_S,
    launch_call_s=_PCIE_LAUNCH_CALL_S,
    pin_latency_s=20e-6,
    pin_Bps=4e9,
)
PCIE4 = replace(
    PCIE5,
    name="pcie4",
    h2d_Bps=PCIE4_X16.bandwidth_Bps,  # 25 GB/s page-locked (16 GT/s x16: about 31.5 on the wire)
    d2h_Bps=PCIE4_X16.bandwidth_Bps,
    pageable_Bps=10e9,
    peer_Bps=PCIE4_X16.bandwidth_Bps,
    memory_Bps=2.0e12,  # A100 80GB HBM2e (NVIDIA A100 datasheet)
)
NVLINK = replace(
    PCIE5,
    name="nvlink",
    h2d_Bps=NVLINK_C2C.bandwidth_Bps,  # Grace Hopper NVLink-C2C, about 400 GB/s measured
    d2h_Bps=NVLINK_C2C.bandwidth_Bps,
    pageable_Bps=NVLINK_C2C.bandwidth_Bps / 4,  # (estimate: staged through a driver buffer)
    peer_Bps=450e9,  # NVLink 4: 900 GB/s total per GPU, 450 per direction
    memory_Bps=4.0e12,  # GH200 HBM3 (NVIDIA Grace Hopper whitepaper)
    copy_latency_s=1e-6,
    copy_call_s=2e-6,
)

PRESETS: dict[str, Preset] = {p.name: p for p in (PCIE5, PCIE4, NVLINK)}
"""The named presets of ``SMARTARRAY_FAKE_GPU_TIMING``."""

_COPY_CALLS = frozenset(
    "cuMemcpy cuMemcpyAsync cuMemcpyHtoD cuMemcpyHtoDAsync cuMemcpyDtoH cuMemcpyDtoHAsync "
    "cuMemcpyDtoD cuMemcpyDtoDAsync cuMemcpyPeer cuMemcpyPeerAsync cuMemsetD8 "
    "cuMemsetD8Async".split()
)
_LAUNCH_CALLS = frozenset(("cuLaunchKernel", "cuLaunchKernelEx"))
# Entries whose work is synchronous (the host returns once it ran), device to device excepted.
_SYNCHRONOUS = frozenset("cuMemcpy cuMemcpyHtoD cuMemcpyDtoH cuMemcpyPeer cuMemsetD8".split())


class Span(NamedTuple):
    """One operation on one engine (or the host), in modelled seconds."""

    engine: str  # "gpu0.compute", "gpu0.h2d", "gpu0.d2h", "link0->1", "host"
    label: str
    start: float
    end: float


class _PlotSpan(NamedTuple):
    """A span as smartarray's timeline plot draws events (``array``, ``reason``, times)."""

    array: str
    reason: str
    time_ns: int
    duration_ns: int
    lane: str
    direction: str = ""


class _Engine:
    """Busy intervals of one engine, sorted; an operation takes the first gap that fits."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []

    def place(self, ready: float, duration: float) -> float:
        """Reserve ``duration`` at the earliest start >= ``ready`` where the engine is free."""
        start = ready
        i = bisect.bisect_right(self.ends, start)  # intervals ending after ``start``
        while i < len(self.starts) and self.starts[i] < start + duration:
            start = max(start, self.ends[i])
            i += 1
        j = bisect.bisect_left(self.starts, start)
        self.starts.insert(j, start)
        self.ends.insert(j, start + duration)
        return start


class Clock:
    """Modelled time of one fake driver's devices and of its host thread(s).

    Parameters
    ----------
    preset : Preset
        The constants.
    """

    def __init__(self, preset: Preset) -> None:
        self.preset = preset
        self.kernel_seconds: dict[str, float] = {}
        self.reset()

    def reset(self) -> None:
        """Time zero: the host at 0, every engine idle, no spans."""
        self.host = 0.0
        self._engines: dict[str, _Engine] = {}
        self._device_end: dict[int, float] = {}
        # Per device: work queued from now on starts no earlier (implicit synchronisation).
        self._barrier: dict[int, float] = {}
        self.spans: list[Span] = []
        self._entry = ""
        self.copies = 0  # copies placed on an engine so far (trace events read the last one)
        self.last_copy: Span | None = None

    # configuration ----------------------------------------------------------------------------
    def set_preset(self, preset: Preset) -> None:
        """Use ``preset``'s constants from now on (a benchmark's scaled preset)."""
        self.preset = preset

    def set_kernel_seconds(self, name: str, seconds: float | None) -> None:
        """Model kernel ``name`` (its Python function's ``__name__``) as taking ``seconds``
        on the compute engine (plus the launch latency); ``None``: the default rule again."""
        if seconds is None:
            self.kernel_seconds.pop(name, None)
        elif not seconds >= 0:
            raise ValueError(f"seconds must be >= 0, got {seconds!r}")
        else:
            self.kernel_seconds[name] = float(seconds)

    # the host ---------------------------------------------------------------------------------
    def call(self, name: str) -> None:
        """A driver entry point starts: the host pays its API cost."""
        self._entry = name
        p = self.preset
        if name in _COPY_CALLS:
            cost = p.copy_call_s
        elif name in _LAUNCH_CALLS:
            cost = p.launch_call_s
        else:
            cost = p.call_s
        self._host_span(name, cost)

    def host_work(self, seconds: float, label: str = "host") -> None:
        """The host computes for ``seconds`` (benchmarks: smartarray's overhead, NumPy work)."""
        if not seconds >= 0:
            raise ValueError(f"seconds must be >= 0, got {seconds!r}")
        self._host_span(label, seconds)

    def page_locked(self, nbytes: int, device: int | None = None) -> None:
        """The host page-locks ``nbytes`` bytes (``cuMemHostAlloc``, ``cuMemHostRegister``);
        ``device``: the current device, whose later work starts after its earlier work
        ended (implicit synchronisation; ``None``: no device is current)."""
        self._host_span("page-lock", self.preset.pin_latency_s + nbytes / self.preset.pin_Bps)
        if device is not None:
            self._separate(device)

    def allocated(self, nbytes: int, device: int) -> None:
        """The host allocated ``nbytes`` of ``device``'s memory (``cuMemAlloc``): it pays the
        allocation, and ``device``'s work queued later starts after its earlier work ended."""
        p = self.preset
        self._host_span("alloc", p.alloc_latency_s + nbytes / p.alloc_Bps)
        self._separate(device)

    def freed(self, nbytes: int) -> None:
        """The host freed ``nbytes`` of device memory (``cuMemFree``; the driver waited for
        the device before)."""
        self._host_span("free", self.preset.free_latency_s + nbytes / self.preset.free_Bps)

    def unlocked(self, nbytes: int) -> None:
        """The host unlocked ``nbytes`` page-locked bytes (``cuMemFreeHost``,
        ``cuMemHostUnregister``; the driver waited for the device before)."""
        p = self.preset
        self._host_span("unlock", p.unlock_latency_s + nbytes / p.unlock_Bps)

    def host_copy(self, nbytes: int, first_touch: bool = False) -> None:
        """The host copies ``nbytes`` between host buffers (``first_touch``: into memory
        never touched before, each page faulted in)."""
        p = self.preset
        seconds = nbytes / p.host_copy_Bps
        if first_touch:
            seconds += nbytes / p.first_touch_Bps
        self._host_span("host copy", seconds)

    def _separate(self, device: int) -> None:
        """Implicit synchronisation on ``device``: two commands of different streams issued
        before and after now cannot run at once, so later work waits for earlier work."""
        end = self._device_end.get(device, 0.0)
        if end > self._barrier.get(device, 0.0):
            self._barrier[device] = end

    def _host_span(self, label: str, seconds: float) -> None:
        if seconds > 0:
            self.spans.append(Span("host", label, self.host, self.host + seconds))
            self.host += seconds

    def _wait_until(self, moment: float) -> None:
        if moment > self.host:
            self.spans.append(Span("host", "wait", self.host, moment))
            self.host = moment

    # the queue's hooks -----------------------------------------------------------------------
    def queued(self, op: Op, deps: Iterable[Op | None]) -> None:
        """``op`` was queued after ``deps`` (done or not): it may start once the host issued it
        and they ended. Work that needs no engine (an event record, a wait) ends then."""
        ready = max(self.host, self._barrier.get(op.stream.device, 0.0))
        for d in deps:
            if d is not None and d.end > ready:
                ready = d.end
        op.end = ready
        self._ended(op)

    def waited(self, targets: Sequence[Op | None]) -> None:
        """The host waited for ``targets``: it is now past their modelled end."""
        for op in targets:
            if op is not None:
                self._wait_until(op.end)

    def waited_all(self, device: int | None = None) -> None:
        """The host waited for every device's work (``None``) or one device's."""
        if device is None:
            self._wait_until(max(self._device_end.values(), default=0.0))
        else:
            self._wait_until(self._device_end.get(device, 0.0))

    def _ended(self, op: Op) -> None:
        device = op.stream.device
        if op.end > self._device_end.get(device, 0.0):
            self._device_end[device] = op.end

    # the driver's hooks -----------------------------------------------------------------------
    def _run_on(self, op: Op, engine: str, seconds: float, label: str) -> None:
        """Place ``op`` (its ready time in ``op.end``) on ``engine`` for ``seconds``."""
        found = self._engines.get(engine)
        if found is None:
            found = self._engines[engine] = _Engine()
        start = found.place(op.end, seconds)
        op.end = start + seconds
        self.spans.append(Span(engine, label, start, op.end))
        self._ended(op)

    def copy(
        self,
        op: Op,
        nbytes: int,
        source_device: int | None,
        target_device: int | None,
        pageable: bool,
    ) -> None:
        """A copy of ``nbytes`` was queued as ``op``; ``None`` for a host end.

        ``pageable``: a host end is pageable memory (the staged rate; the host waits).
        """
        p = self.preset
        if source_device is None and target_device is None:  # host to host: the host copies
            self.host_copy(nbytes)
            op.end = max(op.end, self.host)
            self._ended(op)
            return
        if source_device is None:
            engine, rate = f"gpu{target_device}.h2d", p.h2d_Bps
        elif target_device is None:
            engine, rate = f"gpu{source_device}.d2h", p.d2h_Bps
        elif source_device == target_device:
            engine, rate = f"gpu{source_device}.compute", p.memory_Bps / 2
        else:
            engine, rate = f"link{source_device}->{target_device}", p.peer_Bps
        if pageable:
            rate = min(rate, p.pageable_Bps)
        label = f"{op.label} {nbytes} B" + (" pageable" if pageable else "")
        self._run_on(op, engine, p.copy_latency_s + nbytes / rate, label)
        self.copies += 1
        self.last_copy = self.spans[-1]
        device_to_device = source_device is not None and target_device is not None
        if pageable or (self._entry in _SYNCHRONOUS and not device_to_device):
            self._wait_until(op.end)

    def memset(self, op: Op, nbytes: int, device: int) -> None:
        """A memset of ``nbytes`` on ``device`` was queued as ``op``."""
        p = self.preset
        self._run_on(
            op, f"gpu{device}.compute", p.kernel_latency_s + nbytes / p.memory_Bps, "memset"
        )
        if self._entry in _SYNCHRONOUS:
            self._wait_until(op.end)

    def kernel(self, op: Op, name: str, nbytes: int, device: int) -> None:
        """Kernel ``name`` (its Python ``__name__``), whose array arguments span ``nbytes``,
        was queued as ``op`` on ``device``."""
        p = self.preset
        body = self.kernel_seconds.get(name)
        if body is None:
            body = nbytes / p.memory_Bps
        self._run_on(op, f"gpu{device}.compute", p.kernel_latency_s + body, name)

    # reading ----------------------------------------------------------------------------------
    def elapsed_ms(self, start: Op, end: Op) -> float:
        """Milliseconds between two recorded events' ends (``cuEventElapsedTime``)."""
        return (end.end - start.end) * 1e3

    def makespan(self) -> float:
        """The host's time, or the last engine's end if later: the run's modelled length."""
        return max(self.host, max(self._device_end.values(), default=0.0))

    def busy(self) -> dict[str, float]:
        """Seconds each engine (and the host) was busy: the busiest is a lower bound of the
        makespan."""
        out: dict[str, float] = {}
        for s in self.spans:
            if s.label != "wait":
                out[s.engine] = out.get(s.engine, 0.0) + (s.end - s.start)
        return out

    def plot(self, path: Any = None, since: float = 0.0, title: str = "modelled time") -> Any:
        """Draw the spans since ``since`` with smartarray's timeline plot, one lane per engine
        (matplotlib needed); ``path``: where to save the picture. Returns the figure."""
        from .._observe.plot import plot_timelines

        events = []
        for s in self.spans:
            if s.end < since:
                continue
            label = s.label.split(" ")[0]
            if s.engine == "host" and label.startswith("cu"):
                label = "driver calls"
            events.append(
                _PlotSpan(
                    label, "modelled", int(s.start * 1e9), int((s.end - s.start) * 1e9), s.engine
                )
            )
        return plot_timelines({title: events}, path)

    def timeline(self, since: float = 0.0) -> str:
        """The spans since ``since`` as text, one engine per line group (for a reader)."""
        lines = []
        for engine in sorted({s.engine for s in self.spans}):
            lines.append(f"{engine}:")
            lines.extend(
                f"  {s.start * 1e6:10.2f} - {s.end * 1e6:10.2f} us  {s.label}"
                for s in self.spans
                if s.engine == engine and s.end >= since
            )
        return "\n".join(lines)


def from_environment() -> Clock | None:
    """The clock ``SMARTARRAY_FAKE_GPU_TIMING`` asks for, or ``None`` when it is unset or 0.

    Raises
    ------
    ValueError
        When the value names no preset.
    """
    value = _environment.text("SMARTARRAY_FAKE_GPU_TIMING").lower()
    if value in ("", "0"):
        return None
    preset = PRESETS.get(value)
    if preset is None:
        raise ValueError(
            f"SMARTARRAY_FAKE_GPU_TIMING={value!r}: expected one of {', '.join(PRESETS)} "
            "(or 0 / unset: no clock)"
        )
    return Clock(preset)
