"""Random pipelines of host edits, kernel launches and njit calls against a NumPy model.

The state machine drives one SmartArray through random sequences of host reads and writes
through slices, ``cuda.jit`` launches on slices with each intent, ``njit`` calls with each intent
and explicit ``get``, optionally holding a host array or a view NumPy derived from one. It also
makes things fail halfway: in-place NumPy calls that raise after a partial write, kernels that
raise after writing, downloads that fail while a launch refreshes a held host array, and njit
calls whose later argument fails to unbox. After every step it checks the values against a
plain NumPy reference, that no byte marked valid is stale, and that the bytes moved are exactly
what the element-level validity model says is stale (within the fragmentation cap's documented
bound).
"""

from __future__ import annotations

import sys
import threading

import numba
import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from numba import cuda

import smartarray as sa
from smartarray import _fakegpu, memory
from smartarray.coherence import DEFAULT_MAX_RUNS, TransferCost
from tests._kernels import add_one

N = 24
ITEM = 8

# The bytes checked below are the exact model's: a copy's latency is worth no bytes, so no
# cost-based coalescing (tests/coherence/test_coherence.py covers that on the state machine itself).
EXACT = TransferCost(latency_s=1e-12, bandwidth_Bps=1e9)

# A failing division leaves inf and nan behind; sums of them warn (they are compared exactly).
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")


@cuda.jit
def k_fill(x, value):
    i = cuda.grid(1)
    if i < x.size:
        x[i] = value


@cuda.jit
def k_sum_into(x, out):
    i = cuda.grid(1)
    if i == 0:
        total = 0.0
        for j in range(x.size):
            total += x[j]
        out[0] = total


@cuda.jit
def k_add_one_to_both(x, y):
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1.0
    if i < y.size:
        y[i] += 1.0


@cuda.jit(debug=True, opt=False)  # a GPU reports kernel exceptions with debug only
def k_add_one_then_raise(x):
    if cuda.grid(1) == 0:  # one thread: every write happens, then the raise
        for j in range(x.size):
            x[j] += 1.0
        raise ValueError("kernel raised after writing")


@numba.njit
def j_copy(x, y):
    for i in range(x.size):
        x[i] = y[i]


@numba.njit
def j_add_one(x):
    for i in range(x.size):
        x[i] += 1.0


@numba.njit
def j_fill(x, value):
    for i in range(x.size):
        x[i] = value


@numba.njit
def j_sum(x):
    return x.sum()


# Mostly a few recurring slices (so the same view objects meet again), sometimes any slice.
FIXED = [slice(0, N), slice(0, 8), slice(4, 20)]
slices = st.one_of(
    st.sampled_from(FIXED),
    st.sampled_from(FIXED),
    st.tuples(st.integers(0, N), st.integers(0, N)).map(lambda t: slice(min(t), max(t))),
)


def launch(kernel, *args):
    kernel[1, 32](*args)


# Held host arrays: an export itself, or a view NumPy derives from one (the export is dropped at
# once). Each comes with the same derivation applied to element indices, for the model.
DERIVED = {
    "host": lambda x: x,
    "asarray": lambda x: x,
    "slice": lambda x: x[3:17],
    "reshape": lambda x: x.reshape(4, 6),
    "transpose": lambda x: x.reshape(4, 6).T,
    "strided": lambda x: x[::-3],
}


class Pipeline(RuleBasedStateMachine):
    @initialize(start=st.sampled_from(["host", "gpu", "uninitialised"]))
    def start(self, start):
        self.previous_cost = sa.set_transfer_cost(EXACT)
        if start == "uninitialised":
            self.a = sa.SmartArray(shape=N, dtype=np.float64)
            self.a[...] = 0.0  # the model needs defined values; this write moves nothing
            self.host_valid = np.ones(N, bool)
            self.gpu_valid = np.zeros(N, bool)
        else:
            self.a = sa.SmartArray(np.zeros(N), where=start)
            self.host_valid = np.full(N, start == "host")
            self.gpu_valid = ~self.host_valid
        self.ref = np.zeros(N)
        self.held = None
        self.held_idx = None
        self.sums = sa.SmartArray(shape=1)
        self.views: dict[tuple[int, int], sa.SmartArray] = {}

    def view(self, sl: slice) -> sa.SmartArray:
        """The same view object for the same slice: per-view caches (njit fast path, device
        view) get exercised across steps."""
        key = (sl.start, sl.stop)
        if key not in self.views:
            self.views[key] = self.a[sl]
        return self.views[key]

    # -- helpers -----------------------------------------------------------------------------

    def expect(self, action, up=0, down=0):
        """Run ``action`` and check the bytes it moved (``up``/``down`` elements needed)."""
        before = sa.stats()
        result = action()
        moved = sa.stats() - before
        slack = 2 * N * ITEM // DEFAULT_MAX_RUNS  # documented bound of the cap, both sides
        assert up * ITEM <= moved.h2d_bytes <= up * ITEM + slack, (moved, up)
        assert down * ITEM <= moved.d2h_bytes <= down * ITEM + slack, (moved, down)
        return result

    def device_write(self, sl):
        """The model of a device write of ``sl`` (and the eager refresh of a held array)."""
        self.gpu_valid[sl] = True
        self.host_valid[sl] = False
        if self.held is not None:
            self.host_valid[sl] = True

    def refresh_down(self, sl):
        return int((~self.host_valid[sl]).sum()) if self.held is not None else 0

    # -- rules -------------------------------------------------------------------------------

    @rule(sl=slices, value=st.floats(-5, 5, allow_nan=False))
    def host_write(self, sl, value):
        self.expect(lambda: self.a.__setitem__(sl, value))
        self.ref[sl] = value
        self.host_valid[sl] = True
        self.gpu_valid[sl] = False

    @rule(sl=slices)
    def host_read(self, sl):
        stale = int((~self.host_valid[sl]).sum())
        got = self.expect(lambda: np.array(self.view(sl)), down=stale)
        np.testing.assert_array_equal(got, self.ref[sl])
        self.host_valid[sl] = True

    @rule(sl=slices, hint=st.sampled_from([None, sa.InOut]))
    def kernel_add(self, sl, hint):
        view = self.view(sl)
        up = int((~self.gpu_valid[sl]).sum())
        self.gpu_valid[sl] = True
        arg = view if hint is None else hint(view)
        post = self.host_valid.copy()
        post[sl] = False
        down = int((~post[sl]).sum()) if self.held is not None else 0
        self.expect(lambda: launch(add_one, arg), up=up, down=down)
        self.ref[sl] += 1.0
        self.device_write(sl)

    @rule(sl=slices, value=st.floats(-5, 5, allow_nan=False))
    def kernel_out(self, sl, value):
        down = (sl.stop - sl.start) if self.held is not None else 0
        self.expect(lambda: launch(k_fill, sa.Out(self.view(sl)), value), down=down)
        self.ref[sl] = value
        self.device_write(sl)

    @rule(sl=slices)
    def kernel_reads(self, sl):
        up = int((~self.gpu_valid[sl]).sum())
        self.expect(lambda: launch(k_sum_into, sa.In(self.view(sl)), sa.Out(self.sums)), up=up)
        self.gpu_valid[sl] = True
        np.testing.assert_allclose(self.sums[0], self.ref[sl].sum())

    @rule(sl=slices, hint=st.sampled_from([None, sa.InOut]))
    def njit_add(self, sl, hint):
        view = self.view(sl)
        down = int((~self.host_valid[sl]).sum())
        self.expect(lambda: j_add_one(view if hint is None else hint(view)), down=down)
        self.ref[sl] += 1.0
        self.host_valid[sl] = True
        self.gpu_valid[sl] = False

    @rule(sl=slices, value=st.floats(-5, 5, allow_nan=False))
    def njit_out(self, sl, value):
        self.expect(lambda: j_fill(sa.Out(self.view(sl)), value))
        self.ref[sl] = value
        self.host_valid[sl] = True
        self.gpu_valid[sl] = False

    @rule(sl=slices)
    def njit_reads(self, sl):
        down = int((~self.host_valid[sl]).sum())
        total = self.expect(lambda: j_sum(sa.In(self.view(sl))), down=down)
        self.host_valid[sl] = True
        np.testing.assert_allclose(total, self.ref[sl].sum())

    @rule()
    def sync_gpu(self):
        up = int((~self.gpu_valid).sum())
        self.expect(lambda: self.a.get("gpu"), up=up)
        self.gpu_valid[:] = True

    @rule(sl=slices, rounds=st.integers(1, 20))
    def two_threads_opposite_order(self, sl, rounds):
        """Opposite-order two-array operations from two threads: no deadlock (a timeout
        fails the step, never hangs it); the stale bytes of the view move once."""
        view = self.view(sl)
        other = sa.SmartArray(np.zeros(sl.stop - sl.start))
        ops = [
            lambda: (other.__setitem__(..., view), view.dot(other)),
            lambda: (other.dot(view), view[other > 0], np.add(other, view)),
        ]
        stale = int((~self.host_valid[sl]).sum())

        def both():
            errors = []

            def worker(op):
                try:
                    for _ in range(rounds):
                        op()
                except BaseException as exc:  # noqa: BLE001 - reported in the test's thread
                    errors.append(exc)

            threads = [threading.Thread(target=worker, args=(op,), daemon=True) for op in ops]
            old = sys.getswitchinterval()
            sys.setswitchinterval(1e-6)
            try:
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(30)
            finally:
                sys.setswitchinterval(old)
            if any(t.is_alive() for t in threads):
                pytest.fail("deadlock between two threads", pytrace=False)
            if errors:
                raise errors[0]

        self.expect(both, down=stale)
        self.host_valid[sl] = True
        np.testing.assert_array_equal(np.asarray(other), self.ref[sl])

    @rule(how=st.sampled_from(sorted(DERIVED)))
    def hold_host_array(self, how):
        down = int((~self.host_valid).sum())
        export = (lambda: np.asarray(self.a)) if how == "asarray" else self.a.host
        self.held = DERIVED[how](self.expect(export, down=down))
        self.held_idx = DERIVED[how](np.arange(N))
        self.host_valid[:] = True

    @rule()
    def drop_host_array(self):
        self.held = self.held_idx = None

    # -- failures halfway ----------------------------------------------------------------------

    @rule(i=st.integers(0, N - 1), value=st.floats(-5, 5, allow_nan=False))
    def numpy_put_fails_after_a_write(self, i, value):
        down = int((~self.host_valid).sum())
        with pytest.raises(IndexError):
            self.expect(lambda: self.a.put([i, N + 5], [value, value]), down=down)
        self.ref[i] = value  # NumPy keeps the write before the bad index
        self.host_valid[:] = True
        self.gpu_valid[:] = False

    @rule(sl=slices)
    def numpy_ufunc_fails_after_writing(self, sl):
        view = self.view(sl)
        down = int((~self.host_valid[sl]).sum())
        if sl.start == sl.stop or not np.isfinite(self.ref[sl]).all():
            return  # x / 0 raises for finite x only (inf / 0 and nan / 0 set no flag)
        with np.errstate(all="raise"), pytest.raises(FloatingPointError):
            self.expect(lambda: np.divide(view, 0.0, out=view), down=down)
        with np.errstate(all="ignore"):
            self.ref[sl] = self.ref[sl] / 0.0
        self.host_valid[sl] = True
        self.gpu_valid[sl] = False

    @rule(sl=slices)
    def kernel_raises_after_writing(self, sl):
        view = self.view(sl)
        up = int((~self.gpu_valid[sl]).sum())
        if sl.start == sl.stop:
            return
        with pytest.raises(ValueError, match="after writing"):
            self.expect(lambda: launch(k_add_one_then_raise, view), up=up)
        self.ref[sl] += 1.0
        self.gpu_valid[sl] = True
        self.host_valid[sl] = False  # no callback ran: held arrays are not refreshed

    @rule(cut=st.integers(0, N))
    def refresh_fails_after_a_launch(self, cut):
        # Two arguments; every download fails, so refreshing a held host array fails after the
        # first argument's write: the second's write must be recorded all the same.
        first, second = self.view(slice(0, cut)), self.view(slice(cut, N))
        up = int((~self.gpu_valid).sum())
        real = memory.copy_range

        def no_download(direction, *args, **kwargs):
            if direction == "d2h":
                raise RuntimeError("injected download fault")
            return real(direction, *args, **kwargs)

        memory.copy_range = no_download
        try:
            if self.held is not None:
                with pytest.raises(sa.TransferError):
                    self.expect(lambda: launch(k_add_one_to_both, first, second), up=up)
            else:
                self.expect(lambda: launch(k_add_one_to_both, first, second), up=up)
        finally:
            memory.copy_range = real
        self.ref += 1.0
        self.gpu_valid[:] = True
        self.host_valid[:] = False  # refresh failed (or nobody held the host array)

    @rule(sl=slices, hint=st.sampled_from([sa.Out, sa.InOut]))
    def njit_later_argument_fails_to_unbox(self, sl, hint):
        view = self.view(sl)
        down = int((~self.host_valid[sl]).sum()) if hint is sa.InOut else 0
        ones = np.ones(sl.stop - sl.start)
        with pytest.raises(TypeError):  # an intent of an ndarray cannot be unboxed by njit
            self.expect(lambda: j_copy(hint(view), sa.In(ones)), down=down)
        if hint is sa.InOut:
            self.host_valid[sl] = True
        # The function never ran; the host bytes that were current may count as written.
        self.gpu_valid[sl] &= ~self.host_valid[sl]

    @invariant()
    def held_array_is_current(self):
        if self.held is not None:
            # Current wherever the host copy is (a failed refresh leaves it marked stale).
            fresh = self.host_valid[self.held_idx]
            np.testing.assert_array_equal(self.held[fresh], self.ref[self.held_idx][fresh])

    @invariant()
    def every_byte_marked_valid_holds_the_current_value(self):
        buf = self.a._buf
        state = buf.state
        copies = {}
        if buf.host_bytes is not None:
            copies["host"] = buf.host_bytes.view(np.int64)
        if buf.device_bytes is not None:  # read without counting a transfer
            raw = memory._Uncounted(buf.device_bytes).copy_to_host()
            copies["gpu"] = raw.view(np.int64)
        ref = self.ref.view(np.int64)  # bit patterns: NaN and -0.0 compared exactly
        for where, values in copies.items():
            for i in range(N):
                if state.is_valid(where, i * ITEM, (i + 1) * ITEM):
                    assert values[i] == ref[i], (where, i)
        for i in range(N):  # and every element is current somewhere
            assert any(state.is_valid(w, i * ITEM, (i + 1) * ITEM) for w in ("host", "gpu"))

    def teardown(self):
        if hasattr(self, "previous_cost"):
            sa.set_transfer_cost(self.previous_cost)


# Fewer on the fake driver, whose kernels run in Python threads.
Pipeline.TestCase.settings = settings(
    max_examples=100 if _fakegpu.current() is None else 15, stateful_step_count=30, deadline=None
)


TestPipeline = Pipeline.TestCase
