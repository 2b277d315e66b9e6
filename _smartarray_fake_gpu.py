"""Switch smartarray's fake CUDA driver on in any program and any pytest run.

``SMARTARRAY_FAKE_GPU=1`` must take effect before ``numba.cuda`` is first imported: numba-cuda
picks its driver once. ``import smartarray`` first does that, but most programs import numba
first, and pytest imports numba while it reads an ini file whose ``filterwarnings`` names one
of numba's warning classes, before any conftest. This module closes the gap from outside the
``smartarray`` package (importing the package imports numba):

- ``smartarray_fake_gpu.pth``, installed next to it in site-packages, runs at interpreter
  start-up and calls :func:`install` only when ``SMARTARRAY_FAKE_GPU`` is set (an unset
  variable costs one dictionary lookup and imports nothing);
- pytest loads it as a plugin (the ``pytest11`` entry point ``smartarray_fake_gpu``, or
  ``-p _smartarray_fake_gpu``) before any conftest. pytest before 9.2 loads plugins before it
  resolves the ini file's warning filters; pytest 9.2 resolves them first (to catch warnings
  from plugin imports), so there only the ``.pth`` file comes early enough for an ini that
  names numba.cuda's classes, and the plugin says so instead of a traceback from numba.

:func:`install` imports nothing heavy either: it puts a finder on ``sys.meta_path`` that, once
``numba`` itself has been imported, imports smartarray, which loads the fake driver before
``numba.cuda``. A program that never imports numba pays nothing.

PYTEST_DONT_REWRITE: the start-up hook imports this module before pytest starts, and pytest
would otherwise warn that its plugin was imported too early to rewrite its asserts (an error
in a suite whose filterwarnings is ``error``); it has no asserts to rewrite.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

__all__ = ["install", "requested"]

_OFF = ("", "0", "false", "no", "off")


def requested() -> bool:
    """Whether ``SMARTARRAY_FAKE_GPU`` asks for the fake driver.

    A value smartarray cannot read (neither on nor off) counts as asked: importing smartarray
    then refuses it with an error naming the variable.
    """
    return os.environ.get("SMARTARRAY_FAKE_GPU", "").strip().lower() not in _OFF


class _LoadSmartarrayAfterNumba:
    """A meta path finder: ``numba`` is loaded by its own loader, then smartarray is imported."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if name != "numba":
            return None
        _uninstall()
        from importlib.util import find_spec

        spec = find_spec("numba")
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _ThenSmartarray(spec.loader)
        return spec


class _ThenSmartarray:
    """numba's own loader, followed by ``import smartarray`` (which loads the fake driver)."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        # numba keeps its own loader: tools that read numba.__loader__ find what they expect.
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        if "numba.cuda" not in sys.modules:
            import smartarray  # noqa: F401  (loads the fake driver before numba.cuda)


def _uninstall() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _LoadSmartarrayAfterNumba)]


def install() -> None:
    """Load the fake driver before ``numba.cuda``, whoever imports numba first.

    Does nothing unless ``SMARTARRAY_FAKE_GPU`` asks for it. Where numba is imported already
    (numba.cuda not yet), smartarray is imported now; where numba.cuda is imported already it
    is too late, and ``import smartarray`` says so.
    """
    if not requested() or "numba.cuda" in sys.modules:
        return
    if "numba" in sys.modules:
        import smartarray  # noqa: F401

        return
    if not any(isinstance(f, _LoadSmartarrayAfterNumba) for f in sys.meta_path):
        sys.meta_path.insert(0, _LoadSmartarrayAfterNumba())


def _fake_driver_loaded() -> bool:
    fakegpu = sys.modules.get("smartarray._fakegpu")
    return fakegpu is not None and fakegpu.current() is not None


def pytest_load_initial_conftests(early_config: Any, parser: Any, args: Any) -> None:
    """As a pytest plugin, before any conftest: the finder installed (this module may have been
    imported before pytest, by the start-up hook, and its finder used or removed since), or one
    line where numba.cuda came too early."""
    install()
    if requested() and "numba.cuda" in sys.modules and not _fake_driver_loaded():
        import pytest

        raise pytest.UsageError(
            "SMARTARRAY_FAKE_GPU=1: numba.cuda was imported before smartarray's pytest plugin "
            "loaded (pytest 9.2 imports the warning classes an ini file's filterwarnings names "
            "before any plugin), so it chose the real driver. smartarray's start-up hook "
            "(smartarray_fake_gpu.pth, installed with the package into site-packages) comes "
            "earlier: install smartarray into the environment that runs pytest, or drop "
            "numba's classes from filterwarnings."
        )


def pytest_report_header(config: Any) -> str | None:
    """As a pytest plugin: say in the session's header that the fake driver runs it."""
    if _fake_driver_loaded():
        return "smartarray: fake CUDA driver (SMARTARRAY_FAKE_GPU)"
    return None


# As a pytest plugin, this module is imported before any conftest (and before pytest < 9
# resolves the ini file's warning filters).
install()
