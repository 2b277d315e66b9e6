"""The environment variables smartarray reads (smartarray._platform.environment): booleans parsed
strictly, integers refused when they are not, in the parser and at import."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from smartarray._platform.environment import parse_flag
from tests._targets import real_target_env

ON = ["1", "true", "True", "YES", "on", " On "]
OFF = ["", "0", "false", "FALSE", "no", "No", "off", " OFF "]


@pytest.mark.parametrize("value", ON)
def test_a_switch_is_on_for_the_words_that_say_on(value):
    assert parse_flag("SMARTARRAY_STRICT", value) is True


@pytest.mark.parametrize("value", OFF)
def test_a_switch_is_off_for_the_words_that_say_off(value):
    assert parse_flag("SMARTARRAY_STRICT", value) is False


@pytest.mark.parametrize("value", ["2", "maybe", "enabled", "-1", "tru"])  # codespell:ignore tru
def test_a_switch_refuses_what_is_neither(value):
    with pytest.raises(ValueError, match=r"SMARTARRAY_STRICT must be a boolean: 1, true, yes, on"):
        parse_flag("SMARTARRAY_STRICT", value)


def _import_smartarray(env: dict[str, str], code: str = "") -> subprocess.CompletedProcess:
    child = dict(real_target_env(), **env)

    return subprocess.run(
        [sys.executable, "-c", "import os, smartarray\n" + code],
        env=child,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("value", ["false", "no", "OFF"])
def test_strict_said_off_neither_turns_strict_mode_on_nor_forces_the_simulator(value):
    code = (
        "from smartarray.testing import is_strict\n"
        "print(is_strict(), os.environ.get('NUMBA_ENABLE_CUDASIM'))\n"
    )
    out = _import_smartarray({"SMARTARRAY_STRICT": value}, code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "None"]


def test_the_fake_driver_reads_strict_said_off_as_off():
    code = "from smartarray import _fakegpu\nprint(_fakegpu.current() is not None)\n"
    out = _import_smartarray({"SMARTARRAY_FAKE_GPU": "1", "SMARTARRAY_STRICT": "false"}, code)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True"]


@pytest.mark.parametrize(
    "name, value, accepted",
    [
        ("SMARTARRAY_FAKE_GPU_LOG", "sometimes", "must be a boolean"),
        ("SMARTARRAY_FAKE_GPU_SEED", "1.5", "must be an integer"),
    ],
)
def test_the_fake_driver_refuses_a_switch_it_cannot_read(name, value, accepted):
    out = _import_smartarray({"SMARTARRAY_FAKE_GPU": "1", name: value})
    assert out.returncode != 0
    assert f"ValueError: environment variable {name} {accepted}" in out.stderr
    assert repr(value) in out.stderr


@pytest.mark.parametrize(
    "name, value, accepted",
    [
        ("SMARTARRAY_STRICT", "maybe", "must be a boolean"),
        ("SMARTARRAY_NVTX", "sometimes", "must be a boolean"),
    ],
)
def test_import_refuses_a_switch_that_is_neither(name, value, accepted):
    out = _import_smartarray({name: value})
    assert out.returncode != 0
    assert f"ValueError: environment variable {name} {accepted}" in out.stderr
    assert repr(value) in out.stderr


def test_a_seed_from_the_environment_that_is_no_integer_is_refused():
    env = dict(os.environ, SMARTARRAY_STRICT="1", SMARTARRAY_STRICT_SEED="1.5")
    code = "import smartarray"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode != 0
    assert "SMARTARRAY_STRICT_SEED must be an integer, got '1.5'" in out.stderr


def test_environment_variable_selects_the_simulator_and_strict_mode():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env.update(SMARTARRAY_STRICT="1", SMARTARRAY_STRICT_SEED="7")
    script = (
        "import smartarray, smartarray.testing as t, numba\n"
        "print(numba.config.ENABLE_CUDASIM, t.is_strict(), t.strict_state().seed)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["1", "True", "7"]


def test_environment_variable_after_real_numba_cuda_is_a_clear_error():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env.update(SMARTARRAY_STRICT="1")
    script = "import numba.cuda\nimport smartarray\n"
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode != 0
    assert "SMARTARRAY_STRICT=1 needs numba's CUDA simulator" in out.stderr
