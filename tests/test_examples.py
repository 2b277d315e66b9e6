"""Every script in examples/ runs, at a small size, and moves what it says."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
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
