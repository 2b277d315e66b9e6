"""Sphinx configuration of the smartarray documentation.

Build: ``python -m sphinx -W --keep-going -b html docs docs/_build/html``. No GPU is needed:
with ``NUMBA_ENABLE_CUDASIM`` unset, the build uses the numba CUDA simulator (set before
``smartarray`` imports ``numba.cuda``, which autodoc does).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import smartarray  # noqa: E402

project = "smartarray"
author = "The smartarray developers"
copyright = "the smartarray developers; BSD-2-Clause"  # noqa: A001 - Sphinx's name
version = release = smartarray.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.intersphinx",
    "numpydoc",
]

exclude_patterns = ["_build", "_inventories"]
root_doc = "index"
default_role = "code"
highlight_language = "python3"

# smartarray.mpi needs the optional mpi extra; the docs build documents it either way.
autodoc_mock_imports = [] if importlib.util.find_spec("mpi4py") else ["mpi4py"]
autodoc_default_options = {"member-order": "bysource"}
autodoc_typehints = "none"  # the numpydoc sections say it
autodoc_preserve_defaults = True  # show `dtype=np.float64`, as the reference pages do
numpydoc_show_class_members = False  # members are listed with autodoc's :members:
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

# No network at build time: the inventories are vendored under _inventories/ (the objects
# the pages link to; _inventories/make.py writes them), so links out resolve offline.
_INVENTORIES = Path(__file__).resolve().parent / "_inventories"
intersphinx_mapping: dict[str, tuple[str, str | None]] = {
    "numpy": ("https://numpy.org/doc/stable/", str(_INVENTORIES / "numpy.inv")),
    "numba": ("https://numba.readthedocs.io/en/stable/", str(_INVENTORIES / "numba.inv")),
    "numba-cuda": ("https://nvidia.github.io/numba-cuda/", str(_INVENTORIES / "numba-cuda.inv")),
}

# The theme numba-cuda's documentation uses: a content column wide enough for the code, and
# code blocks that scroll inside the column instead of running past it.
html_theme = "pydata_sphinx_theme"
html_title = f"smartarray {release}"
html_static_path = ["_static"]
html_css_files = ["smartarray.css"]
# The page's table of contents goes in the left sidebar, under the navigation: without a
# right sidebar the article is wide enough for the samples' 100-character lines at 1280 px.
html_sidebars = {"**": ["sidebar-nav-bs", "page-toc"]}
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": [],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
