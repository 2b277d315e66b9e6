"""Ships ``smartarray_fake_gpu.pth`` into site-packages (the metadata is in pyproject.toml).

setuptools has no declarative way to install a ``.pth`` file: the wheel gets it through
``build_py`` (copied into the build folder's root, which becomes site-packages), an editable
install (``pip install -e .``) through the meta path finder's files, as numba-cuda ships its
``_numba_cuda_redirector.pth``. The ``.pth`` line imports ``_smartarray_fake_gpu`` only when
``SMARTARRAY_FAKE_GPU`` is set (see that module).
"""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import _TopLevelFinder, editable_wheel

HOOK = "smartarray_fake_gpu.pth"
HERE = Path(__file__).resolve().parent


class build_py_with_hook(build_py):  # noqa: N801 - setuptools' command naming
    """``build_py``, plus the start-up hook at the root of the wheel."""

    def run(self) -> None:
        super().run()
        self.copy_file(str(HERE / HOOK), str(Path(self.build_lib) / HOOK), preserve_mode=False)

    def get_source_files(self) -> list[str]:
        return [*super().get_source_files(), HOOK]

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / HOOK)]

    def get_output_mapping(self) -> dict[str, str]:
        mapping = dict(super().get_output_mapping())
        mapping[str(Path(self.build_lib) / HOOK)] = HOOK
        return mapping


class _FinderWithHook(_TopLevelFinder):
    """The editable install's meta path finder, plus the start-up hook."""

    def get_implementation(self):  # type: ignore[no-untyped-def]
        yield from super().get_implementation()
        yield (HOOK, (HERE / HOOK).read_bytes())


class editable_wheel_with_hook(editable_wheel):  # noqa: N801 - setuptools' command naming
    """``pip install -e .``: the meta path finder (the lenient mode) with the hook."""

    def _select_strategy(self, name, tag, build_lib):  # type: ignore[no-untyped-def]
        if self.mode not in (None, "lenient"):
            raise RuntimeError(
                f"smartarray's editable install supports the default (lenient) mode only, "
                f"got --config-settings editable_mode={self.mode}"
            )
        return _FinderWithHook(self.distribution, name)


setup(cmdclass={"build_py": build_py_with_hook, "editable_wheel": editable_wheel_with_hook})
