"""The built documentation as a reader sees it: figures, numbers, links out, and code that fits.

The figures and the intersphinx inventories are generated files: they must be what their
scripts write today. The landing page's demo table must be what the demo prints. The pages are
rendered in headless Chromium (when it is installed: ``apt-get install chromium``) at a laptop
width, and no code block, table or figure may be wider than the article column.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests._targets import with_checkout

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["NUMBA_ENABLE_CUDASIM"] = "1"
    env.pop("SMARTARRAY_STRICT", None)  # the figures show the library's plain behaviour
    with_checkout(env)
    return env


@pytest.mark.parametrize("script", ["figures.py", "_inventories/make.py"])
def test_generated_docs_files_are_up_to_date(script):
    out = subprocess.run(
        [sys.executable, str(DOCS / script), "--check"],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_landing_page_demo_table_is_what_the_demo_prints():
    text = (DOCS / "index.rst").read_text()
    command = "python -m smartarray demo --size 16 --steps 10 --every 5"
    assert command in text
    out = subprocess.run(
        [sys.executable, "-m", "smartarray", *command.split()[3:], "--json"],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    table = text.split(".. list-table::", 1)[1].split("\n\n.. ", 1)[0]
    rows = re.findall(
        r"^   \* - (.*)\n     - ([\d,]+)\n     - ([\d,]+)\n     - ([\d.]+)x", table, re.M
    )
    assert len(rows) == 3
    hand = report["strategies"]["hand"]["bytes"]
    for (_, transfers, nbytes, ratio), key in zip(
        rows, ("auto", "hand", "smartarray"), strict=True
    ):
        fig = report["strategies"][key]
        assert (transfers, nbytes) == (f"{fig['transfers']:,}", f"{fig['bytes']:,}"), key
        assert ratio == f"{fig['bytes'] / hand:.2f}", key


# -- the rendered pages --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    pytest.importorskip("sphinx", reason="sphinx is not installed (pip install -e '.[docs]')")
    pytest.importorskip("numpydoc", reason="numpydoc is not installed (pip install -e '.[docs]')")
    pytest.importorskip("pydata_sphinx_theme", reason="the docs extra is not installed")
    out_dir = tmp_path_factory.mktemp("docs") / "html"
    argv = [sys.executable, "-m", "sphinx", "-q", "-W", "--keep-going", "-b", "html"]
    out = subprocess.run(
        [*argv, str(DOCS), str(out_dir)], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out_dir


def test_links_out_resolve_offline(built):
    """Intersphinx reads the vendored inventories: links to numba-cuda and NumPy, no network."""
    index = (built / "index.html").read_text()
    assert 'href="https://nvidia.github.io/numba-cuda/reference/kernel.html#numba.cuda.jit"' in (
        index
    )
    assert (
        'href="https://nvidia.github.io/numba-cuda/reference/memory.html#numba.cuda.to_device"'
        in (index)
    )
    assert (built / "_images" / "coherence.svg").is_file()
    assert (built / "_images" / "transfer_timeline.svg").is_file()


# Runs in the page after its style sheets: every code block, table and figure, measured.
_PROBE = """<script>
(function () {
  var article = document.querySelector('article.bd-article') || document.body;
  var right = article.getBoundingClientRect().right;
  var items = [];
  var sel = 'div.highlight pre, pre.doctest-block, pre.literal-block, table, img, figure';
  document.querySelectorAll(sel).forEach(function (el) {
    var r = el.getBoundingClientRect();
    items.push({tag: el.tagName, scroll: el.scrollWidth, client: el.clientWidth,
                right: r.right, text: (el.textContent || el.getAttribute('src') || '')
                .trim().slice(0, 60)});
  });
  var p = document.createElement('pre');
  p.id = 'overflow-report';
  p.textContent = JSON.stringify({right: right, items: items});
  document.body.appendChild(p);
})();
</script>"""

WIDTH = 1280  # a laptop screen


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _measure(browser: str, page: Path) -> dict:
    probe = page.with_name(f"_probe_{page.name}")
    probe.write_text(page.read_text().replace("</body>", _PROBE + "</body>"))
    out = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--window-size={WIDTH},900",
            "--virtual-time-budget=5000",
            "--dump-dom",
            probe.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = re.search(r'<pre id="overflow-report"[^>]*>(.*?)</pre>', out.stdout, re.S)
    assert found, f"{page.name}: Chromium rendered nothing: {out.stderr[-2000:]}"
    return json.loads(html.unescape(found.group(1)))


@pytest.mark.parametrize("page", sorted(p.stem for p in DOCS.glob("*.rst")))
def test_code_blocks_fit_the_column(built, page):
    """At 1280 px no code block needs a scroll bar and nothing sticks out of the article."""
    browser = _chromium()
    if browser is None:
        pytest.skip("headless Chromium is not installed (apt-get install chromium)")
    report = _measure(browser, built / f"{page}.html")
    assert report["items"] or page not in ("index", "user_guide", "examples")
    overflowing = [
        f"{item['tag']} {item['scroll']}px in {item['client']}px: {item['text']!r}"
        for item in report["items"]
        if item["scroll"] > item["client"] + 1 or item["right"] > report["right"] + 1
    ]
    assert not overflowing, f"{page}.html at {WIDTH} px:\n" + "\n".join(overflowing)
