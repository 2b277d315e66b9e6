"""The command line, run as a user runs it: in a fresh process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests._targets import with_checkout

#: The source checkout: its ``benchmarks/`` holds the benchmarks' runner.
ROOT = Path(__file__).resolve().parents[2]


def run_cli(
    *args: str, simulator: bool | None = None, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    if simulator:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    env.update(extra_env or {})
    return subprocess.run(
        [sys.executable, "-m", "smartarray", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("simulator", [True, None])
def test_info_lists_versions_and_target(simulator):
    out = run_cli("info", simulator=simulator)
    assert out.returncode == 0, out.stderr
    for label in ("smartarray", "numba", "numba-cuda", "numpy", "wrapt", "target", "device"):
        assert any(line.split()[0] == label for line in out.stdout.splitlines()), label
    if simulator or "CUDA simulator" in out.stdout:
        assert "pinned memory  emulated" in out.stdout
        assert "mapped memory  emulated" in out.stdout
    else:  # a real GPU: its name and compute capability
        assert "compute capability" in out.stdout


def test_no_command_prints_help_and_fails():
    out = run_cli(simulator=True)
    assert out.returncode == 2 and "info" in out.stdout


def test_unknown_command_is_a_clear_error():
    out = run_cli("frobnicate", simulator=True)
    assert out.returncode == 2
    assert "invalid choice" in out.stderr and "Traceback" not in out.stderr


# -- demo ---------------------------------------------------------------------------------------

STRATEGIES = ("auto", "hand", "smartarray")


def test_demo_json_three_strategies_agree():
    out = run_cli("demo", "--size", "8", "--steps", "12", "--every", "4", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["results_agree"] is True
    assert report["max_difference"] == pytest.approx(0.0, abs=1e-12)
    assert ("CUDA simulator" in report["target"]) or report["target"] == "CUDA GPU"
    assert set(report["strategies"]) == set(STRATEGIES)
    for fig in report["strategies"].values():
        assert isinstance(fig["bytes"], int) and isinstance(fig["transfers"], int)
        assert isinstance(fig["seconds"], float)
    auto, hand, smart = (report["strategies"][k] for k in STRATEGIES)
    grid = 8 * 8 * 8
    # numba's copies: both grids in and out on every launch.
    assert auto["bytes"] == 12 * 4 * grid and auto["transfers"] == 12 * 4
    # one upload, two boundary rows at steps 4 and 8, one download
    assert hand["bytes"] == 2 * grid + 2 * 2 * 8 * 8
    assert smart["bytes"] <= hand["bytes"]


def test_demo_table_names_target_and_strategies():
    out = run_cli("demo", "--size", "6", "--steps", "3")
    assert out.returncode == 0, out.stderr
    assert "target: CUDA" in out.stdout
    assert "results agree (np.allclose): yes" in out.stdout
    for key in STRATEGIES:
        assert f"\n{key}: " in out.stdout
    assert "Traceback" not in out.stderr


def test_demo_on_the_real_target_prints_no_low_occupancy_warning():
    """On an H100 the demo's first lines were numba's NumbaPerformanceWarning about its small
    grids (a demo of data movement, not occupancy). The fake driver runs numba-cuda's real
    dispatcher, which warns the same way."""
    fake = {"SMARTARRAY_FAKE_GPU": "1", "SMARTARRAY_STRICT": "0"}  # (the fake driver: no strict)
    out = run_cli("demo", "--size", "6", "--steps", "3", extra_env=fake)
    assert out.returncode == 0, out.stderr
    assert "target: fake CUDA driver (SMARTARRAY_FAKE_GPU" in out.stdout
    assert "* these seconds come from the fake CUDA driver" in out.stdout
    assert "NumbaPerformanceWarning" not in out.stderr


def test_info_on_the_fake_driver_names_it_and_its_emulated_memory():
    fake = {"SMARTARRAY_FAKE_GPU": "1", "SMARTARRAY_STRICT": "0"}
    out = run_cli("info", "--json", extra_env=fake)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert rows["target"].startswith("fake CUDA driver (SMARTARRAY_FAKE_GPU")
    assert rows["fake_driver"] is True and rows["simulator"] is False
    assert rows["pinned memory"].startswith("emulated by the fake driver")
    assert "not page-locked" in rows["pinned memory"]
    assert rows["mapped memory"].startswith("emulated by the fake driver")
    # The compute capability once (the fake device's name carries it too).
    assert rows["device"] == "smartarray fake GPU 0 (compute capability 9.0)"


def test_missing_cuda_toolkit_libraries_end_in_one_line_naming_the_extra(monkeypatch, capsys):
    """The README's `pip install .` brings no CUDA toolkit: numba-cuda's real target (the fake
    driver's too) fails at its first compilation, deep in cuda-pathfinder."""
    pathfinder = pytest.importorskip("cuda.pathfinder")
    from smartarray import __main__ as cli
    from smartarray import _demo

    def no_toolkit(**kwargs):
        raise pathfinder.DynamicLibNotFoundError(
            'Failure finding "libnvrtc.so.13 or libnvrtc.so.12": No such file\nattempts: ...'
        )

    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    monkeypatch.setattr(_demo, "run", no_toolkit)
    assert cli.main(["demo", "--steps", "1"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "the cu13 extra" in err and "pip install '.[cu13]'" in err and "libnvrtc" in err


@pytest.mark.parametrize(
    "args",
    [
        ("demo", "--size", "2"),
        ("demo", "--steps", "zero"),
        ("demo", "--steps", "0"),
        ("demo", "--bogus"),
        ("bench", "--json", "/nonexistent-folder/figures.json"),
        ("bench", "--quick", "extra"),
        ("bench", "--json", "--quick"),  # no path: `bench` must not take --quick for one
    ],
)
def test_bad_options_are_clear_errors(args):
    out = run_cli(*args, simulator=True)
    assert out.returncode == 2
    assert "error:" in out.stderr and "Traceback" not in out.stderr


def test_bench_without_a_source_checkout(tmp_path):
    out = run_cli(
        "bench", "--quick", simulator=True, extra_env={"SMARTARRAY_BENCHMARKS_DIR": str(tmp_path)}
    )
    assert out.returncode == 1
    assert "benchmarks/ folder" in out.stderr and "Traceback" not in out.stderr


def test_broken_cuda_is_a_clear_error(monkeypatch, capsys):
    from smartarray import __main__ as cli
    from smartarray import _demo

    error = cli._cuda_errors()[0]

    def broken(**kwargs):
        raise error("CUDA driver library cannot be found")

    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    monkeypatch.setattr(_demo, "run", broken)
    assert cli.main(["demo", "--steps", "1"]) == 1
    err = capsys.readouterr().err
    assert "the CUDA target failed" in err and "cannot be found" in err


def test_demo_table_splits_uploads_and_downloads():
    out = run_cli("demo", "--size", "8", "--steps", "12", "--every", "4", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    for fig in report["strategies"].values():
        assert fig["h2d_bytes"] + fig["d2h_bytes"] == fig["bytes"]
    grid = 8 * 8 * 8
    auto = report["strategies"]["auto"]
    assert auto["h2d_bytes"] == auto["d2h_bytes"] == 12 * 2 * grid  # both grids in and out
    hand = report["strategies"]["hand"]
    assert hand["d2h_bytes"] == grid  # the result, once
    text = run_cli("demo", "--size", "6", "--steps", "3")
    assert "uploaded (h2d)" in text.stdout and "downloaded (d2h)" in text.stdout


def test_demo_plot_draws_three_timelines(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "demo.png"
    out = run_cli("demo", "--size", "6", "--steps", "4", "--every", "2", "--plot", str(path))
    assert out.returncode == 0, out.stderr
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"timelines drawn in {path}" in out.stdout


def test_demo_plot_to_an_unwritable_path_is_a_clear_error(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "missing-folder" / "demo.png"
    out = run_cli("demo", "--size", "4", "--steps", "1", "--plot", str(path), simulator=True)
    assert out.returncode == 1
    assert "cannot write" in out.stderr and "Traceback" not in out.stderr


# -- version, info --json, the console command ---------------------------------------------------


def test_version_names_smartarray_and_its_dependencies():
    from importlib.metadata import version

    import smartarray

    out = run_cli("--version", simulator=True)
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip()
    assert "\n" not in line  # one line, whatever the terminal width
    assert line.startswith(f"smartarray {smartarray.__version__} (")
    for dist in ("numba", "numba-cuda", "numpy"):
        assert f"{dist} {version(dist)}" in line


def test_info_json_is_the_table_as_an_object():
    table = run_cli("info", simulator=True)
    out = run_cli("info", "--json", simulator=True)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["simulator"] is True
    assert report["device"].startswith("CUDA simulator")
    for line in table.stdout.splitlines():  # every row of the table, with its value
        label = next(k for k in report if line.startswith(k + "  "))
        assert line[len(label) :].strip() == report[label]


def test_demo_says_its_seconds_come_from_the_simulator():
    out = run_cli("demo", "--size", "6", "--steps", "3", simulator=True)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("strategy "))
    assert lines[header].endswith("wall time*")  # the starred column
    legend = max(i for i, line in enumerate(lines) if line.startswith("smartarray: "))
    # right under the table and its legend
    assert lines[legend + 1].startswith("* these seconds come from the CUDA simulator")
    assert "say nothing about a GPU" in lines[legend + 2]
    # at a glance: every line of the table fits a 100-column terminal
    assert all(len(line) <= 100 for line in lines[header : legend + 3])


def test_console_command_runs_main():
    """``[project.scripts]`` names ``smartarray.__main__:main``; the installed command runs it."""
    from importlib import import_module

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, name = scripts["smartarray"].partition(":")
    assert getattr(import_module(module), name) is import_module("smartarray.__main__").main
    command = shutil.which("smartarray", path=str(Path(sys.executable).parent))
    if command is None:
        pytest.skip("the package is not installed with its console command in this environment")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    out = subprocess.run(
        [command, "info", "--json"], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["smartarray"]
    usage = subprocess.run([command, "--help"], env=env, capture_output=True, text=True)
    assert usage.stdout.startswith("usage: smartarray ")


@pytest.mark.gpu
def test_gpu_the_command_and_the_examples_pick_the_gpu():
    """With a working GPU (or the fake driver) the command and the examples stay on it: no
    restart on the simulator."""
    from smartarray import _cli, _fakegpu
    from smartarray.__main__ import choose_target

    target = "CUDA GPU" if _fakegpu.current() is None else _cli.FAKE_DRIVER_TARGET
    assert choose_target(["info"]) == target
    assert _cli.run_on_a_working_target(["example.py"]) == target


@pytest.mark.gpu
def test_gpu_info_names_the_device_and_real_page_locked_memory():
    from smartarray import _fakegpu
    from smartarray.__main__ import info

    rows = info("CUDA GPU")
    assert "compute capability" in rows["device"]
    # The fake driver's page-locked memory is ordinary host memory: info says so there.
    kind = "real" if _fakegpu.current() is None else "emulated by the fake driver"
    assert rows["pinned memory"].startswith(kind)
    assert rows["mapped memory"].startswith(kind)
    assert rows["kernels"].startswith("compile")


@pytest.mark.parametrize("numpy_has_row_stack", [True, False])
def test_info_says_whether_numba_cuda_compiles_a_kernel(numpy_has_row_stack: bool) -> None:
    """On an H100 machine with NumPy 2.5 (no ``np.row_stack``) numba-cuda 0.30.4 failed at its
    first kernel compilation, deep in numba-cuda: ``info`` says so, and exits 1. The fake
    driver runs numba-cuda's real compiler; the child removes ``row_stack`` as NumPy 2.5 did."""
    from tests.doubles.test_fakegpu import run_fake

    remove = "" if numpy_has_row_stack else "del np.row_stack\n"
    out = run_fake(
        remove + "from smartarray.__main__ import info\n" + "print(json.dumps(info('CUDA GPU')))\n"
    )
    if numpy_has_row_stack:
        assert out["kernels"] == "compile (PTX for compute capability 9.0)"
    else:
        assert out["kernels"].startswith("FAIL: numba-cuda cannot compile a kernel")
        assert "row_stack" in out["kernels"]


@pytest.mark.parametrize("as_json", [False, True])
def test_info_exits_1_when_a_check_fails(monkeypatch, capsys, as_json: bool) -> None:
    from smartarray import __main__ as cli

    rows = {"target": "CUDA GPU", "kernels": "FAIL: numba-cuda cannot compile a kernel (...)"}
    monkeypatch.setattr(cli, "info", lambda target: rows)
    assert cli._run_info("CUDA GPU", as_json=as_json) == 1
    assert "FAIL: numba-cuda cannot compile a kernel" in capsys.readouterr().out
    monkeypatch.setattr(cli, "info", lambda target: {**rows, "kernels": "compile"})
    assert cli._run_info("CUDA GPU", as_json=as_json) == 0


FAKE_SUITE = """
import sys

def run(quick, target, progress):
    print("RUNNING", file=sys.stderr, flush=True)
    return {}

def format_markdown(report):
    return "| table |"

def format_report(report):
    return "table"
"""


def fake_benchmarks(tmp_path: Path) -> Path:
    """A ``benchmarks/`` folder with the checkout's runner and :data:`FAKE_SUITE` as its suite."""
    folder = tmp_path / "benchmarks"
    folder.mkdir()
    shutil.copy(ROOT / "benchmarks" / "__main__.py", folder / "__main__.py")
    (folder / "suite.py").write_text(FAKE_SUITE)
    return folder


@pytest.mark.parametrize(
    ("args", "duration"), [(("--markdown",), "about 40 s"), (("--quick",), "under a minute")]
)
@pytest.mark.parametrize("how", ["smartarray bench", "python -m benchmarks"])
def test_bench_says_how_long_it_takes_before_it_starts(tmp_path, args, duration, how):
    folder = fake_benchmarks(tmp_path)
    if how == "smartarray bench":
        out = run_cli(
            "bench", *args, simulator=True, extra_env={"SMARTARRAY_BENCHMARKS_DIR": str(folder)}
        )
    else:  # the runner itself, in the folder above it (this checkout's smartarray on the path)
        env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
        with_checkout(env)
        out = subprocess.run(
            [sys.executable, "-m", "benchmarks", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert out.returncode == 0, out.stderr
    note = out.stderr.find(duration)
    assert 0 <= note < out.stderr.index("RUNNING")


def test_bench_quick_prints_no_warning():
    # The benchmarks measure the waste a PerformanceWarning names on purpose (the strategy
    # without hints): the table shows it; warnings about arrays the user never named are noise.
    out = run_cli("bench", "--quick", simulator=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Warning" not in out.stderr, out.stderr


# -- the package and the benchmarks ---------------------------------------------------------------

LEFT_BEHIND = """
import json, sys
before = list(sys.path)
names = set(sys.argv[1:])

def left_behind(status=0):
    modules = sorted(m for m in sys.modules if m.split(".")[0] in names)
    return {"status": status, "modules": modules, "added": [p for p in sys.path if p not in before]}

import smartarray
steps = [left_behind()]
from smartarray.__main__ import main
steps.append(left_behind(main(["info"])))
steps.append(left_behind(main(["bench", "--quick"])))
print(json.dumps(steps))
"""


def test_the_package_leaves_the_benchmark_modules_out(tmp_path):
    """``import smartarray``, ``smartarray info`` and ``smartarray bench`` put nothing of
    ``benchmarks/`` on the command's sys.path nor in its sys.modules: ``bench`` runs the
    benchmarks' own runner in a child process."""
    folder = fake_benchmarks(tmp_path)
    names = {p.stem for p in (ROOT / "benchmarks").glob("*.py")} | {"benchmarks"}
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", SMARTARRAY_BENCHMARKS_DIR=str(folder))
    out = subprocess.run(
        [sys.executable, "-c", LEFT_BEHIND, *sorted(names - {"__main__"})],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    steps = json.loads(out.stdout.splitlines()[-1])
    # after `import smartarray`, after `info`, after `bench`
    assert steps == [{"status": 0, "modules": [], "added": []}] * 3
    assert "RUNNING" in out.stderr  # the fake suite ran, in the child


ECHO_RUNNER = """
import json, os, sys
print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd()}))
sys.exit(3)
"""


@pytest.mark.parametrize("json_option", [["--json", "figures.json"], ["--json=figures.json"]])
def test_bench_runs_the_runner_in_the_checkout_root_and_exits_with_its_status(
    tmp_path, json_option
):
    """``bench`` passes its options on unchanged but for a relative ``--json`` path, made
    absolute: the runner runs in the folder above ``benchmarks/``, the file goes where the
    user is (this test's cwd)."""
    folder = tmp_path / "benchmarks"
    folder.mkdir()
    (folder / "__main__.py").write_text(ECHO_RUNNER)
    out = run_cli(
        "bench",
        "--quick",
        *json_option,
        "--markdown",
        simulator=True,
        extra_env={"SMARTARRAY_BENCHMARKS_DIR": str(folder)},
    )
    assert out.returncode == 3, out.stderr
    seen = json.loads(out.stdout)
    assert Path(seen["cwd"]) == tmp_path.resolve()
    where = os.path.abspath("figures.json")
    expected = ["--json", where] if len(json_option) == 2 else [f"--json={where}"]
    assert seen["argv"] == ["--quick", *expected, "--markdown"]
