"""The benchmark suite: ``python -m smartarray bench --quick`` as CI runs it (the command runs
the benchmarks' own runner, ``python -m benchmarks``, in a child process), and its parts.

Tests never assert on time: only on the layout of the figures, on counted bytes, and on the
suite's acceptance criterion (smartarray moves no more bytes than hand-optimal transfers).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import smartarray as sa
from tests._targets import real_target_env, with_checkout

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

STRATEGIES = (
    "auto",
    "hand",
    "whole_array_flags",
    "smartarray",
    "smartarray_no_hints",
    "smartarray_jit",
)
WORKLOADS = (
    "iterative_loop",
    "read_only_inputs",
    "partial_host_updates",
    "njit_cuda_host_pipeline",
    "host_numpy_phase",
    "large_rarely_touched",
    "halo_exchange",
)


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "figures.json"
    env = real_target_env()
    out = subprocess.run(
        [sys.executable, "-m", "smartarray", "bench", "--quick", "--json", str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return out, json.loads(path.read_text())


def run_runner(*args: str, simulator: bool = False) -> subprocess.CompletedProcess[str]:
    """``python -m benchmarks ARGS`` in the checkout's root, as a contributor runs it."""
    env = real_target_env()
    if simulator:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", *args],
        cwd=BENCHMARKS.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_suite_runs_as_python_m_benchmarks_from_the_checkout():
    out = run_runner("--help")
    assert out.returncode == 0, out.stderr
    assert "--quick" in out.stdout and "--markdown" in out.stdout


def test_smartarray_bench_help_says_it_delegates():
    out = subprocess.run(
        [sys.executable, "-m", "smartarray", "bench", "--help"],
        cwd=BENCHMARKS.parent,
        env=real_target_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "Delegates to the benchmarks' own runner" in text
    assert "python -m benchmarks [options]" in text and "child process" in text
    assert "--quick" in text and "--json PATH" in text and "--markdown" in text


@pytest.mark.parametrize(
    "args", [("--json", "/nonexistent-folder/figures.json"), ("--quick", "extra"), ("--bogus",)]
)
def test_bad_options_to_the_runner_are_clear_errors(args):
    """As ``smartarray bench`` with the same options (tests/structure/test_main.py), which
    delegates."""
    out = run_runner(*args, simulator=True)
    assert out.returncode == 2
    assert "error:" in out.stderr and "Traceback" not in out.stderr


def test_bench_json_layout(bench):
    _, report = bench
    assert [w["name"] for w in report["workloads"]] == list(WORKLOADS)
    for w in report["workloads"]:
        assert set(w["strategies"]) == set(STRATEGIES), w["name"]
        for fig in w["strategies"].values():
            # Uploads and downloads are reported apart too (to see what moves).
            assert set(fig) == {"bytes", "transfers", "seconds", "h2d_bytes", "d2h_bytes"}
            assert isinstance(fig["bytes"], int) and isinstance(fig["transfers"], int)
            assert fig["h2d_bytes"] + fig["d2h_bytes"] <= fig["bytes"]  # the rest is d2d
            assert isinstance(fig["seconds"], float)
    overhead = report["overhead"]
    if report["simulator"]:
        keys = (
            "njit_noop_ndarray_ns",
            "njit_noop_smartarray_ns",
            "njit_noop_floor_ns",
            "njit_smartarray_over_floor_ratio",
            "launch_prep_smartarray_ns",
            "launch_prep_device_array_ns",
            "jit_launch_plain_smartarray_ns",
            "jit_launch_annotated_smartarray_ns",
            "jit_launch_inferred_smartarray_ns",
            "jit_launch_overhead_ns",
            "jit_launch_overhead_device_array_ns",
        )
    else:  # a GPU: launches through numba-cuda's real dispatcher instead (bench_overhead.run)
        keys = tuple(f"real_launch_{v}_ns" for v in ("device_array", "smartarray"))
        keys += ("real_launch_inferred_smartarray_ratio",)
    for key in (*keys, "coherence_fast_path_ns"):
        assert isinstance(overhead[key], float), key
    assert all(k.endswith(("_ns", "_ratio")) for k in overhead)


def test_bench_smartarray_bytes_at_most_hand_optimal(bench):
    _, report = bench
    for w in report["workloads"]:
        s = w["strategies"]
        assert w["results_agree"], w["name"]
        assert s["smartarray"]["bytes"] <= s["hand"]["bytes"], w["name"]
        assert s["smartarray"]["bytes"] <= s["whole_array_flags"]["bytes"], w["name"]
        assert s["hand"]["bytes"] < s["auto"]["bytes"], w["name"]


def test_bench_host_syncs_per_launch_in_strict_mode(bench):
    out, report = bench
    syncs = report["strict_host_syncs_per_launch"]
    if not report["simulator"]:  # (strict mode runs on the simulator: nothing measured)
        assert syncs is None
        assert "host synchronisations per launch: needs strict mode" in out.stdout
        return
    assert set(syncs) == {"hand", "smartarray", "smartarray_in_input", "smartarray_host_held"}
    assert syncs["hand"] == 0.0  # the goal: no host wait inside a loop of launches
    assert syncs["smartarray_host_held"] >= 1.0  # a held host array is refreshed each launch
    assert all(isinstance(v, float) and v >= 0 for v in syncs.values())
    assert "host synchronisations per launch" in out.stdout


def test_bench_smartarray_jit_without_hints_moves_hand_optimal_bytes(bench):
    _, report = bench
    for w in report["workloads"]:
        s = w["strategies"]
        assert s["smartarray_jit"]["bytes"] == s["hand"]["bytes"], w["name"]
        assert s["smartarray_jit"]["bytes"] <= s["smartarray_no_hints"]["bytes"], w["name"]
        assert w["ratios"]["smartarray_jit_over_hand_bytes"] == 1.0
    by_name = {w["name"]: w["strategies"] for w in report["workloads"]}
    # annotation-free plain cuda.jit re-downloads what the host reads after each launch
    for name in ("read_only_inputs", "njit_cuda_host_pipeline"):
        s = by_name[name]
        assert s["smartarray_no_hints"]["bytes"] > s["hand"]["bytes"], name


def test_bench_arrays_four_times_the_budget(bench):
    """A workload whose SmartArrays total four times the device budget runs right;
    its bytes are reported next to the least possible and a managed-memory page model."""
    out, report = bench
    fig = report["over_budget"]
    assert fig["total"] // 4 == fig["budget"] and fig["evictions"] > 0
    assert fig["results_agree"]
    b = fig["bytes"]
    assert set(b) == {"smartarray", "smartarray_model", "least", "unlimited", "managed"}
    # the byte-exact model of smartarray's policy replays the run exactly: the models are right
    assert b["smartarray"] == b["smartarray_model"]
    assert b["unlimited"] <= b["least"] <= b["smartarray"] < b["managed"]
    assert "arrays larger than the GPU" in out.stdout and "managed memory model" in out.stdout
    import suite

    text = suite.format_markdown(report)
    assert f"| managed memory model (64 KiB pages) | {b['managed']:,} |" in text


def test_budget_models_in_process():
    """The models on a small sequence, by hand: pages written back whole, bytes exactly."""
    import gc

    import bench_budget as bb

    from smartarray._engine import residency as _residency

    gc.collect()
    with _residency._lock:  # copies other tests left resident go first: the bytes are the run's
        _residency._evict(1 << 62, None, "budget")
    p = bb.BudgetParams(chunks=5, n=1 << 13, steps=1)
    result, t = bb.run_smartarray(p)
    np.testing.assert_allclose(result, bb.reference(p))
    m = bb.models(p)
    assert t.stats.nbytes == m["smartarray_model"]
    assert t.stats.evictions > 0
    # every chunk is one 64 KiB page here: managed memory writes back the whole page that
    # smartarray downloads a quarter of
    head = (p.n // 4 + 3) * 8
    evicted = [e for e in t.evictions if e.array.startswith("chunk")]
    assert evicted and all(e.downloaded == head for e in evicted)
    assert m["managed"] > m["smartarray_model"]


def test_bench_table_on_the_terminal(bench):
    out, report = bench
    for name in WORKLOADS:
        assert name in out.stdout
    if report["simulator"]:
        labels: tuple[str, ...] = ("SmartArray (coherent)", "floor", "launch preparation")
        labels += ("smartarray.jit launch",)
    else:  # a GPU
        labels = ("through numba-cuda's dispatcher", "smartarray.jit, bare SmartArrays")
    for label in (*labels, "coherence", "without hints", "bytes per step"):
        assert label in out.stdout
    assert "Traceback" not in out.stderr


#: The overhead figures ``bench --quick`` measured on an H100 (numba-cuda's real dispatcher: no
#: njit, launch-preparation or stand-in-dispatcher figures there), and the fake driver's extras.
GPU_OVERHEAD = {
    "real_launch_device_array_ns": 31504.85,
    "real_launch_smartarray_ns": 34547.4,
    "real_launch_annotated_smartarray_ns": 39434.2,
    "real_launch_inferred_smartarray_ns": 41667.95,
    "real_launch_budgeted_smartarray_ns": 36152.55,
    "real_launch_smartarray_ratio": 1.0965740195557192,
    "real_launch_annotated_smartarray_ratio": 1.2516866450721078,
    "real_launch_inferred_smartarray_ratio": 1.322588426861261,
    "real_launch_budgeted_smartarray_ratio": 1.1475233178383648,
    "python_attribute_read_ns": 14.3200000000121,
    "coherence_fast_path_ns": 232.29899999988035,
    "coherence_write_cycle_ns": 3942.1574999987106,
}
FAKE_DRIVER_EXTRAS = {
    "real_launch_device_array_above_driver_ns": 9000.0,
    "real_launch_device_array_driver_calls": 4.0,
    "real_launch_smartarray_above_driver_ns": 9876.0,
    "real_launch_smartarray_above_driver_ratio": 1.0973,
    "real_launch_smartarray_driver_calls": 5.0,
}


@pytest.mark.parametrize("extras", [{}, FAKE_DRIVER_EXTRAS], ids=["gpu", "fake driver"])
def test_the_terminal_report_prints_what_a_real_target_measured(bench, extras):
    """On a GPU ``bench`` raised KeyError 'njit_noop_floor_ns' printing its tables: the overhead
    figures off the simulator are the real dispatcher's launches and the coherence figures."""
    import suite

    _, report = bench
    real = dict(report, simulator=False, target="CUDA GPU", overhead=GPU_OVERHEAD | extras)
    text = suite.format_report(real)
    assert "numba-cuda's dispatcher" in text
    lines = {line.split("  ")[0].strip(): line.split() for line in text.splitlines()}
    for label, ns, ratio in (
        ("device arrays", "31,505", "1.00"),
        ("bare SmartArrays", "34,547", "1.10"),
        ("sa.In(x), sa.In(y)", "39,434", "1.25"),
        ("smartarray.jit, bare SmartArrays", "41,668", "1.32"),
        ("bare SmartArrays, budget set", "36,153", "1.15"),
    ):
        got = lines[label][-5:-3] if extras else lines[label][-2:]
        assert got == [ns, ratio], label
    if extras:  # the time above the fake driver and its calls per launch
        assert lines["device arrays"][-3:] == ["9,000", "1.00", "4"]
        assert lines["bare SmartArrays"][-3:] == ["9,876", "1.10", "5"]
    assert "coherence_write_cycle_ns" in text and "python_attribute_read_ns" in text
    assert "njit call of a no-op" not in text and "launch preparation" not in text
    assert "these seconds come from the CUDA simulator" not in text
    # A figure no section names is printed too, by its name.
    other = suite.format_report(dict(real, overhead=dict(GPU_OVERHEAD, new_figure_ns=7.0)))
    assert "new_figure_ns" in other and "7.0" in other.split("new_figure_ns")[1].split()[0]


def test_bench_says_simulator_seconds_mean_nothing_for_a_gpu(bench):
    out, report = bench
    note = "these seconds come from the CUDA simulator"
    if report["simulator"]:
        # right under the table with the seconds, whose column is starred
        assert "seconds*" in out.stdout
        lines = out.stdout.splitlines()
        i = next(n for n, line in enumerate(lines) if note in line)
        assert lines[i - 1].split()[0] in STRATEGIES  # the line above is a row of the table
    else:
        assert note not in out.stdout


def test_bench_host_compares_every_operation_with_the_ndarrays(bench):
    """The host operations run on a SmartArray and an ndarray side by side, in both states, and
    the terminal report prints them (no timing is asserted: only that each figure exists)."""
    import bench_host

    out, report = bench
    host = report["host"]
    for state in bench_host.STATES:
        for op in bench_host.OPERATIONS:
            for n in bench_host.SIZES[:2]:  # --quick: no million-element arrays
                key = f"host_{state}_{op}_{n}"
                for figure in ("sa_ns", "np_ns", "ratio"):
                    assert isinstance(host[f"{key}_{figure}"], float), key
                assert host[f"{key}_sa_ns"] > 0 and host[f"{key}_np_ns"] > 0, key
    assert "host operations, fresh array" in out.stdout
    assert "host operations, used array" in out.stdout


def test_bench_host_runs_as_a_script():
    out = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_host.py"), "--quick", "--json-figures"],
        env={**real_target_env(), "NUMBA_ENABLE_CUDASIM": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    assert figures["host_used_get_1000_ratio"] > 0


def test_bench_partitioned_heat_moves_hand_written_bytes_per_device(bench):
    """The partitioned heat steps on 1, 2 and 4 devices move, per device, what
    hand-written transfers move; off a machine with that many GPUs a row runs on the fake
    driver in a child process and says so."""
    out, report = bench
    figures = report["devices"]
    assert figures["same_result"]
    assert [r["devices"] for r in figures["rows"]] == [1, 2, 4]
    for r in figures["rows"]:
        assert [d["device"] for d in r["per_device"]] == list(range(r["devices"])), r
        for d in r["per_device"]:
            assert set(d["moved"]) == {"h2d", "d2h", "d2d_in", "d2d_out"}
            assert d["moved"] == d["hand"], (r["devices"], d)
        several = r["devices"] > 1
        if several and r["where"]:
            assert r["where"] == "fake CUDA driver, child process" and r["peer"]
        # with several devices, the halo rows go device to device every step
        assert all((d["per_step"]["d2d_in"] > 0) == several for d in r["per_device"]), r
    assert "partitioned heat steps over devices" in out.stdout
    import suite

    assert "Partitioned heat steps" in suite.format_markdown(report)


@pytest.mark.parametrize(
    "child_digests, same",
    [
        ({2: ("fake", "fake"), 4: ("fake", "fake")}, True),  # a GPU's row rounds otherwise
        ({2: ("fake", "fake"), 4: ("other", "fake")}, False),  # 4 devices disagree with 1
    ],
)
def test_bench_devices_compares_each_row_with_one_device_on_its_own_target(
    monkeypatch, child_digests, same
):
    """On an H100 the one-device row ran on the GPU and the 2- and 4-device rows on the fake
    driver in children: the digests differed by the GPU's rounding and the bench said the
    results differ. Each row is compared with the one-device result on its own target."""
    import bench_devices

    def row(devices, digest, reference=None):
        out = {"devices": devices, "digest": digest, "per_device": [], "where": ""}
        if reference is not None:
            out["reference_digest"] = reference
        return out

    monkeypatch.setattr(bench_devices, "_visible", lambda: 1)
    monkeypatch.setattr(bench_devices, "measure", lambda d, n, steps: row(d, "gpu"))
    monkeypatch.setattr(bench_devices, "_in_child", lambda d, n, steps: row(d, *child_digests[d]))
    assert bench_devices.run(quick=True)["same_result"] is same


def test_bench_markdown_is_a_table_to_paste(bench):
    _, report = bench
    import suite

    text = suite.format_markdown(report)
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| workload |"))
    assert lines[header + 1].startswith("|:--|:--|--:|")  # names left, numbers right
    rows = [line for line in lines[header + 2 :] if line.startswith("|")]
    rows = rows[: len(WORKLOADS) * len(STRATEGIES)]
    width = lines[header].count("|")
    assert all(row.count("|") == width for row in rows)  # every row has every cell
    for w in report["workloads"]:
        assert f"`{w['name']}`" in text
        # the bytes each strategy moved, as in the JSON figures
        for key, fig in w["strategies"].items():
            assert f"| {key} | {fig['transfers']:,} | {fig['bytes']:,} |" in text
    assert ("CUDA simulator" in text) == report["simulator"]


def test_bench_markdown_from_the_command_line(bench, monkeypatch, capsys):
    """``bench --markdown`` prints the Markdown tables instead of the terminal ones (the
    runner, in process: ``smartarray bench`` runs it in a child)."""
    import suite

    from benchmarks import __main__ as runner

    _, report = bench
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")  # choose_target must not start a process
    monkeypatch.setattr(suite, "run", lambda **kwargs: report)
    monkeypatch.setattr(runner, "_load_suite", lambda: suite)
    assert runner.main(["--quick", "--markdown"]) == 0
    printed = capsys.readouterr().out
    assert printed.strip() == suite.format_markdown(report).strip()
    assert "| workload | strategy |" in printed and "njit call of a no-op" not in printed


def test_the_runner_says_when_the_cuda_target_fails(monkeypatch, capsys):
    """A broken CUDA target in the benchmarks is the command's message and exit status 1
    (``smartarray bench`` returns the runner's status), no traceback; Ctrl-C is 130."""
    import suite

    from benchmarks import __main__ as runner
    from smartarray import __main__ as cli

    error = cli._cuda_errors()[0]

    def broken(**kwargs):
        raise error("CUDA driver library cannot be found")

    def interrupted(**kwargs):
        raise KeyboardInterrupt

    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    monkeypatch.setattr(runner, "_load_suite", lambda: suite)
    monkeypatch.setattr(suite, "run", broken)
    assert runner.main(["--quick"]) == 1
    err = capsys.readouterr().err
    assert "smartarray: the CUDA target failed" in err and "cannot be found" in err
    assert "NUMBA_ENABLE_CUDASIM=1" in err
    monkeypatch.setattr(suite, "run", interrupted)
    assert runner.main(["--quick"]) == 130
    assert "smartarray: interrupted" in capsys.readouterr().err


# -- the parts, in process ----------------------------------------------------------------------


def test_numba_auto_copy_copies_like_numba():
    from strategies import NumbaAutoCopy
    from workloads import relax

    from smartarray._demo import BLOCK, GRID

    plain, counted = np.arange(100.0), np.arange(100.0)
    relax[GRID, BLOCK](plain)
    with sa.trace() as t:
        relax[GRID, BLOCK](NumbaAutoCopy(counted))
    np.testing.assert_array_equal(plain, counted)
    assert [(e.direction, e.nbytes) for e in t.events] == [("h2d", 800), ("d2h", 800)]


def test_flag_array_copies_whole_arrays():
    from strategies import FlagArray
    from workloads import relax

    from smartarray._demo import BLOCK, GRID

    f = FlagArray(np.zeros(64))
    with sa.trace() as t:
        relax[GRID, BLOCK](f)
        relax[GRID, BLOCK](f)
        assert f.valid == {"host": False, "gpu": True}
        f.get("host")[:2] = 5.0  # a 2-element write still needs the whole array
        f.mark_changed("host")
        relax[GRID, BLOCK](f)
        host = f.get("host")
    assert [(e.direction, e.nbytes) for e in t.events] == [
        ("h2d", 512),
        ("d2h", 512),
        ("h2d", 512),
        ("d2h", 512),
    ]
    assert host[0] == pytest.approx(0.5 * 5.0 + 1.0)


def test_floor_argument_runs_in_njit():
    import numba
    from bench_overhead import FloorArg

    @numba.njit
    def total(a):
        return a.sum()

    assert total(FloorArg(np.arange(5.0))) == 10.0


@pytest.mark.gpu
def test_gpu_launch_overhead_through_the_real_dispatcher():
    """Off the simulator the overhead benchmark launches through numba-cuda's dispatcher:
    every variant moves nothing (it asserts so), and a SmartArray launch makes one driver
    call more than the device-array launch (its one event), whatever its arguments."""
    from bench_overhead import real_launch

    figures = real_launch(quick=True)
    variants = ("smartarray", "annotated_smartarray", "inferred_smartarray", "budgeted_smartarray")
    for name in variants:
        assert figures[f"real_launch_{name}_ratio"] > 0
    from smartarray import _fakegpu

    if _fakegpu.current() is not None:
        device = figures["real_launch_device_array_driver_calls"]
        for name in variants:
            assert figures[f"real_launch_{name}_driver_calls"] == device + 1, name


@pytest.mark.gpu
def test_the_solver_loops_host_time_is_measured_on_the_fake_driver_only():
    """bench_time's solver variants, run as they are, timed above the fake driver per sweep:
    what the model's solver charges come from. Nothing on a GPU (no driver time to subtract)."""
    from bench_overhead import real_solver_loop

    from smartarray import _fakegpu

    figures = real_solver_loop(quick=True)
    if _fakegpu.current() is None:
        assert figures == {}
        return
    for name in ("hand_sync", "smartarray", "hand_async", "smartarray_options"):
        assert figures[f"real_solver_{name}_above_driver_ns"] > 0
        assert figures[f"real_solver_{name}_python_calls"] > 0
    assert figures["real_solver_smartarray_above_driver_ratio"] == pytest.approx(
        figures["real_solver_smartarray_above_driver_ns"]
        / figures["real_solver_hand_sync_above_driver_ns"]
    )


def test_call_count_leaves_out_the_fake_drivers_own_calls():
    """bench_overhead's deterministic figure: the Python calls a step makes outside the fake
    driver, the same on every run of the same code (what a noisy machine's times are not)."""
    from bench_overhead import CallCount, python_calls

    def inner() -> None:
        pass

    def step() -> None:
        inner()
        inner()

    import gc

    from smartarray._fakegpu import _clock  # (a driver module: its frames are left out)

    gc.disable()  # (a collection runs the callbacks of whoever registered one: calls too)
    try:
        assert python_calls(step, 5) == 3.0  # step and its two inner calls, each time
        assert python_calls(step, 5) == python_calls(step, 5)
        count = CallCount()
        count.start()
        try:
            _clock.PRESETS["pcie5"].scaled(2.0)  # (dataclasses.replace inside: not counted)
            step()
        finally:
            count.stop()
    finally:
        gc.enable()
    assert count.calls == 3


@pytest.mark.parametrize("name", WORKLOADS)
def test_workload_strategies_agree(name):
    import workloads

    workload = next(w for w in workloads.WORKLOADS if w.name == name)
    results = [workload.run(s, workloads.WARM) for s in STRATEGIES]
    for r in results[1:]:
        np.testing.assert_allclose(r, results[0])


def test_halo_exchange_moves_only_halo_rows_after_the_first_step():
    import workloads

    halo = next(w for w in workloads.WORKLOADS if w.name == "halo_exchange")
    p = workloads.QUICK
    rows, row = p.n // halo.cols, halo.cols * 8
    block = (rows + 2) * row
    with sa.trace() as t:
        halo.run("smartarray", p)
    # Two blocks up once; then per step one row each way per block; the owned rows at the end.
    assert t.stats.h2d_bytes == 2 * block + (p.steps - 1) * 2 * row
    assert t.stats.d2h_bytes == (p.steps - 1) * 2 * row + 2 * rows * row
    assert t.stats.d2d_bytes == 0


def test_bench_scattered_reads_against_the_two_references(bench):
    """Scattered host reads cost, in modelled time, what the better of one exact copy
    per read and one whole download costs, once the first round taught the planner."""
    _, report = bench
    frag = report["fragmentation"]
    assert {(r["preset"], r["variant"]) for r in frag["rows"]} == {
        (p, v) for p in ("pcie5_x16", "nvlink_c2c") for v in ("random", "sorted", "clustered")
    }
    for row in frag["rows"]:
        assert row["results_agree"], row
        first, total = row["first"], row["total"]
        later = {
            k: total[k]["seconds"] - first[k]["seconds"] for k in ("smartarray", "exact", "whole")
        }
        assert later["smartarray"] <= 1.1 * min(later["exact"], later["whole"]), row
        # and the first round within the ski-rental bound: at most the latencies it paid extra
        best = min(first["exact"]["seconds"], first["whole"]["seconds"])
        assert first["smartarray"]["seconds"] <= 3 * best, row
        # tight: the pieces paid before the whole copy cost less than it, so under 2x
        assert first["smartarray"]["seconds"] < 2 * best, row


def test_bench_time_runs_every_variant_on_the_fake_drivers_clock(bench):
    """The modelled-time workloads run (``--quick``: it runs, the results agree, every
    variant and target is reported); the figures themselves are not asserted."""
    import bench_time

    out, report = bench
    figures = report["time"]
    assert "error" not in figures["model"], figures["model"]
    assert figures["model"]["modelled"] and figures["model"]["preset"].startswith("pcie5")
    for name, w in figures["model"]["workloads"].items():
        assert w["results_agree"], name
        assert tuple(w["variants"]) == bench_time.VARIANTS
        expected = {"default <= sync", "options within 1.1x async"}
        if name == "streamed_batch":  # the hand-written pipeline's own targets
            expected |= {"async >= 1.3x sync", "async within 5% of bound"}
        assert set(figures["targets"][name]["ok"]) == expected
    assert set(figures["model"]["workloads"]) == set(bench_time.WORKLOADS)
    assert "modelled time on the fake driver's clock" in out.stdout


def test_bench_link_recovers_the_clock_presets_rates_on_the_fake_driver(tmp_path: Path) -> None:
    """On the fake driver's clock the measured link is the preset's: the benchmark's fit (and
    the clock's copy, launch and page-locking rules) agree with the constants a GPU is
    compared against."""
    path = tmp_path / "link.json"
    env = with_checkout(real_target_env())
    env.update(
        SMARTARRAY_FAKE_GPU="1",
        SMARTARRAY_FAKE_GPU_TIMING="pcie5",
        NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS="0",
    )
    argv = [str(BENCHMARKS / "bench_link.py"), "--quick", "--repeat", "1", "--json", str(path)]
    out = subprocess.run(
        [sys.executable, *argv], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    figures = json.loads(path.read_text())
    assert figures["target"] == "fake driver" and figures["modelled"]
    measured, preset = figures["measured"], figures["preset"]
    for quantity in ("h2d_Bps", "d2h_Bps", "h2d_pageable_Bps", "d2h_pageable_Bps"):
        assert measured[quantity] == pytest.approx(preset[quantity], rel=1e-6), quantity
    for quantity in ("h2d_latency_s", "d2h_latency_s", "launch_s", "kernel_round_trip_s"):
        # (a few queries of numba-cuda's beside the call itself: within 10%)
        assert measured[quantity] == pytest.approx(preset[quantity], rel=0.1), quantity
    assert measured["pinned_alloc_s"] == pytest.approx(preset["pinned_alloc_s"], rel=1e-3)
    for quantity in ("device_alloc_s", "device_free_s"):  # the clock's allocation rules
        assert measured[quantity] == pytest.approx(preset[quantity], rel=0.02), quantity
    assert "h2d_Bps" in out.stdout and "measured/preset" in out.stdout


def test_bench_link_refuses_a_repeat_below_one() -> None:
    import bench_link

    with pytest.raises(ValueError, match="repeat must be >= 1"):
        bench_link.run(repeat=0)


TINY_TIME = dict(chunks=1, n=32, field=32, k=1, checks=2, vector=32, iterations=2)


def test_bench_time_settle_frees_earlier_runs_garbage_before_a_timed_region():
    """An earlier run's dead arrays are freed by ``settle`` (before the next timed region),
    not inside that region: a dead SmartArray's device copy, numba-cuda's deferred frees of
    device and page-locked arrays (counted on the fake driver)."""
    import bench_time
    from numba import cuda

    from smartarray import _fakegpu

    used, cached = sa.device_budget().used, sa.device_budget().cached
    a = sa.SmartArray(np.arange(1 << 12, dtype=np.float32))
    nbytes = a.nbytes
    a.prefetch("gpu")
    d = cuda.to_device(np.ones(1 << 12, np.float32))
    h = cuda.pinned_array(1 << 12, np.float32)
    assert sa.device_budget().used == used + a.nbytes
    drv = _fakegpu.current()
    before = dict(drv.calls) if drv is not None else {}
    del a, d, h
    bench_time.settle()
    assert sa.device_budget().used == used
    if drv is not None:  # numba-cuda's pending frees flushed: both device copies, the pinned one
        # (The SmartArray's copy is freed, or kept for reuse: the memory a later allocation of
        # its size takes instead of cuMemAlloc, counted in ``cached``, not ``used``.)
        freed = drv.calls["cuMemFree"] - before.get("cuMemFree", 0)
        kept = sa.device_budget().cached - cached >= nbytes
        assert freed >= (1 if kept else 2)
        assert drv.calls["cuMemFreeHost"] - before.get("cuMemFreeHost", 0) >= 1
        ctx = cuda.current_context()
        for owner in (getattr(ctx, "memory_manager", None), ctx):
            assert len(getattr(owner, "deallocations", None) or ()) == 0


def test_bench_time_measure_repeats_each_variant_and_profiles_one():
    """``measure(repeat=N)`` times N fresh runs per variant (``seconds`` their median, the
    spread beside it); ``profile=VARIANT`` prints that variant's profile per workload. In a
    child on the fake driver (the workloads' kernels need a real target's ``cuda`` module)."""
    env = with_checkout(real_target_env())
    env.update(SMARTARRAY_FAKE_GPU="1", NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS="0")
    env.pop("SMARTARRAY_FAKE_GPU_TIMING", None)
    script = (
        "import json, sys; import smartarray; sys.path.insert(0, 'benchmarks'); "
        "import bench_time as b; "
        f"out = b.measure(b.Params(**{TINY_TIME!r}), ['solver'], repeat=3, "
        "profile='smartarray'); print(json.dumps(out))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=BENCHMARKS.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    solver = out["workloads"]["solver"]
    assert solver["results_agree"]
    assert out["repeat"] == 3
    assert tuple(solver["variants"]) == (
        "numba_auto",
        "hand_sync",
        "hand_async",
        "smartarray",
        "smartarray_options",
    )
    for f in solver["variants"].values():
        assert len(f["runs"]) == 3
        assert f["seconds"] == sorted(f["runs"])[1]
        assert f["spread"] == max(f["runs"]) - min(f["runs"])
    assert "== profile of solver / smartarray (3 timed runs, by own time)" in done.stdout
    assert "profile of solver / hand_sync" not in done.stdout


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"repeat": 0}, "repeat must be >= 1"), ({"profile": "numba"}, "profile must be one of")],
)
def test_bench_time_measure_rejects_bad_options(kwargs, message):
    import bench_time

    with pytest.raises(ValueError, match=message):
        bench_time.measure(bench_time.Params(**TINY_TIME), ["solver"], **kwargs)


def test_bench_time_command_line_rejects_a_repeat_below_one(capsys):
    import bench_time

    with pytest.raises(SystemExit):
        bench_time.main(["--repeat", "0"])
    assert "--repeat must be >= 1, got 0" in capsys.readouterr().err


def test_bench_time_a_timed_region_ends_when_the_variant_returns_its_results():
    """A variant returns through ``Timer.done``: what its arrays' teardown costs afterwards
    (frees, unlocking, as its locals die) is not in its timed region."""
    import bench_time

    from smartarray._fakegpu._clock import PCIE5, Clock

    timer = bench_time.Timer()
    timer.clock = Clock(PCIE5)
    timer.start()
    timer.clock.host_work(5e-3, "work")
    assert timer.done(("results",)) == ("results",)
    timer.clock.unlocked(1 << 20)  # a page-locked buffer of the variant freed on return
    assert timer.stop() == pytest.approx(5e-3)
    timer.start()  # without done: the region ends at stop
    timer.clock.host_work(2e-3, "work")
    assert timer.stop() == pytest.approx(2e-3)


def test_spread_says_what_a_run_printed_instead_of_its_figures(tmp_path):
    """``--spread N`` runs the script in fresh processes: one that prints no figures (no GPU
    and no simulator asked for) ends in its own words, not in a JSON traceback."""
    import bench_timing

    script = tmp_path / "bench_nothing.py"
    script.write_text(
        'print("no CUDA GPU: run with NUMBA_ENABLE_CUDASIM=1 for simulator figures")\n'
    )
    with pytest.raises(SystemExit, match="bench_nothing.py printed no figures: no CUDA GPU: run"):
        bench_timing.spread(str(script), [], 2)
    script.write_text('import json; print(json.dumps({"x_ns": 1.0}))\n')
    assert bench_timing.spread(str(script), [], 2) == {"x_ns": [1.0, 1.0]}
