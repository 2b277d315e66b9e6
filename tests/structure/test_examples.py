"""Every script in examples/ runs, at a small size, and moves what it says."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from smartarray import _fakegpu
from smartarray.memory import SIMULATOR
from tests._targets import real_target_env, with_checkout

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_explicit_transfers(capsys):
    result = load("explicit_transfers").main(n=256)
    np.testing.assert_array_equal(result, 2 * np.arange(256, dtype=np.float32))
    out = capsys.readouterr().out
    assert "h2d     1024 bytes  (to_device)" in out
    assert "d2h     1024 bytes  (copy_to_host)" in out


def test_readme_snippets_run(capsys):
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "h2d_bytes=8000" in lines[0] and "d2h_bytes=8000" in lines[0]
    assert lines[1:3] == ["20.0", "509487.0"]  # as the README says
    assert "h2d_count=1, h2d_bytes=8000, d2h_count=4, d2h_bytes=7992" in lines[3]


def test_every_example_is_tested():
    tested = {
        "explicit_transfers",
        "heat_devices",  # also on 2 and 4 devices of the fake driver, below
        "host_edits",
        "inferred_access",
        "mpi_devices_heat",  # tests/interop/test_mpi.py: under mpiexec, 2 fake devices a rank
        "mpi_heat",  # tests/interop/test_mpi.py runs it under mpiexec
        "pipeline",
        "porting_numba_smartarray",
        "quickstart",
        "stencil",
    }
    assert {p.stem for p in EXAMPLES.glob("*.py")} == tested


def test_quickstart(capsys):
    result, moved = load("quickstart").main(n=200, launches=3)
    assert result == float(np.arange(200.0).sum() + 3 * 200 - 3)  # a[0] was reset to 0
    assert (moved.h2d_count, moved.h2d_bytes) == (1, 1600)  # uploaded once, for 3 launches
    assert (moved.d2h_count, moved.d2h_bytes) == (2, 8 + 1584)  # one element, then the rest
    out = capsys.readouterr().out
    assert "h2d     1600 bytes  (device use)" in out
    assert "d2h        8 bytes  (host read)" in out
    assert "d2h     1584 bytes  (njit argument)" in out


def test_stencil(capsys):
    module = load("stencil")
    result, moved = module.main(n=64, steps=5)
    u0 = np.zeros(64)
    u0[32], u0[-1] = 100.0, 10.0
    np.testing.assert_allclose(result, module.reference(u0, 5))
    assert result[0] == 0.0 and result[-1] == 10.0  # the fixed ends
    assert (moved.h2d_count, moved.h2d_bytes) == (1, 512)  # u once; Out(v) is never uploaded
    assert (moved.d2h_count, moved.d2h_bytes) == (1, 512)  # the result once
    assert "1 upload(s), 512 bytes up; 1 download(s), 512 bytes down" in capsys.readouterr().out


def test_stencil_check_allows_a_gpus_rounding_and_no_more():
    """On a GPU (fused multiply-adds) the GPU-sized run failed its own check: the field decays
    into subnormal numbers, where a last-bit difference (5e-324) is 5% of the value."""
    module = load("stencil")
    u0 = np.zeros(2048)
    u0[1024], u0[-1] = 100.0, 10.0
    expected = module.reference(u0, 600)
    tiny = (expected != 0) & (np.abs(expected) < np.finfo(np.float64).tiny)
    assert tiny.any()  # subnormal values, as at the GPU-sized defaults
    module.check(np.nextafter(expected, np.inf), expected, u0)  # every last bit differs
    module.check(np.nextafter(expected, -np.inf), expected, u0)
    for at, by in ((1024, 1e-6), (-2, 1e-6), (int(np.flatnonzero(tiny)[-1]), 1e-9)):
        wrong = expected.copy()
        wrong[at] += by  # a wrong value, even a small one, is still an error
        with pytest.raises(AssertionError):
            module.check(wrong, expected, u0)


def test_inferred_access(capsys):
    result, plain, inferred = load("inferred_access").main(n=256, steps=3)
    assert result.shape == (256,)
    nbytes = 256 * 8
    # every array up once either way
    assert (plain.h2d_count, plain.h2d_bytes) == (3, 3 * nbytes)
    assert (inferred.h2d_count, inferred.h2d_bytes) == (3, 3 * nbytes)
    # plain cuda.jit: both inputs come back for each host look, then the result
    assert (plain.d2h_count, plain.d2h_bytes) == (7, 7 * nbytes)
    # smartarray.jit: the inputs stay current on the host; only the result comes down
    assert (inferred.d2h_count, inferred.d2h_bytes) == (1, nbytes)
    out = capsys.readouterr().out
    assert "coef: read only" in out and "rhs: read only" in out
    assert "state: written at line" in out
    assert "smartarray.jit  3 upload(s), 6144 bytes up; 1 download(s), 2048 bytes down" in out


def test_host_edits_upload_only_the_edited_bytes(capsys):
    result, per_step = load("host_edits").main(n=128, steps=3, k=4, factor=0.5)
    expected = np.ones(128)
    for step in range(3):
        expected[step * 4 : step * 4 + 4] = step + 1.0
        expected *= 0.5
    np.testing.assert_array_equal(result, expected)
    assert [s.h2d_bytes for s in per_step] == [1024, 32, 32, 0]  # first all, then 4 floats
    assert [s.h2d_count for s in per_step] == [1, 1, 1, 0]
    assert [s.d2h_bytes for s in per_step] == [0, 0, 0, 1024]  # nothing until the end
    out = capsys.readouterr().out
    assert "step 1: edited a[4:8] on the host, uploaded 32 bytes" in out
    assert "downloaded 1024 bytes once at the end" in out


def test_pipeline(capsys):
    module = load("pipeline")
    totals, moved = module.main(n=64, rounds=3)
    assert totals == module.reference(64, 3)
    assert (moved.h2d_count, moved.h2d_bytes) == (3, 3 * 512)  # x up once a round
    assert (moved.d2h_count, moved.d2h_bytes) == (3, 3 * 512)  # y down once a round
    assert moved.d2d_count == 0
    assert "3 upload(s), 1536 bytes up; 3 download(s), 1536 bytes down" in (capsys.readouterr().out)


def test_porting_numba_smartarray(capsys):
    result, old, new = load("porting_numba_smartarray").main(n=64, steps=3)
    expected = np.full(64, 8.0)
    expected[0] = 2.0
    np.testing.assert_array_equal(result, expected)
    # gpu()/host() and host_changed() move the whole array each step ...
    assert (old.h2d_count, old.h2d_bytes) == (3, 3 * 512)
    assert (old.d2h_count, old.d2h_bytes) == (3, 3 * 512)
    # ... a[0] = step makes 8 bytes stale, and the result comes down once, minus a[0].
    assert (new.h2d_count, new.h2d_bytes) == (3, 512 + 8 + 8)
    assert (new.d2h_count, new.d2h_bytes) == (1, 504)
    out = capsys.readouterr().out
    assert "new style (kernel(a)): 3 upload(s) 528 bytes, 1 download(s) 504 bytes" in out


def test_heat_devices_on_this_sessions_device(capsys):
    module = load("heat_devices")
    run = module.main(n=16, steps=4, devices=1)  # checks itself against NumPy
    np.testing.assert_allclose(run.result, module.reference(module.initial(16), 4))
    grid = 16 * 16 * 8
    # One block on one device: the grid up once, nothing between steps, down once.
    assert run.steps[0] == {0: {"h2d": grid}}
    assert run.steps[1:] == [{}] * 3
    assert run.last == {0: {"d2h": grid}}
    assert run.optimum == {0: {"first": {"h2d": grid}, "step": {}, "last": {"d2h": grid}}}
    # Three blocks on the one device: its copy holds them all; still the grid once each way.
    three = module.main(n=16, steps=4, parts=3, devices=1, quiet=True)
    assert (three.steps[0], three.steps[1:], three.last) == (run.steps[0], [{}] * 3, run.last)
    assert three.digest == run.digest
    out = capsys.readouterr().out
    assert f"device 0: step 1            h2d {grid:,}  (h2d {grid:,})" in out
    assert f"sha256 {run.digest}" in out


HEAT_DEVICES = """
import importlib.util, sys
from smartarray import _fakegpu
spec = importlib.util.spec_from_file_location("heat_devices", "examples/heat_devices.py")
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
before = dict(_fakegpu.current().peer_copies)
run = module.main(n=16, steps=4)
copies = sum(n - before.get(k, 0) for k, n in _fakegpu.current().peer_copies.items())
one = module.main(n=16, steps=4, devices=1, quiet=True)
plain = lambda c: {str(d): dict(v) for d, v in c.items()}
print(json.dumps({"steps": [plain(s) for s in run.steps], "last": plain(run.last),
                  "optimum": {str(d): {k: dict(v) for k, v in o.items()}
                              for d, o in run.optimum.items()},
                  "digest": run.digest, "one_device_digest": one.digest,
                  "peer_copies": copies}))
"""


def _heat_optimum(devices: int, k: int, peer: bool, n: int = 16) -> dict:
    """Hand-written transfers for device ``k`` of ``devices``, ``n`` rows of ``n`` float64:
    its block of ``m`` rows plus a halo row per neighbour up once; each later step a row in
    from each neighbour (peer to peer, or down from it and up); the owned rows down once."""
    row, m = n * 8, n // devices
    above, below = k > 0, k < devices - 1
    neighbours = above + below
    if peer:  # step 1: the two rows shared with the block above come from its device
        first = {"h2d": (m + neighbours - 2 * above) * row}
        first.update({"d2d_in": 2 * row} if above else {})
        first.update({"d2d_out": 2 * row} if below else {})
        step = {"d2d_in": neighbours * row, "d2d_out": neighbours * row}
    else:
        first = {"h2d": (m + neighbours) * row}
        step = {"h2d": neighbours * row, "d2h": neighbours * row}
    return {"first": first, "step": step, "last": {"d2h": m * row}}


@pytest.mark.parametrize("devices", [2, 4])
@pytest.mark.parametrize("peer", [True, False])
def test_heat_devices_moves_the_hand_written_optimum_per_device(devices, peer):
    from tests.doubles.test_fakegpu import run_fake

    env = {"SMARTARRAY_FAKE_GPU_DEVICES": str(devices), "SMARTARRAY_FAKE_GPU_PEER": str(+peer)}
    out = run_fake(HEAT_DEVICES, env=env)
    # The same field on 1, 2 and 4 devices, bit for bit: the one-device reference runs in the
    # child, on the same target (on a GPU this process's own run would contract a*b+c into
    # fused multiply-adds, which round otherwise).
    assert out["digest"] == out["one_device_digest"]
    for k in range(devices):
        d, want = str(k), _heat_optimum(devices, k, peer)
        assert out["optimum"][d] == want, d  # what the example prints as the optimum
        assert out["steps"][0][d] == want["first"], d
        assert [s[d] for s in out["steps"][1:]] == [want["step"]] * 3, d
        assert out["last"][d] == want["last"], d
    # peer copies: one per pair in step 1 (its two shared rows), then 2 per pair a step
    assert out["peer_copies"] == ((devices - 1) * (1 + 2 * 3) if peer else 0)


HEAT_DEVICES_THREADED = """
import importlib.util
spec = importlib.util.spec_from_file_location("heat_devices", "examples/heat_devices.py")
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
one = module.main(n=16, steps=4, devices=1, quiet=True)
runs = [module.main(n=16, steps=4, threaded=True, quiet=True) for _ in range(3)]
alone = module.main(n=16, steps=4, quiet=True)
plain = lambda c: {str(d): dict(v) for d, v in c.items()}
print(json.dumps({"same": [bool(np.array_equal(r.result, one.result)) for r in runs],
                  "threaded": [[plain(s) for s in r.steps] for r in runs],
                  "one_thread": [plain(s) for s in alone.steps]}))
"""


@pytest.mark.parametrize("devices", [2, 3])
@pytest.mark.parametrize("peer", [True, False])
def test_heat_devices_with_one_host_thread_per_device_equals_one_device(devices, peer):
    """One host thread per device, each launching its block, a barrier between steps: the
    same field as one device, bit for bit, and the same bytes moved as one thread launching
    every block (three runs: the threads interleave differently)."""
    from tests.doubles.test_fakegpu import run_fake

    env = {"SMARTARRAY_FAKE_GPU_DEVICES": str(devices), "SMARTARRAY_FAKE_GPU_PEER": str(+peer)}
    out = run_fake(HEAT_DEVICES_THREADED, env=env)
    assert out["same"] == [True] * 3

    def totals(step: dict) -> dict:
        return {k: sum(c.get(k, 0) for c in step.values()) for k in ("h2d", "d2h", "d2d_in")}

    for steps in out["threaded"]:
        # Step 1: which device uploads a shared row first (the other gets it peer to peer)
        # depends on which thread came first; the bytes in all are the same.
        assert totals(steps[0]) == totals(out["one_thread"][0])
        assert steps[1:] == out["one_thread"][1:]


def test_heat_devices_with_one_host_thread_on_this_sessions_device():
    module = load("heat_devices")
    one = module.main(n=16, steps=3, quiet=True)
    threaded = module.main(n=16, steps=3, threaded=True, quiet=True)
    assert np.array_equal(threaded.result, one.result)
    assert threaded.steps == one.steps


@pytest.mark.gpu
def test_heat_devices_on_every_gpu_of_this_machine():
    """On a machine with two or more GPUs: the same result as one device, and per device the
    bytes hand-written transfers move (the example's optimum, peer access between every pair
    or none)."""
    from smartarray._memory import devices as _devices

    count = _devices.count()
    if count < 2:
        pytest.skip(f"needs two or more GPUs (this process sees {count})")
    pairs = {_devices.peer(a, b) for a in range(count) for b in range(count) if a != b}
    if len(pairs) > 1:
        pytest.skip(
            "peer access between some pairs only: the example's optimum assumes all or none"
        )
    module = load("heat_devices")
    run = module.main(n=256, steps=5, quiet=True)
    assert run.digest == module.main(n=256, steps=5, devices=1, quiet=True).digest
    assert sorted(run.optimum) == list(range(count))
    for d, want in run.optimum.items():
        assert run.steps[0][d] == want["first"], d
        assert [s[d] for s in run.steps[1:]] == [want["step"]] * 4, d
        assert run.last[d] == want["last"], d


# The README's example command (``--n``, ``--steps``) at sizes for the simulator, for every
# example (test_readme_example_command_uses_the_options_of_every_example).
SMALL_ARGS = {
    "explicit_transfers": ["--n", "64", "--steps", "2"],
    "heat_devices": ["--n", "16", "--steps", "3"],
    "host_edits": ["--n", "64", "--steps", "2", "--edit", "2"],
    "inferred_access": ["--n", "64", "--steps", "2"],
    "pipeline": ["--n", "64", "--steps", "2"],
    "porting_numba_smartarray": ["--n", "64", "--steps", "2"],
    "quickstart": ["--n", "64", "--steps", "2"],
    "stencil": ["--n", "64", "--steps", "3"],
}


def _example_command(name: str, args: list[str]) -> list[str]:
    """How a child runs ``examples/NAME.py``: as a script, on this session's target too (the
    examples import smartarray before numba, so ``SMARTARRAY_FAKE_GPU=1`` loads its driver
    first)."""
    return [sys.executable, str(EXAMPLES / f"{name}.py"), *args]


def _session_target_env() -> dict[str, str]:
    """The environment of a child that runs on this session's target (the fake driver's, or
    the simulator), with this checkout's smartarray (not an installed one) first."""
    env = dict(os.environ)
    if _fakegpu.current() is not None:
        env["SMARTARRAY_FAKE_GPU"] = "1"
        # numba-cuda's warning for a small grid on a real target is not the example's own.
        env["NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS"] = "0"
    else:
        env.setdefault("NUMBA_ENABLE_CUDASIM", "1")
    with_checkout(env)
    return env


@pytest.mark.parametrize("name", sorted(SMALL_ARGS))
def test_example_runs_as_a_script(name):
    """``python examples/NAME.py`` with small sizes: its command line works."""
    env = _session_target_env()
    out = subprocess.run(
        _example_command(name, SMALL_ARGS[name]),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "bytes" in out.stdout


# The warnings an example prints on purpose (docs/examples.rst says why): (category, array).
EXPECTED_WARNINGS = {
    "inferred_access": [("PerformanceWarning", "coef"), ("PerformanceWarning", "rhs")],
}
# The warning comes for arrays of 4 KiB or more, after three launches that left them unchanged.
WARNING_ARGS = {**SMALL_ARGS, "inferred_access": ["--n", "512", "--steps", "3"]}


@pytest.mark.parametrize("name", sorted(SMALL_ARGS))
def test_example_prints_no_warning_unless_it_is_the_point(name):
    env = _session_target_env()
    out = subprocess.run(
        _example_command(name, WARNING_ARGS[name]),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    warned = re.findall(r"(\w+Warning): array '(\w+)'", out.stderr)
    assert warned == EXPECTED_WARNINGS.get(name, []), out.stderr
    # Nothing else: each expected warning is two lines (message, then the source line).
    assert len(out.stderr.splitlines()) == 2 * len(warned), out.stderr


def _without_simulator_env() -> dict[str, str]:
    """The environment of a new user: nothing set, the example picks its target itself."""
    env = real_target_env()
    with_checkout(env)
    return env


def _readme_example_command() -> list[str]:
    text = (ROOT / "README.md").read_text()
    match = re.search(r"`python examples/(\w+)\.py ([^`]*)`", text)
    assert match, "the README shows an example command with options"
    return match.group(2).split()


@pytest.mark.parametrize("name", sorted(SMALL_ARGS))
def test_example_with_no_options_picks_its_target_and_sizes(name):
    """``python examples/NAME.py`` as a new user runs it: no GPU needed, small sizes there."""
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py")],
        env=_without_simulator_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    first, second = out.stdout.splitlines()[:2]
    # The child sees the machine as a new user does: on the fake driver's session, no GPU.
    if SIMULATOR or _fakegpu.current() is not None:
        assert first == "target: CUDA simulator (no usable CUDA GPU or driver found)"
        assert second.startswith("defaults (simulator-sized): --n ")
    else:
        assert first == "target: CUDA GPU"
        assert second.startswith("defaults (GPU-sized): --n ")
    assert "bytes" in out.stdout


@pytest.mark.parametrize("name", ["heat_devices", "quickstart"])
def test_example_with_no_options_on_the_fake_driver_names_it_and_sizes_for_it(name):
    """heat_devices' GPU sizes ran past 300 s there: kernels run in Python on the fake driver."""
    env = _without_simulator_env()
    env.update(SMARTARRAY_FAKE_GPU="1")
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    first, second = out.stdout.splitlines()[:2]
    assert first.startswith("target: fake CUDA driver (SMARTARRAY_FAKE_GPU")
    assert second.startswith("defaults (fake-driver-sized): --n ")
    assert out.stderr == ""  # numba's warning of small grids included: small on purpose


def test_readme_example_command_uses_the_options_of_every_example():
    """The README's command works for every example: its options are in every SMALL_ARGS run."""
    argv = _readme_example_command()
    assert argv[0::2] == ["--n", "--steps"]
    for name, args in SMALL_ARGS.items():
        assert args[0::2][:2] == argv[0::2], name


@pytest.mark.parametrize("name", sorted(SMALL_ARGS))
def test_every_example_option_has_a_help_text(name):
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py"), "--help"],
        env=_without_simulator_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    options = re.findall(r"^  (--\w+) ", out.stdout, flags=re.M)
    assert options[:2] == ["--n", "--steps"]
    for entry in re.findall(r"^  --\w+.*(?:\n {6,}.*)*", out.stdout, flags=re.M):
        text = " ".join(entry.split())  # argparse wraps help texts
        assert "(default:" in text and "on the simulator" in text
