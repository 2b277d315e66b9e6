"""The documentation in docs/: every code sample runs, the API page is complete, Sphinx builds.

Code samples in the pages are doctest blocks (``>>>``), run here with their output checked, on
the CUDA simulator like the rest of the suite. Other blocks are only ``bash`` (commands, run or
checked below), ``text`` (output and diagrams) and ``literalinclude`` of a tested example.
"""

from __future__ import annotations

import doctest
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import smartarray as sa
from tests._targets import with_checkout

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.rst"))
DIRECTIVE = re.compile(r"^(\s*)\.\. ([\w:-]+)::\s*(.*)$")
CODE_DIRECTIVES = {"code-block", "code", "sourcecode"}
LANGUAGES = {"bash", "text"}
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def blocks(path: Path) -> list[tuple[str, str, str]]:
    """The code-like blocks of a page: (directive, argument, body) for directives with bodies."""
    lines = path.read_text().splitlines()
    found = []
    for i, line in enumerate(lines):
        m = DIRECTIVE.match(line)
        if m is None:
            continue
        indent = len(m.group(1))
        body = []
        for nxt in lines[i + 1 :]:
            if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= indent:
                break
            body.append(nxt)
        text = "\n".join(b for b in body if not b.strip().startswith(":"))
        found.append((m.group(2), m.group(3).strip(), text.strip("\n")))
    return found


def commands(path: Path) -> list[str]:
    """Every command line of the page's ``bash`` blocks."""
    result = []
    for directive, language, body in blocks(path):
        if directive in CODE_DIRECTIVES and language == "bash":
            result += [line.strip() for line in body.splitlines() if line.strip()]
    return result


def test_pages_exist():
    names = {p.stem for p in PAGES}
    assert {
        "index",
        "getting_started",
        "user_guide",
        "examples",
        "api",
        "reference_mapping",
        "migrating",
        "performance",
        "troubleshooting",
        "seeing_what_moves",
    } <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_block_is_tested(page):
    """No untested code: code blocks are bash/text only, literal ``::`` blocks are not used."""
    for directive, argument, _ in blocks(page):
        if directive in CODE_DIRECTIVES:
            assert argument in LANGUAGES, (
                f"{page.name}: a {argument or 'bare'} code block is not run by the tests; "
                "write Python as a doctest block (>>>) or literalinclude a tested example"
            )
        elif directive == "literalinclude":
            target = (DOCS / argument).resolve()
            assert target.parent == ROOT / "examples" and target.is_file(), argument
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if line.rstrip().endswith("::") and not DIRECTIVE.match(line):
            pytest.fail(f"{page.name}:{number}: a literal block (::) is not run by the tests")


@pytest.mark.parametrize(
    "page",
    # testing.rst's samples turn strict mode on, which runs on the simulator only.
    [pytest.param(p, marks=[pytest.mark.strict_mode]) if p.stem == "testing" else p for p in PAGES],
    ids=lambda p: p.name,
)
def test_doctest_blocks_run(page):
    text = page.read_text()
    test = doctest.DocTestParser().get_doctest(text, {}, page.stem, str(page), 0)
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    result = runner.run(test, out=report.append)
    assert result.failed == 0, "".join(report)
    assert result.attempted == len(re.findall(r"^\s*>>> ", text, flags=re.M))


def test_python_pages_have_samples():
    for name in ("getting_started", "user_guide", "migrating", "reference_mapping"):
        text = (DOCS / f"{name}.rst").read_text()
        assert text.count(">>> ") >= 5, name


def _extras() -> set[str]:
    """The extras of pyproject.toml (read with a regex: tomllib needs Python 3.11)."""
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    return set(re.findall(r"^([\w-]+) = \[", section, flags=re.M))


def _run(argv: list[str], extra_env: dict[str, str] | None = None) -> str:
    env = dict(os.environ)
    env.update(extra_env or {})
    if env.get("SMARTARRAY_FAKE_GPU", "0") in ("", "0"):
        env.setdefault("NUMBA_ENABLE_CUDASIM", "1")
    else:  # the fake driver runs numba-cuda's real target: no simulator, no strict mode
        env.pop("NUMBA_ENABLE_CUDASIM", None)
        env.pop("SMARTARRAY_STRICT", None)
    # This checkout's smartarray, not whichever one the interpreter has installed.
    with_checkout(env)
    out = subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0, f"{argv} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def _check_command(line: str) -> None:
    words = shlex.split(line)
    env = {}
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    if words[:2] == ["pip", "install"]:
        for extra in re.findall(r"\[([\w,]+)\]", line):
            assert set(extra.split(",")) <= _extras(), line
        return
    if words[0] == "mpiexec":  # mpiexec -n N python examples/...: the mpi extra's MPI
        assert words[1] == "-n" and words[3] == "python", line
        mpiexec = Path(sys.executable).parent / "mpiexec"
        if importlib.util.find_spec("mpi4py") is None or not mpiexec.exists():
            pytest.skip("needs mpi4py and mpiexec (pip install -e '.[mpi]')")
        script = Path(words[4])
        assert script.parent == Path("examples") and (ROOT / script).is_file(), line
        _run([str(mpiexec), *words[1:3], sys.executable, *words[4:]], env)
        return
    assert words[0] == "python", f"unknown command in the docs: {line}"
    if words[1:3] == ["-m", "smartarray"]:
        sub = words[3]
        if sub == "info":
            assert "target" in _run([sys.executable, *words[1:]], env)
            return
        if sub == "--version":
            assert _run([sys.executable, *words[1:]], env).startswith("smartarray ")
            return
        assert sub in ("demo", "bench"), line
        # demo and bench take minutes at full size: check that their options exist.
        usage = _run([sys.executable, "-m", "smartarray", sub, "--help"], env)
        for option in (w for w in words[4:] if w.startswith("--")):
            assert option in usage, f"{line}: {option} is not an option of {sub}"
        return
    if words[1:3] == ["-m", "benchmarks"]:
        # The suite, as `smartarray bench` (minutes at full size): its options exist.
        usage = _run([sys.executable, "-m", "benchmarks", "--help"], env)
        for option in (w for w in words[3:] if w.startswith("--")):
            assert option in usage, f"{line}: {option} is not an option of the suite"
        return
    if words[1:3] == ["-m", "sphinx"] or words[1:3] == ["-m", "pytest"]:
        return  # test_sphinx_build runs the docs build; the suite is this run
    script = Path(words[1])
    assert script.parent == Path("examples") and (ROOT / script).is_file(), line
    _run([sys.executable, *words[1:]], env)


@pytest.mark.parametrize(
    "line",
    sorted({line for page in PAGES for line in commands(page)}),
)
def test_commands_in_the_docs(line):
    _check_command(line)


def test_example_output_shown_in_the_docs(capsys):
    """The output printed in examples.rst is what the script prints."""
    body = [
        b for d, lang, b in blocks(DOCS / "examples.rst") if d in CODE_DIRECTIVES and lang == "text"
    ][0]
    spec = importlib.util.spec_from_file_location("host_edits", ROOT / "examples/host_edits.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(n=512, steps=3, k=4)
    shown = [line.strip() for line in body.splitlines()]
    assert capsys.readouterr().out.splitlines() == shown
    assert "python examples/host_edits.py --n 512 --steps 3 --edit 4" in " ".join(
        commands(DOCS / "examples.rst")
    )


def test_several_gpus_output_shown_is_what_the_example_prints():
    """The output on several_gpus.rst is what its command prints on four fake devices."""
    (line,) = [c for c in commands(DOCS / "several_gpus.rst") if "heat_devices" in c]
    words = shlex.split(line)
    env = dict(w.split("=", 1) for w in words[:2])
    assert env == {"SMARTARRAY_FAKE_GPU": "1", "SMARTARRAY_FAKE_GPU_DEVICES": "4"}
    env["NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS"] = "0"
    printed = _run([sys.executable, *words[3:]], env).splitlines()
    texts = [b for d, lang, b in blocks(DOCS / "several_gpus.rst") if lang == "text"]
    shown = [line.strip() for line in texts[-1].splitlines()]
    assert printed[2:] == shown  # after the target and defaults lines


def test_api_reference_lists_every_public_name():
    text = (DOCS / "api.rst").read_text()
    documented = set(re.findall(r"^\.\. (?:auto\w+|py:\w+):: (\w+)\s*$", text, flags=re.M))
    assert documented == set(sa.__all__)


def test_every_example_is_on_the_examples_page():
    text = (DOCS / "examples.rst").read_text()
    for script in (ROOT / "examples").glob("*.py"):
        assert f".. literalinclude:: ../examples/{script.name}" in text, script.name


def test_sphinx_build(tmp_path):
    """``sphinx-build -W`` (warnings as errors) succeeds; CI installs the docs extra."""
    pytest.importorskip("sphinx", reason="sphinx is not installed (pip install -e '.[docs]')")
    pytest.importorskip("numpydoc", reason="numpydoc is not installed (pip install -e '.[docs]')")
    pytest.importorskip("pydata_sphinx_theme", reason="the docs extra is not installed")
    argv = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html", "-q"]
    argv += [str(DOCS), str(tmp_path / "html"), "-d", str(tmp_path / "doctrees")]
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    api = (tmp_path / "html" / "api.html").read_text()
    for name in sa.__all__:
        assert name in api, name
