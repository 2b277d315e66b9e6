"""Every script in examples/ runs, at a small size, and moves what it says."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


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
