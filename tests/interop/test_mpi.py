"""smartarray.mpi: views sent and received move only their bytes; halo exchange; the example.

The bookkeeping is tested everywhere with an in-process communicator (:class:`FakeComm`,
buffered sends, blocking receives, ranks as threads). The example runs under ``mpiexec`` with
the MPI library installed from PyPI (the ``mpi`` extra) when there is one.
"""

from __future__ import annotations

import ast
import collections
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest

import smartarray as sa
from smartarray._distributed import mpi_halos as sampi
from tests._targets import real_target_env, with_checkout

ROOT = Path(__file__).resolve().parents[2]
ROW = 8 * 6  # bytes of one row of the (.., 6) float64 blocks below


class World:
    """The shared mailboxes of :class:`FakeComm` ranks."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.cond = threading.Condition()
        self.boxes: dict[tuple[int, int, int], collections.deque[bytes]] = collections.defaultdict(
            collections.deque
        )

    def comms(self) -> list[FakeComm]:
        return [FakeComm(self, r) for r in range(self.size)]


class Status:
    """mpi4py's ``MPI.Status`` as far as :mod:`smartarray.mpi` reads it (found beside
    :class:`FakeComm`, as ``MPI.Status`` is beside mpi4py's communicators)."""

    def __init__(self) -> None:
        self.source, self.nbytes = None, None

    def Get_source(self) -> int:  # noqa: N802 - mpi4py's name
        return self.source

    def Get_count(self, datatype=None) -> int:  # noqa: N802 - mpi4py's name (bytes)
        return self.nbytes


class FakeRequest:
    def __init__(self, complete, ready) -> None:
        self.complete, self.ready, self.waited = complete, ready, False

    def Wait(self, status=None) -> None:  # noqa: N802 - mpi4py's name
        self.complete(status)
        self.waited = True

    def Test(self, status=None) -> bool:  # noqa: N802 - mpi4py's name
        if self.ready():
            self.Wait(status)
        return self.waited


class FakeComm:
    """mpi4py's buffer methods over in-process mailboxes; sends are buffered (never block).

    Buffers are checked as MPI's C interface needs them: contiguous, the right size, and
    writable for a receive. ``calls`` records (method, peer, bytes).
    """

    PROC_NULL = -1

    def __init__(self, world: World, rank: int) -> None:
        self.world, self.rank = world, rank
        self.calls: list[tuple[str, int, int]] = []

    def Get_rank(self) -> int:  # noqa: N802
        return self.rank

    def Get_size(self) -> int:  # noqa: N802
        return self.world.size

    def _put(self, buf, dest: int, tag: int) -> int:
        mv = memoryview(buf)
        assert mv.c_contiguous, "MPI buffers are contiguous"
        if dest != self.PROC_NULL:
            with self.world.cond:
                self.world.boxes[(self.rank, dest, tag)].append(mv.tobytes())
                self.world.cond.notify_all()
        return mv.nbytes

    def _take(self, buf, source: int, tag: int, status=None) -> None:
        mv = memoryview(buf)
        assert mv.c_contiguous and not mv.readonly, "MPI receive buffers are writable"
        if source == self.PROC_NULL:  # MPI: returns at once, the buffer not modified
            if status is not None:
                status.source, status.nbytes = self.PROC_NULL, 0
            return
        key = (source, self.rank, tag)
        with self.world.cond:
            assert self.world.cond.wait_for(lambda: self.world.boxes[key], timeout=10)
            data = self.world.boxes[key].popleft()
        # A shorter message is legal (it fills the buffer's first bytes); a longer one is
        # MPI_ERR_TRUNCATE.
        assert len(data) <= mv.nbytes, "the message is longer than the receive buffer"
        mv.cast("B")[: len(data)] = data
        if status is not None:
            status.source, status.nbytes = source, len(data)

    def Send(self, buf, dest, tag=0):  # noqa: N802
        self.calls.append(("Send", dest, self._put(buf, dest, tag)))

    def Recv(self, buf, source, tag=0, status=None):  # noqa: N802
        self._take(buf, source, tag, status)
        self.calls.append(("Recv", source, memoryview(buf).nbytes))

    def Sendrecv(  # noqa: N802
        self, sendbuf, dest, sendtag=0, recvbuf=None, source=0, recvtag=0, status=None
    ):
        self.Send(sendbuf, dest, sendtag)
        self.Recv(recvbuf, source, recvtag, status)

    def Isend(self, buf, dest, tag=0):  # noqa: N802
        self.Send(buf, dest, tag)  # buffered: done at once
        return FakeRequest(lambda status: None, lambda: True)

    def Irecv(self, buf, source, tag=0):  # noqa: N802
        key = (source, self.rank, tag)
        return FakeRequest(
            lambda status: self.Recv(buf, source, tag, status),
            lambda: source == self.PROC_NULL or bool(self.world.boxes[key]),
        )


def block(rows: int, start: float = 0.0) -> sa.SmartArray:
    """A (rows, 6) SmartArray current on the device only (as after a kernel wrote it)."""
    a = sa.SmartArray(start + np.arange(rows * 6.0).reshape(rows, 6))
    a.get("gpu")
    a.mark_changed("gpu")
    return a


# -- send / recv -----------------------------------------------------------------------------


def test_send_downloads_only_the_view():
    c0, c1 = World(2).comms()
    a = block(5)
    with sa.trace() as t:
        sampi.send(c0, a[1, :], dest=1, tag=3)
    assert (t.stats.d2h_bytes, t.stats.h2d_bytes) == (ROW, 0)
    assert c0.calls == [("Send", 1, ROW)]
    got = np.empty(6)
    c1.Recv(got, source=0, tag=3)
    np.testing.assert_array_equal(got, np.arange(6.0, 12.0))
    assert a[1:2].is_valid("host") and not a[2:].is_valid("host")
    with sa.trace() as t:  # sending it again: current on the host, nothing moves
        sampi.send(c0, a[1, :], dest=1, tag=3)
    assert t.stats.d2h_bytes == 0


def test_recv_records_a_host_write_of_the_view_only():
    c0, c1 = World(2).comms()
    a = block(5)
    c1.Send(np.full(6, -1.0), dest=0, tag=0)
    with sa.trace() as t:
        sampi.recv(c0, a[0, :], source=1)
    assert t.stats.h2d_bytes == t.stats.d2h_bytes == 0  # nothing moves now
    assert a[0].is_valid("host") and not a[0].is_valid("gpu")
    assert a[1:].is_valid("gpu") and not a[1:].is_valid("host")
    with sa.trace() as t:
        a.get("gpu")  # what the next kernel does: uploads the received row only
    assert (t.stats.h2d_bytes, t.stats.d2h_bytes) == (ROW, 0)
    expect = np.arange(30.0).reshape(5, 6)
    expect[0] = -1.0
    np.testing.assert_array_equal(np.asarray(a), expect)


def test_sendrecv_between_views_of_one_array():
    (c0,) = World(1).comms()
    a = block(4)
    with sa.trace() as t:
        sampi.sendrecv(c0, a[2, :], 0, a[0, :], 0, sendtag=5)
    assert (t.stats.d2h_bytes, t.stats.h2d_bytes) == (ROW, 0)
    np.testing.assert_array_equal(np.asarray(a[0]), np.arange(12.0, 18.0))
    assert not a[0].is_valid("gpu") and a[3].is_valid("gpu") and not a[3].is_valid("host")


def test_strided_view_is_sent_and_received_contiguously():
    c0, c1 = World(2).comms()
    a = sa.SmartArray(np.arange(20.0).reshape(4, 5))
    sampi.send(c0, a[:, 1], dest=1)
    b = sa.SmartArray(np.zeros((4, 5)))
    sampi.recv(c1, b[:, 3], source=0)
    expect = np.zeros((4, 5))
    expect[:, 3] = np.arange(1.0, 20.0, 5)
    np.testing.assert_array_equal(np.asarray(b), expect)


def test_plain_buffers_pass_through():
    c0, c1 = World(2).comms()
    sampi.send(c0, np.arange(3.0), 1)
    out = np.zeros(3)
    sampi.recv(c1, out, 0)
    np.testing.assert_array_equal(out, np.arange(3.0))


def _receive(how: str, comm, view, source: int) -> None:
    """Receive into ``view`` from ``source`` with one of smartarray.mpi's receives."""
    if how == "recv":
        sampi.recv(comm, view, source, tag=2)
    elif how == "sendrecv":
        sampi.sendrecv(comm, np.zeros(1), comm.PROC_NULL, view, source, sendtag=2)
    else:
        req = sampi.irecv(comm, view, source, tag=2)
        assert req.test() if how == "irecv-test" else (req.wait() is None)
        assert req.done


RECEIVES = ["recv", "sendrecv", "irecv-wait", "irecv-test"]


@pytest.mark.parametrize("how", RECEIVES)
def test_a_receive_from_proc_null_leaves_the_view_untouched(how):
    """MPI: a receive from PROC_NULL "does not modify the receive buffer": the view keeps its
    values and its validity (it is current on the device only here), nothing moves."""
    c0, _ = World(2).comms()
    a = block(3)
    with sa.trace() as t:
        _receive(how, c0, a[1, :], c0.PROC_NULL)
    assert t.stats.h2d_bytes == t.stats.d2h_bytes == 0
    assert a.valid_at == ("gpu",) and not a[1].is_valid("host")
    np.testing.assert_array_equal(np.asarray(a), np.arange(18.0).reshape(3, 6))


@pytest.mark.parametrize("how", RECEIVES)
@pytest.mark.parametrize("arrived", [0, 1, 5, 7, 10])
def test_a_message_shorter_than_the_view_lands_only_what_arrived(how, arrived):
    """A message shorter than the receive buffer is legal in MPI: its elements land in the
    view's first elements in C order; the rest of the view keeps its values and validity."""
    c0, c1 = World(2).comms()
    a = block(4)  # current on the device only
    view = a[1:3, 1:]  # 2 x 5, strided
    message = -1.0 - np.arange(arrived)
    c1.Send(message, dest=0, tag=2)
    with sa.trace() as t:
        _receive(how, c0, view, 1)
    assert t.stats.h2d_bytes == 0
    # What did not arrive is still current on the device only (its host bytes are stale);
    # what arrived is a host write.
    elements = [(r, c) for r in (1, 2) for c in range(1, 6)]
    for k, (r, c) in enumerate(elements):
        element = a[r, c : c + 1]
        if k < arrived:
            assert element.valid_at == ("host",), (r, c)
        else:
            assert element.valid_at == ("gpu",), (r, c)
    expect = np.arange(24.0).reshape(4, 6)
    flat = expect[1:3, 1:].reshape(-1)  # (a copy: written back below)
    flat[:arrived] = message
    expect[1:3, 1:] = flat.reshape(2, 5)
    np.testing.assert_array_equal(np.asarray(a), expect)


# -- non-blocking ----------------------------------------------------------------------------


def test_irecv_lands_at_wait_and_not_before():
    c0, c1 = World(2).comms()
    a = block(3)
    req = sampi.irecv(c0, a[0, :], source=1, tag=9)
    assert not req.done and not req.test()  # nothing sent yet
    c1.Send(np.full(6, 7.0), dest=0, tag=9)
    # Pending: the view keeps its earlier values (the message waits in staging).
    np.testing.assert_array_equal(np.asarray(a[0]), np.arange(6.0))
    assert a[0].is_valid("gpu")  # nothing recorded yet
    with sa.trace() as t:
        req.wait()
    assert t.stats.h2d_bytes == t.stats.d2h_bytes == 0
    assert req.done and a[0].is_valid("host") and not a[0].is_valid("gpu")
    np.testing.assert_array_equal(np.asarray(a[0]), np.full(6, 7.0))
    req.wait()  # a second wait is a no-op
    np.testing.assert_array_equal(np.asarray(a[0]), np.full(6, 7.0))


def test_irecv_overwrites_a_write_made_while_pending():
    c0, c1 = World(2).comms()
    a = sa.SmartArray(np.zeros((3, 6)))
    req = sampi.irecv(c0, a[2, :], source=1)
    a[2, :] = 5.0  # the receive happens at wait(): it wins
    c1.Send(np.full(6, 1.0), dest=0)
    assert req.test() and req.done
    np.testing.assert_array_equal(np.asarray(a[2]), np.ones(6))


def test_isend_sends_the_values_at_posting():
    c0, c1 = World(2).comms()
    a = block(3)
    with sa.trace() as t:
        req = sampi.isend(c0, a[1, :], dest=1)
    assert t.stats.d2h_bytes == ROW
    a[1, :] = -5.0  # a later write does not change what is sent
    sampi.waitall([req])
    got = np.empty(6)
    c1.Recv(got, source=0)
    np.testing.assert_array_equal(got, np.arange(6.0, 12.0))


def test_dropped_pending_receive_warns():
    (c0,) = World(1).comms()
    a = sa.SmartArray(np.zeros(6))
    req = sampi.irecv(c0, a, source=0)
    with pytest.warns(sa.SmartArrayWarning, match="dropped before wait"):
        del req
        import gc

        gc.collect()


def test_waitall_refuses_other_objects_before_waiting():
    (c0,) = World(1).comms()
    a = sa.SmartArray(np.zeros(6))
    req = sampi.irecv(c0, a, source=0)
    with pytest.raises(TypeError, match="Request"):
        sampi.waitall([req, object()])
    assert not req.done
    c0.Send(np.ones(6), dest=0)
    req.wait()


# -- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda c, a: sampi.send(object(), a[0], 1), "comm must be an mpi4py communicator"),
        (lambda c, a: sampi.send(c, a[0], 1.5), "dest must be an int"),
        (lambda c, a: sampi.recv(c, a[0], "x"), "source must be an int"),
        (lambda c, a: sampi.recv(c, None, 0), "buf must be a SmartArray"),
        (lambda c, a: sampi.isend(c, a[0], 0, tag=None), "tag must be an int"),
        (lambda c, a: sampi.exchange_halos(c, np.zeros((4, 6))), "a must be a SmartArray"),
        (lambda c, a: sampi.exchange_halos(c, a, axis=2), "axis must be in"),
        (lambda c, a: sampi.exchange_halos(c, a, width=0), "width must be at least 1"),
        (lambda c, a: sampi.exchange_halos(c, a, width=2), "needs at least 6"),
    ],
)
def test_bad_input_moves_nothing(call, match):
    (c0,) = World(1).comms()
    a = block(5)
    before = np.array(a.get("gpu"))
    with sa.trace() as t, pytest.raises((TypeError, ValueError), match=match):
        call(c0, a)
    assert t.stats.h2d_bytes == t.stats.d2h_bytes == 0
    assert c0.calls == [] and not a.is_valid("host")
    np.testing.assert_array_equal(np.array(a.get("gpu")), before)


# -- halo exchange ---------------------------------------------------------------------------


def run_ranks(size: int, body) -> list:
    """Run ``body(comm)`` on ``size`` ranks (threads); return the results in rank order."""
    comms = World(size).comms()
    results: list = [None] * size
    errors: list = []

    def go(c):
        try:
            results[c.rank] = body(c)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=go, args=(c,)) for c in comms]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    if errors:
        raise errors[0]
    return results


@pytest.mark.parametrize("size", [1, 2, 3, 4])
@pytest.mark.parametrize("width", [1, 2])
def test_exchange_halos_moves_only_halo_rows(size, width):
    rows = 4 * width  # the first and last owned layers do not overlap
    owned = rows - 2 * width
    blocks = []
    for r in range(size):
        blocks.append(block(rows, start=100.0 * r))
        blocks[-1].name = f"rank{r}"

    def body(comm):
        sampi.exchange_halos(comm, blocks[comm.rank], axis=0, width=width)

    with sa.trace() as t:  # every thread's copies; told apart by the arrays' names
        run_ranks(size, body)
        for a in blocks:
            a.get("gpu")  # what the next kernel does
    for r, a in enumerate(blocks):
        moved = {(e.direction, e.start, e.stop) for e in t.events if e.array == f"rank{r}"}
        assert len(moved) == len([e for e in t.events if e.array == f"rank{r}"])
        expect = set()
        lo, hi = width * ROW, (rows - width) * ROW  # owned rows, in bytes
        if r > 0:  # first owned rows sent down; lower halo received, uploaded next
            expect |= {("d2h", lo, lo + width * ROW), ("h2d", 0, lo)}
        if r < size - 1:  # last owned rows sent up; upper halo received, uploaded next
            expect |= {("d2h", hi - width * ROW, hi), ("h2d", hi, rows * ROW)}
        assert moved == expect, r
        mine = 100.0 * r + np.arange(rows * 6.0).reshape(rows, 6)
        want = mine.copy()
        if r > 0:  # lower halo: the last owned layers of rank r - 1
            below = 100.0 * (r - 1) + np.arange(rows * 6.0).reshape(rows, 6)
            want[:width] = below[owned : owned + width]
        if r < size - 1:  # upper halo: the first owned layers of rank r + 1
            above = 100.0 * (r + 1) + np.arange(rows * 6.0).reshape(rows, 6)
            want[rows - width :] = above[width : 2 * width]
        np.testing.assert_array_equal(np.asarray(a), want)


def test_exchange_halos_periodic_and_other_axis():
    def body(comm):
        a = sa.SmartArray(np.full((2, 5), float(comm.rank)))
        sampi.exchange_halos(comm, a, axis=-1, periodic=True)
        return np.array(np.asarray(a))

    out = run_ranks(3, body)
    for r, got in enumerate(out):
        np.testing.assert_array_equal(got[:, 0], np.full(2, (r - 1) % 3))
        np.testing.assert_array_equal(got[:, 1:4], np.full((2, 3), r))
        np.testing.assert_array_equal(got[:, 4], np.full(2, (r + 1) % 3))


# -- the optional dependency -----------------------------------------------------------------


def test_import_without_mpi4py_names_the_extra():
    code = (
        "import sys; sys.modules['mpi4py'] = None\n"
        "import smartarray\n"
        "try:\n"
        "    import smartarray.mpi\n"
        "except ImportError as e:\n"
        "    print('ImportError:', e)\n"
    )
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "ImportError:" in out.stdout and "pip install '.[mpi]'" in out.stdout


# -- real MPI (the mpi extra: mpi4py and MPICH's wheel, with mpiexec) ------------------------


def _mpiexec() -> str | None:
    if importlib.util.find_spec("mpi4py") is None:
        return None
    beside = Path(sys.executable).parent / "mpiexec"  # the mpich wheel installs it here
    return str(beside) if beside.exists() else shutil.which("mpiexec")


MPIEXEC = _mpiexec()


_NO_MPI = pytest.mark.skipif(MPIEXEC is None, reason="needs mpi4py and mpiexec (the mpi extra)")


def needs_mpi(test):
    """Mark a test that runs ranks under ``mpiexec``: skipped without mpi4py and mpiexec, or
    (the ``mpiexec_starts`` fixture) where mpiexec cannot start two ranks of mpi4py here."""
    return _NO_MPI(pytest.mark.usefixtures("mpiexec_starts")(test))


def _env() -> dict[str, str]:
    # The simulator in every rank; SMARTARRAY_STRICT, if set, is kept: strict mode applies.
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    with_checkout(env)
    return env


def _run(args: list[str], ranks: int | None, env: dict[str, str] | None = None) -> str:
    """Standard output of the command, rank by rank (ranks' lines never interleave); ``env``:
    the ranks' environment (default: the simulator's, :func:`_env`)."""
    cmd = [sys.executable, *args]
    env = _env() if env is None else env
    if ranks is None:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout
    assert MPIEXEC is not None
    with tempfile.TemporaryDirectory() as tmp:
        pattern = os.path.join(tmp, "out.%r")  # MPICH's mpiexec: one file per rank
        cmd = [MPIEXEC, "-outfile-pattern", pattern, "-n", str(ranks), *cmd]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
        files = [Path(tmp, f"out.{r}") for r in range(ranks)]
        texts = [f.read_text() if f.exists() else None for f in files]
    if out.returncode != 0 or None in texts:
        # A rank that wrote nothing: mpiexec may not have started it (a system OpenMPI that
        # refuses root or lacks -outfile-pattern), so what mpiexec said is the message.
        ranks_said = [
            f"rank {r} wrote no output" if t is None else f"rank {r}:\n{t}"
            for r, t in enumerate(texts)
        ]
        raise AssertionError(
            f"{' '.join(cmd[:5])} ... exit status {out.returncode}\n"
            + "\n".join(ranks_said)
            + f"\nmpiexec's stdout:\n{out.stdout}\nmpiexec's stderr:\n{out.stderr}"
        )
    return "".join(t for t in texts if t is not None)


def _why_mpiexec_cannot_start() -> str | None:
    """Why mpiexec cannot start two ranks of mpi4py in one world here, as :func:`_run` starts
    them, in its own words; None when it can. One start of two ranks that import mpi4py."""
    probe = "from mpi4py import MPI; w = MPI.COMM_WORLD; print(w.Get_rank(), w.Get_size())"
    try:
        said = _run(["-c", probe], 2)
    except (AssertionError, subprocess.TimeoutExpired) as e:
        said = str(e) if len(str(e)) < 2000 else f"{str(e)[:500]} ... {str(e)[-1500:]}"
        return f"mpiexec cannot start 2 ranks of mpi4py here: {said}"
    if sorted(said.splitlines()) != ["0 2", "1 2"]:  # an mpi4py built for another MPI
        return f"{MPIEXEC} -n 2 started no world of 2 ranks of mpi4py here: {said!r}"
    return None


@pytest.fixture(scope="module")
def mpiexec_starts() -> None:
    """Skip with mpiexec's words where it cannot start ranks here: the machine's MPI, not
    smartarray (a system OpenMPI refusing root or not knowing MPICH's ``-outfile-pattern``)."""
    why = _why_mpiexec_cannot_start()
    if why is not None:
        pytest.skip(why)


def test_an_mpiexec_that_starts_no_rank_fails_with_its_own_words(tmp_path, monkeypatch):
    """A system OpenMPI refusing root started no rank: the test died with FileNotFoundError
    'out.0' instead of mpiexec's message."""
    fake = tmp_path / "mpiexec"
    fake.write_text(
        "#!/bin/sh\necho 'mpiexec has detected an attempt to run as root.' >&2\n"
        "echo 'on stdout too'\nexit 3\n"
    )
    fake.chmod(0o755)
    monkeypatch.setattr(sys.modules[__name__], "MPIEXEC", str(fake))
    with pytest.raises(AssertionError) as failed:
        _run(["-c", "print('never')"], 2)
    message = str(failed.value)
    assert "exit status 3" in message and str(fake) in message
    assert "attempt to run as root" in message and "on stdout too" in message
    assert "rank 0 wrote no output" in message and "rank 1 wrote no output" in message
    why = _why_mpiexec_cannot_start()  # the MPI tests skip with these words
    assert why is not None and "attempt to run as root" in why and "exit status 3" in why


HEAT = ["examples/mpi_heat.py", "--n", "17", "--steps", "4"]


@pytest.fixture(scope="module")
def single_process():
    return _run(HEAT, None)


def _digest(out: str) -> str:
    found = re.findall(r"^result: .*sha256 ([0-9a-f]+)$", out, flags=re.M)
    assert len(found) == 1, out
    return found[0]


@needs_mpi
@pytest.mark.parametrize("ranks", [2, 3])
def test_mpi_heat_moves_only_halo_rows(single_process, ranks):
    out = _run(HEAT, ranks)
    assert _digest(out) == _digest(single_process)  # bit for bit, whatever the ranks
    assert f"4 steps on a 17x17 grid over {ranks} rank(s)" in out
    steps = re.findall(
        r"^rank (\d+) step bytes: h2d (\[.*\]) d2h (\[.*\]) d2d (\[.*\])$", out, re.M
    )
    assert sorted(int(s[0]) for s in steps) == list(range(ranks))
    row = 17 * 8
    counts = [len(c) for c in np.array_split(np.arange(17), ranks)]
    for rank, *figures in steps:
        r = int(rank)
        h2d, d2h, d2d = (ast.literal_eval(f) for f in figures)
        neighbours = (r > 0) + (r < ranks - 1)
        assert len(h2d) == 4
        # The first step uploads the whole block (owned rows and two halos); nothing else.
        assert (h2d[0], d2h[0], d2d[0]) == ((counts[r] + 2) * row, 0, 0)
        # Later steps: the sent rows down, the received rows up, and nothing else.
        assert h2d[1:] == d2h[1:] == [neighbours * row] * 3
        assert d2d[1:] == [0] * 3


@needs_mpi
def test_isend_irecv_with_mpi4py():
    script = (
        "import numpy as np\n"
        "from mpi4py import MPI\n"
        "import smartarray as sa, smartarray.mpi as sampi\n"
        "comm = MPI.COMM_WORLD\n"
        "a = sa.SmartArray(np.arange(12.0).reshape(3, 4) + 100 * comm.rank)\n"
        "a.get('gpu'); a.mark_changed('gpu')\n"
        "other = 1 - comm.rank\n"
        "with sa.trace() as t:\n"
        "    r = sampi.irecv(comm, a[0, :], source=other, tag=4)\n"
        "    s = sampi.isend(comm, a[1, :], dest=other, tag=4)\n"
        "    sampi.waitall([s, r])\n"
        "assert (t.stats.d2h_bytes, t.stats.h2d_bytes) == (32, 0), t.stats\n"
        "assert a[0].is_valid('host') and not a[0].is_valid('gpu') and not a[2].is_valid('host')\n"
        "assert np.array_equal(np.asarray(a[0]), np.arange(4.0, 8.0) + 100 * other)\n"
        "st = MPI.Status()\n"
        "sampi.sendrecv(comm, a[2, :], other, a[0, :], other, sendtag=5, status=st)\n"
        "assert st.Get_source() == other\n"
        "assert np.array_equal(np.asarray(a[0]), np.arange(8.0, 12.0) + 100 * other)\n"
        "print('ok', comm.rank)\n"
    )
    out = _run(["-c", script], 2)
    # Two ranks print to one pipe: their lines may interleave, so count the tokens.
    assert sorted(re.findall(r"ok (\d)", out)) == ["0", "1"]


@needs_mpi
def test_docs_show_what_the_example_prints():
    text = (ROOT / "docs" / "distributed.rst").read_text()
    shown = text.split(".. code-block:: text\n\n", 1)[1].split("\n\n", 1)[0]
    shown_lines = [line.strip() for line in shown.splitlines()]
    out = _run(["examples/mpi_heat.py", "--n", "48", "--steps", "4"], 3)
    printed = [
        line.strip() for line in out.splitlines() if not line.startswith(("target:", "defaults"))
    ]
    assert printed == shown_lines


@needs_mpi
def test_mpi4py_takes_a_smartarray_through_dlpack_coherently():
    # mpi4py 4 takes an object without the buffer protocol through __dlpack__ (asking for the
    # host: __dlpack_device__ is the CPU): a send gets the current host data (downloaded
    # first), a receive writes the host copy, recorded as a host write before MPI writes it.
    script = (
        "import numpy as np\n"
        "from numba import cuda\n"
        "from mpi4py import MPI\n"
        "import smartarray as sa\n"
        "asked = []\n"
        "dlpack = sa.SmartArray.__dlpack__\n"
        "def spy(self, **kw):\n"
        "    asked.append(kw.get('dl_device'))\n"
        "    return dlpack(self, **kw)\n"
        "sa.SmartArray.__dlpack__ = spy\n"
        "@cuda.jit\n"
        "def add_one(x):\n"
        "    i = cuda.grid(1)\n"
        "    if i < x.size:\n"
        "        x[i] += 1\n"
        "a = sa.SmartArray(np.arange(4.0), where='gpu')\n"
        "add_one[1, 32](a)\n"
        "b = sa.SmartArray(np.zeros(4))\n"
        "sa.reset_stats()\n"
        "comm = MPI.COMM_SELF\n"
        "r = comm.Irecv(b, source=0, tag=1)\n"
        "comm.Send(a, dest=0, tag=1)\n"
        "r.Wait()\n"
        "s = sa.stats()\n"
        "assert (s.d2h_bytes, s.h2d_bytes, s.d2d_bytes) == (32, 0, 0), s\n"
        "assert len(asked) == 2 and all(d in (None, (1, 0)) for d in asked), asked\n"
        "assert b.valid_at == ('host',)\n"
        "assert np.array_equal(np.asarray(b), np.arange(4.0) + 1)\n"
        "add_one[1, 32](b)  # the received values go up\n"
        "assert np.array_equal(np.asarray(b), np.arange(4.0) + 2)\n"
        "assert np.array_equal(np.asarray(a), np.arange(4.0) + 1)\n"
        "print('ok')\n"
    )
    assert "ok" in _run(["-c", script], None)


@needs_mpi
def test_receives_from_proc_null_and_short_messages_with_mpi4py():
    # mpi4py's own Status (found beside its communicators) says what arrived.
    script = (
        "import numpy as np\n"
        "from mpi4py import MPI\n"
        "import smartarray as sa, smartarray.mpi as sampi\n"
        "comm = MPI.COMM_SELF\n"
        "def fresh():\n"
        "    a = sa.SmartArray(np.arange(12.0).reshape(3, 4))\n"
        "    a.get('gpu'); a.mark_changed('gpu')\n"
        "    return a\n"
        "for how in ('recv', 'sendrecv', 'irecv'):\n"
        "    a = fresh()\n"
        "    if how == 'recv':\n"
        "        sampi.recv(comm, a[1, :], MPI.PROC_NULL)\n"
        "    elif how == 'sendrecv':\n"
        "        sampi.sendrecv(comm, a[0, :], MPI.PROC_NULL, a[1, :], MPI.PROC_NULL)\n"
        "    else:\n"
        "        sampi.irecv(comm, a[1, :], MPI.PROC_NULL).wait()\n"
        "    assert a.valid_at == ('gpu',), (how, a.valid_at)\n"
        "    assert np.array_equal(np.asarray(a), np.arange(12.0).reshape(3, 4)), how\n"
        "    a = fresh()\n"
        "    r = comm.Isend(np.array([-1.0, -2.0, -3.0, -4.0, -5.0]), dest=0, tag=7)\n"
        "    st = MPI.Status()\n"
        "    if how == 'recv':\n"
        "        sampi.recv(comm, a[1:, :], 0, tag=7, status=st)\n"
        "    elif how == 'sendrecv':\n"
        "        sampi.sendrecv(comm, a[0, :], MPI.PROC_NULL, a[1:, :], 0, recvtag=7)\n"
        "    else:\n"
        "        sampi.irecv(comm, a[1:, :], 0, tag=7).wait()\n"
        "    r.Wait()\n"
        "    assert a[2, 1:].valid_at == ('gpu',), (how, a[2, 1:].valid_at)\n"
        "    expect = np.arange(12.0).reshape(3, 4)\n"
        "    expect[1] = [-1.0, -2.0, -3.0, -4.0]\n"
        "    expect[2, 0] = -5.0\n"
        "    assert np.array_equal(np.asarray(a), expect), (how, np.asarray(a))\n"
        "print('ok')\n"
    )
    assert "ok" in _run(["-c", script], None)


def test_mpi_heat_without_mpi4py_ends_in_one_line_naming_the_extra():
    run = (
        "import runpy, sys; sys.modules['mpi4py'] = None; "  # what a missing mpi4py raises
        "sys.argv = ['examples/mpi_heat.py']; runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    out = subprocess.run(
        [sys.executable, "-c", run],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        "mpi_heat.py: smartarray.mpi needs mpi4py and an MPI library: from a clone of smartarray, "
        "pip install '.[mpi]' (mpi4py>=4 and the mpich wheel)"
    ]


def _fake_devices_env(devices: int) -> dict[str, str]:
    """Each rank on its own fake CUDA driver with ``devices`` devices (peer access between
    them: the fake driver's default)."""
    env = with_checkout(real_target_env())
    env.update(
        SMARTARRAY_FAKE_GPU="1",
        SMARTARRAY_FAKE_GPU_DEVICES=str(devices),
        NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS="0",
    )
    return env


def _step_bytes(out: str) -> dict[int, tuple[list[int], list[int], list[int]]]:
    steps = re.findall(
        r"^rank (\d+) step bytes: h2d (\[.*\]) d2h (\[.*\]) d2d (\[.*\])$", out, re.M
    )
    return {int(r): tuple(ast.literal_eval(f) for f in figures) for r, *figures in steps}


@needs_mpi
def test_several_devices_per_rank_move_only_halo_rows():
    """2 ranks x 2 fake devices: the same result as one process on one device; per step and
    rank after the first, the row sent to the other rank comes down, the row received goes up,
    and the two rows at the devices' parts' edges go peer to peer."""
    heat = ["examples/mpi_devices_heat.py", "--n", "12", "--steps", "3"]
    alone = _run(heat, None, _fake_devices_env(1))
    out = _run(heat, 2, _fake_devices_env(2))
    assert _digest(out) == _digest(alone)
    assert "rank 0/2: rows 0..5 of 12x12 on device(s) [0, 1]" in out
    assert "rank 1/2: rows 6..11 of 12x12 on device(s) [0, 1]" in out
    row = 12 * 8
    steps = _step_bytes(out)
    assert sorted(steps) == [0, 1]
    for h2d, d2h, d2d in steps.values():
        assert h2d[1:] == d2h[1:] == [row, row]  # one neighbouring rank each
        assert d2d[1:] == [2 * row, 2 * row]
    assert _step_bytes(alone)[0][1][1:] == [0, 0]  # one process, one device: nothing moves
    # docs/distributed.rst shows this run's output.
    text = (ROOT / "docs" / "distributed.rst").read_text()
    section = text.split("Several GPUs per rank\n", 1)[1]
    shown = section.split(".. code-block:: text\n\n", 1)[1].split("\n\n", 1)[0]
    printed = [line for line in out.splitlines() if not line.startswith(("target:", "defaults"))]
    assert [line.strip() for line in shown.splitlines()] == printed
