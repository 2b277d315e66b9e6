"""``SMARTARRAY_FAKE_GPU=1`` for any program and any pytest run, whatever imports numba first.

The installed start-up hook (``smartarray_fake_gpu.pth`` with ``_smartarray_fake_gpu``), the
pytest plugin of the same module and ``python -m smartarray run``. Each test runs a child
process; the ``.pth`` file is read as site does at start-up (``site.addsitedir`` on the
checkout's root, where it sits before it is installed into site-packages).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from tests._targets import ROOT, real_target_env, with_checkout

#: A user's program: numba first, as most code does, then smartarray; prints what it ran on.
NUMBA_FIRST = """\
import json, sys
import numba
import numpy as np
from numba import cuda

import smartarray as sa
from smartarray import _fakegpu


@cuda.jit
def add_one(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1.0


a = sa.SmartArray(np.arange(4.0))
add_one[1, 4](a)
print(json.dumps({"fake": _fakegpu.current() is not None, "values": a.tolist(),
                  "argv": sys.argv[1:], "h2d": sa.stats().h2d_bytes}))
"""

#: Start-up as site does it with smartarray installed: the .pth file in a site directory.
WITH_HOOK = "import site; site.addsitedir({root!r}); "


#: Start-up without the hook, also where the installed smartarray put it in site-packages.
NO_HOOK = (
    "import sys; sys.meta_path[:] = "
    "[f for f in sys.meta_path if type(f).__name__ != '_LoadSmartarrayAfterNumba']; "
)


def _env(**extra: str) -> dict[str, str]:
    env = with_checkout(real_target_env())
    env["NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS"] = "0"
    env.update(extra)
    return env


def _run(args: list[str], env: dict[str, str], cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600
    )


def _last_json(out: subprocess.CompletedProcess) -> dict:
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "numba_first.py"
    path.write_text(NUMBA_FIRST)
    return path


def test_a_program_importing_numba_first_fails_without_the_hook(script):
    """What the hook is for: without it, numba.cuda has chosen its driver before smartarray."""
    run = NO_HOOK + f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')"
    out = _run(["-c", run], _env(SMARTARRAY_FAKE_GPU="1"))
    assert out.returncode != 0
    assert "SMARTARRAY_FAKE_GPU must be set before numba.cuda is imported" in out.stderr
    assert "python -m smartarray run" in out.stderr  # the message names the ways out


def test_the_startup_hook_loads_the_fake_driver_for_a_program_importing_numba_first(script):
    run = WITH_HOOK.format(root=str(ROOT)) + (
        f"import runpy, sys; sys.argv = [{str(script)!r}, 'x']; "
        f"runpy.run_path({str(script)!r}, run_name='__main__')"
    )
    got = _last_json(_run(["-c", run], _env(SMARTARRAY_FAKE_GPU="1")))
    assert got == {"fake": True, "values": [1.0, 2.0, 3.0, 4.0], "argv": ["x"], "h2d": 32}


def test_the_startup_hook_imports_nothing_when_the_variable_is_unset():
    probe = WITH_HOOK.format(root=str(ROOT)) + (
        "import sys; print(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('numba', 'smartarray', '_smartarray_fake_gpu', 'numpy')))"
    )
    out = _run(["-c", probe], _env())
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_startup_hook_waits_for_numba_before_importing_smartarray():
    """Set, it imports no numba and no smartarray in a program that never imports numba."""
    probe = WITH_HOOK.format(root=str(ROOT)) + (
        "import sys; print(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('numba', 'smartarray', 'numpy')))"
    )
    out = _run(["-c", probe], _env(SMARTARRAY_FAKE_GPU="1"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_smartarray_run_loads_the_fake_driver_before_the_script(script):
    out = _run(["-m", "smartarray", "run", str(script), "--n", "3"], _env(SMARTARRAY_FAKE_GPU="1"))
    got = _last_json(out)
    assert got == {"fake": True, "values": [1.0, 2.0, 3.0, 4.0], "argv": ["--n", "3"], "h2d": 32}


def test_smartarray_run_passes_on_the_scripts_exit_status(tmp_path):
    failing = tmp_path / "fails.py"
    failing.write_text("import sys\nsys.exit(3)\n")
    assert _run(["-m", "smartarray", "run", str(failing)], _env()).returncode == 3
    missing = _run(["-m", "smartarray", "run", str(tmp_path / "absent.py")], _env())
    assert missing.returncode == 2
    assert "no such script" in missing.stderr


#: A suite whose ini names numba's warning classes, as numba-cuda's own does: pytest imports
#: numba.cuda while it reads them, before any conftest (pytest 9.2: before any plugin too).
SUITE_INI = """\
[pytest]
filterwarnings =
    error
    ignore::numba.core.errors.NumbaDeprecationWarning
    ignore::numba.cuda.core.errors.NumbaPerformanceWarning
"""
SUITE_TEST = """\
import smartarray as sa
from numba import cuda
from smartarray import _fakegpu


def test_runs_on_the_fake_driver():
    assert _fakegpu.current() is not None
    assert "fake" in str(cuda.get_current_device().name)
"""
#: pytest 9.2 applies an ini file's warning filters while it imports plugins (9.1 did not).
PYTEST_FILTERS_FIRST = tuple(int(n) for n in pytest.__version__.split(".")[:2]) >= (9, 2)


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    (tmp_path / "pytest.ini").write_text(SUITE_INI)
    (tmp_path / "test_user.py").write_text(SUITE_TEST)
    return tmp_path


def _pytest(suite: Path, prelude: str, plugin: bool) -> subprocess.CompletedProcess:
    """pytest in ``suite`` on the fake driver, after ``prelude``, with or without the plugin.

    The plugin is loaded with ``-p`` unless its pytest11 entry point is installed (this
    checkout may not be the installed smartarray; pytest refuses a plugin loaded twice).
    """
    installed = any(ep.name == "smartarray_fake_gpu" for ep in entry_points(group="pytest11"))
    args = ["-p", "no:cacheprovider"]
    if not plugin:
        args += ["-p", "no:smartarray_fake_gpu"]
    elif not installed:
        args += ["-p", "_smartarray_fake_gpu"]
    code = prelude + f"import pytest, sys; sys.exit(pytest.main({args!r}))"
    return _run(["-c", code], _env(SMARTARRAY_FAKE_GPU="1"), cwd=suite)


def test_a_suite_naming_numbas_warnings_in_its_ini_fails_without_hook_or_plugin(suite):
    out = _pytest(suite, NO_HOOK, plugin=False)
    assert out.returncode != 0
    assert "SMARTARRAY_FAKE_GPU must be set before numba.cuda is imported" in out.stdout


def test_the_startup_hook_runs_a_suite_naming_numbas_warnings_on_the_fake_driver(suite):
    out = _pytest(suite, WITH_HOOK.format(root=str(ROOT)), plugin=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 passed" in out.stdout


def test_the_pytest_plugin_runs_a_suite_whose_conftest_imports_numba_first(tmp_path):
    (tmp_path / "conftest.py").write_text("from numba import cuda  # noqa: F401\n")
    (tmp_path / "test_user.py").write_text(SUITE_TEST)
    out = _pytest(tmp_path, NO_HOOK, plugin=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "smartarray: fake CUDA driver (SMARTARRAY_FAKE_GPU)" in out.stdout  # the header
    assert "1 passed" in out.stdout


def test_the_pytest_plugin_with_an_ini_naming_numbas_warnings(suite):
    """Before pytest 9.2 the plugin comes before the ini's warning classes; from 9.2 on they
    come first, and the plugin says in one line that the start-up hook is the way."""
    out = _pytest(suite, NO_HOOK, plugin=True)
    if not PYTEST_FILTERS_FIRST:
        assert out.returncode == 0, out.stdout + out.stderr
        assert "1 passed" in out.stdout
        return
    assert out.returncode == 4, out.stdout + out.stderr  # pytest's usage error
    assert "smartarray_fake_gpu.pth" in out.stderr
    assert "Traceback" not in out.stdout + out.stderr


def test_the_package_ships_the_hook_and_the_plugin():
    """pyproject.toml installs the hook module and names the plugin; setup.py ships the .pth."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["entry-points"]["pytest11"] == {
        "smartarray_fake_gpu": "_smartarray_fake_gpu"
    }
    assert "_smartarray_fake_gpu" in project["tool"]["setuptools"]["py-modules"]
    pth = (ROOT / "smartarray_fake_gpu.pth").read_text()
    assert pth.startswith("import os;") and "_smartarray_fake_gpu" in pth
    assert 'HOOK = "smartarray_fake_gpu.pth"' in (ROOT / "setup.py").read_text()
    assert textwrap.dedent(pth).count("\n") == 1  # site runs a .pth line by line
