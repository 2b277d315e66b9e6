"""pytest plugin for numba-cuda's own tests run from its installed wheel.

numba-cuda's test classes use a fixture, ``initialize_from_pytest_config``, that its source
tree's ``conftest.py`` defines and its wheel does not ship; this plugin defines it (and the
option it reads), so that ``--pyargs numba.cuda.tests...`` runs outside numba-cuda's tree.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--dump-failed-filechecks",
        action="store_true",
        help="numba-cuda's tests: dump reproducers of failing FileCheck checks",
    )


@pytest.fixture(scope="class")
def initialize_from_pytest_config(request: pytest.FixtureRequest) -> None:
    """What numba-cuda's test classes read from pytest's configuration."""
    request.cls._dump_failed_filechecks = request.config.getoption("dump_failed_filechecks")
