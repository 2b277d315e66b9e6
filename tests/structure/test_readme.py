"""The README and the source distribution: what a new user reads and downloads first.

Every ``python`` snippet of README.md runs as written (in order, one script, as a user pasting
them into one session) and prints exactly the comment lines that end it; the README lists every
example; install hints name only what exists; the sdist ships no tests it cannot run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests._targets import with_checkout

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
SNIPPETS = re.findall(r"```python\n(.*?)```", README, flags=re.S)


def _printed_comments(snippet: str) -> list[str]:
    """The comment lines that end a snippet: what it prints, as the README shows it."""
    lines = snippet.rstrip("\n").splitlines()
    shown: list[str] = []
    while lines and lines[-1].startswith("# "):
        shown.insert(0, lines.pop()[2:])
    return shown


def test_the_readme_has_snippets_that_show_their_output() -> None:
    assert len(SNIPPETS) >= 2
    assert all(_printed_comments(s) for s in SNIPPETS)


def test_every_readme_snippet_runs_as_written_and_prints_what_it_shows() -> None:
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    with_checkout(env)
    out = subprocess.run(
        [sys.executable, "-c", "\n".join(SNIPPETS)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    expected = [line for s in SNIPPETS for line in _printed_comments(s)]
    assert out.stdout.splitlines() == expected


def test_the_readme_lists_every_example() -> None:
    listed = set(re.findall(r"\(examples/(\w+\.py)\)", README))
    assert listed == {p.name for p in (ROOT / "examples").glob("*.py")}


def test_install_hints_name_no_release_that_does_not_exist() -> None:
    # smartarray is not on a package index: extras install from a clone, ``pip install ".[x]"``.
    texts = [ROOT / "README.md", *(ROOT / "docs").glob("*.rst")]
    for folder in ("smartarray", "examples", "benchmarks"):
        texts += (ROOT / folder).rglob("*.py")
    offenders = [str(p) for p in texts if re.search(r"smartarray\[\w+\]", p.read_text())]
    assert offenders == []


def test_the_readme_says_how_long_and_how_big_the_test_setup_is() -> None:
    assert "A run takes 5 to 20 minutes\non 2 CPU cores" in README
    assert "-n auto --dist loadfile" in README  # pytest-xdist: the test extra has it
    assert "about 1.1 GB, 456 MB of it the CUDA toolkit wheels" in README


def test_the_manifest_keeps_the_tests_out_of_the_sdist() -> None:
    # The tests need the repository around them (conftest, helpers, docs, examples): an sdist
    # that ships them ships tests that cannot run. setuptools adds tests/test*.py by default;
    # MANIFEST.in must take them out (applied here with setuptools' own template rules).
    from setuptools.command.egg_info import FileList

    files = FileList()
    files.extend(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test*.py"))
    files.append("smartarray/__init__.py")
    manifest = ROOT / "MANIFEST.in"
    assert manifest.is_file()
    for line in manifest.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            files.process_template_line(line)
    assert files.files == ["smartarray/__init__.py"]


def test_a_built_sdist_holds_no_tests(tmp_path: Path) -> None:
    # The real build, where the installed setuptools can read pyproject.toml (PEP 639 needs 77).
    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip(f"setuptools {setuptools.__version__} cannot build this pyproject (needs 77)")
    script = f"from setuptools import build_meta; print(build_meta.build_sdist({str(tmp_path)!r}))"
    src = tmp_path / "src"
    # Built from a copy of the checkout's files: the build writes egg-info next to its sources.
    listing = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    for name in listing:
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            (src / name).write_bytes((ROOT / name).read_bytes())
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=src, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    with tarfile.open(tmp_path / out.stdout.split()[-1]) as sdist:
        names = [n.split("/", 1)[1] for n in sdist.getnames() if "/" in n]
    assert "smartarray/__init__.py" in names
    assert [n for n in names if n.startswith("tests")] == []
