"""Which compiled version numba-cuda's real dispatcher runs for each kind of kernel argument.

The simulator never types kernel arguments, so this runs numba-cuda's real (non-simulator)
dispatcher in a child process without ``NUMBA_ENABLE_CUDASIM`` and without a GPU: launches go
through ``kernel[grid, block](...)``, the C dispatcher (``_cuda_call``, which requires an exact
type match while it can still compile) and ``CUDADispatcher.compile``. Only the compiled
version itself is a stand-in: ``numba.cuda.dispatcher._Kernel`` (what ``compile`` builds for
an argument-type tuple it has no version for) is replaced by an object with a ``launch`` method
that records the launch instead of running it, so each new version shows up as one
construction. Device arrays are stand-ins that carry numba's own ``DeviceNDArray`` typing
property, and objects exporting ``__cuda_array_interface__`` (CuPy's, PyTorch's arrays).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests._targets import real_target_env

SCRIPT = textwrap.dedent(
    """
    import json, warnings
    import numpy as np
    warnings.simplefilter("ignore")
    import numba.cuda.dispatcher as dispatcher
    from numba import cuda, types
    from numba.core import typing
    from numba.cuda.cudadrv.devicearray import DeviceNDArrayBase
    import smartarray as sa

    assert not cuda.is_available() or True  # the real target: no simulator in this process
    assert "simulator" not in type(cuda.jit(lambda x: None)).__module__

    versions = []          # argument types of every version compiled, in order
    launched = []          # (kernel argument types of the version run) per launch

    class StandInKernel:
        # What CUDADispatcher.compile builds and add_overload registers: a compiled version.
        objectmode = False

        def __init__(self, py_func, argtypes, **options):
            self.argument_types = tuple(argtypes)
            self.signature = typing.signature(types.none, *argtypes)
            versions.append([str(t) for t in argtypes])

        def bind(self):
            pass

        def launch(self, args, griddim, blockdim, stream, sharedmem):
            launched.append([str(t) for t in self.argument_types])

    dispatcher._Kernel = StandInKernel

    class DeviceArrayLike:
        # numba's own DeviceNDArray typing (its _numba_type_ property) over an ndarray's geometry.
        _numba_type_ = DeviceNDArrayBase.__dict__["_numba_type_"]

        def __init__(self, ary):
            self.shape, self.strides, self.dtype = ary.shape, ary.strides, ary.dtype
            self.ndim, self.size, self.flags = ary.ndim, ary.size, ary.flags

    class CudaArrayInterface:
        # A third-party device array (CuPy, PyTorch): typed from __cuda_array_interface__.
        def __init__(self, ary):
            self.__cuda_array_interface__ = {
                "shape": ary.shape, "strides": None, "typestr": ary.dtype.str,
                "data": (0x10000, False), "version": 3,
            }

    @cuda.jit
    def kernel(x):
        pass

    a = sa.SmartArray(np.zeros(8))
    kinds = [
        ("ndarray", np.zeros(8)),
        ("device array", DeviceArrayLike(np.zeros(8))),
        ("CAI array", CudaArrayInterface(np.zeros(8))),
        ("SmartArray", a),
        ("another SmartArray", sa.SmartArray(np.ones(8))),
        ("contiguous view", a[2:6]),
        ("Out(SmartArray)", sa.Out(a)),
        ("InOut(SmartArray)", sa.InOut(a)),
        ("In(SmartArray)", sa.In(a)),
        ("In(another SmartArray)", sa.In(sa.SmartArray(np.ones(8)))),
        ("strided device array", DeviceArrayLike(np.zeros(8)[::2])),
        ("strided view", a[::2]),
    ]
    lazy = {}
    for rnd in (1, 2):
        for name, arg in kinds:
            before = len(versions)
            kernel[1, 32](arg)
            lazy.setdefault(name, []).append(
                {"new": versions[before:], "ran": launched[-1]}
            )

    @cuda.jit("void(float64[::1])")
    def one_signature(x):
        pass

    @cuda.jit(["void(float64[::1])", "void(int32[::1])"])
    def two_signatures(x):
        pass

    eager = {}
    for disp, label in ((one_signature, "one"), (two_signatures, "two")):
        for name, arg in (("SmartArray", a), ("In(SmartArray)", sa.In(a))):
            before = len(versions)
            try:
                disp[1, 32](arg)
                eager[label + " " + name] = {"new": versions[before:], "ran": launched[-1]}
            except TypeError as exc:
                eager[label + " " + name] = {"error": str(exc)}
    print("RESULT " + json.dumps({"lazy": lazy, "eager": eager, "versions": len(versions)}))
    """
)


@pytest.fixture(scope="module")
def dispatch() -> dict:
    env = real_target_env()
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT ") :])


ARRAY_C = "array(float64, 1d, C)"
ARRAY_A = "array(float64, 1d, A)"
SMART_C = "SmartArray(float64, 1d, C)"
SMART_A = "SmartArray(float64, 1d, A)"
READONLY_SMART_C = "readonly SmartArray(float64, 1d, C)"


def test_device_arrays_share_the_version_compiled_for_host_arrays(dispatch):
    lazy = dispatch["lazy"]
    assert lazy["ndarray"][0] == {"new": [[ARRAY_C]], "ran": [ARRAY_C]}
    assert lazy["device array"][0] == {"new": [], "ran": [ARRAY_C]}
    assert lazy["CAI array"][0] == {"new": [], "ran": [ARRAY_C]}


def test_a_smartarray_compiles_one_version_of_its_own(dispatch):
    # numba-cuda's C dispatcher requires an exact type match while it can compile, and a
    # SmartArray has a type of its own (the njit target needs it): a second version, once.
    lazy = dispatch["lazy"]
    assert lazy["SmartArray"][0] == {"new": [[SMART_C]], "ran": [SMART_C]}
    for name in ("another SmartArray", "contiguous view", "Out(SmartArray)", "InOut(SmartArray)"):
        assert lazy[name][0] == {"new": [], "ran": [SMART_C]}, name


def test_In_compiles_a_read_only_version_once(dispatch):
    lazy = dispatch["lazy"]
    assert lazy["In(SmartArray)"][0] == {"new": [[READONLY_SMART_C]], "ran": [READONLY_SMART_C]}
    assert lazy["In(another SmartArray)"][0] == {"new": [], "ran": [READONLY_SMART_C]}


def test_layouts_compile_their_own_versions_as_for_device_arrays(dispatch):
    lazy = dispatch["lazy"]
    assert lazy["strided device array"][0] == {"new": [[ARRAY_A]], "ran": [ARRAY_A]}
    assert lazy["strided view"][0] == {"new": [[SMART_A]], "ran": [SMART_A]}


def test_every_later_launch_reuses_a_version(dispatch):
    for name, launches in dispatch["lazy"].items():
        assert launches[1]["new"] == [], name
        assert launches[1]["ran"] == launches[0]["ran"], name
    assert dispatch["versions"] == 5 + 3  # five lazy versions, three eager ones


def test_eager_signatures_serve_smartarrays_without_compiling(dispatch):
    eager = dispatch["eager"]
    assert eager["one SmartArray"] == {"new": [], "ran": [ARRAY_C]}
    assert eager["one In(SmartArray)"] == {"new": [], "ran": [ARRAY_C]}  # no type check at all
    assert eager["two SmartArray"] == {"new": [], "ran": [ARRAY_C]}  # a safe conversion
    # A read-only type does not convert to a writable one: list a read-only signature, or
    # pass the array bare, to a kernel with several eager signatures.
    assert "No matching definition" in eager["two In(SmartArray)"]["error"]
