"""What the fake CUDA driver's interpreter once could not run: warp-level primitives,
``carray``/``farray`` over a pointer, captured device arrays, managed memory, kernel
attributes.

Each test runs a child process on the fake driver (:func:`tests.doubles.test_fakegpu.run_fake`) and
checks the values a GPU computes, and the errors a GPU reports for what CUDA leaves undefined.
"""

from __future__ import annotations

import re

from tests._targets import real_target_env, with_checkout
from tests.doubles.test_fakegpu import _child, run_fake

WARPS = """
FULL = 0xFFFFFFFF

@cuda.jit
def warps(x, total, ballot, match, up, rotated, after_syncwarp):
    i = cuda.grid(1)
    lane = cuda.threadIdx.x % 32
    v = x[i]
    # a tree reduction of the warp's values with shuffles
    s = v
    for offset in (16, 8, 4, 2, 1):
        s += cuda.shfl_down_sync(FULL, s, offset)
    total[i] = cuda.shfl_sync(FULL, s, 0)  # lane 0's sum, broadcast
    ballot[i] = cuda.ballot_sync(FULL, v % 3 == 0)
    match[i] = cuda.match_any_sync(FULL, v % 4)
    up[i] = cuda.shfl_up_sync(FULL, v, 1)
    rotated[i] = cuda.shfl_xor_sync(FULL, v, 1)
    # syncwarp orders a lane's write before another lane's read
    if lane == 5:
        x[i] = 1000 * (cuda.blockIdx.x + 1) + i
    cuda.syncwarp(FULL)
    after_syncwarp[i] = x[i - lane + 5] if cuda.all_sync(FULL, True) else -1

n = 128
x = np.arange(n, dtype=np.int64) * 7 % 23
outs = [cuda.device_array(n, dtype=np.int64) for _ in range(6)]
warps[2, 64](cuda.to_device(x.copy()), *outs)
total, ballot, match, up, rotated, after = (o.copy_to_host().tolist() for o in outs)
print(json.dumps({"x": x.tolist(), "total": total, "ballot": ballot, "match": match,
                  "up": up, "rotated": rotated, "after": after}))
"""


def test_warp_shuffles_votes_and_syncwarp_compute_what_a_gpu_does() -> None:
    """Two blocks of two warps each: shuffles, votes, match and syncwarp, checked lane by lane
    against what CUDA defines (the closed gap: ``cuda.syncwarp`` and the ``*_sync`` calls)."""
    out = run_fake(WARPS)
    x = out["x"]
    for i in range(len(x)):
        warp, lane = divmod(i, 32)
        members = x[warp * 32 : warp * 32 + 32]
        assert out["total"][i] == sum(members)
        bits = sum(1 << n for n, v in enumerate(members) if v % 3 == 0)
        assert out["ballot"][i] == (bits - (1 << 32) if bits >= 1 << 31 else bits)
        same = sum(1 << n for n, v in enumerate(members) if v % 4 == x[i] % 4)
        assert out["match"][i] == (same - (1 << 32) if same >= 1 << 31 else same)
        assert out["up"][i] == (x[i - 1] if lane else x[i])  # lane 0 keeps its own
        assert out["rotated"][i] == x[i ^ 1]
        block = i // 64
        assert out["after"][i] == 1000 * (block + 1) + warp * 32 + 5


def _launch_failure(kernel: str, launch: str) -> dict:
    return run_fake(
        kernel
        + f"""
from numba.cuda.cudadrv.driver import CudaAPIError
d = cuda.to_device(np.zeros(64))
try:
    {launch}
    cuda.synchronize()
    error = ""
except CudaAPIError as exc:
    error = str(exc)
print(json.dumps({{"error": error}}))
"""
    )


def test_a_warp_call_whose_mask_leaves_out_the_calling_lane_fails_the_launch() -> None:
    """CUDA leaves it undefined: the fake fails the launch, naming the lane and the mask."""
    out = _launch_failure(
        """
@cuda.jit
def half(a):
    i = cuda.grid(1)
    a[i] = cuda.shfl_sync(0x0000FFFF, i, 0)  # lanes 16-31 are not in their own mask
""",
        "half[1, 32](d)",
    )
    assert "CUDA_ERROR_LAUNCH_FAILED" in out["error"], out
    assert re.search(
        r"shfl_sync: lane (1[6-9]|2\d|3[01]) of warp 0 .* mask 0x0000ffff", out["_stderr"]
    )


def test_a_syncwarp_that_waits_for_a_lane_at_syncthreads_fails_instead_of_hanging() -> None:
    """A GPU hangs there; the fake names the lanes it waits for."""
    out = _launch_failure(
        """
@cuda.jit
def divergent(a):
    i = cuda.threadIdx.x
    if i == 0:
        cuda.syncthreads()
    else:
        cuda.syncwarp()
    a[i] = 1.0
""",
        "divergent[1, 32](d)",
    )
    assert "CUDA_ERROR_LAUNCH_FAILED" in out["error"], out
    assert "wait at syncthreads" in out["_stderr"]


CARRAY = """
from numba import types
from numba.cuda.np.numpy_support import carray, farray
from numba.cuda.cudadrv.driver import CudaAPIError

@cuda.jit(types.void(types.CPointer(types.float32), types.int64, types.int64))
def fill(p, rows, cols):
    c = carray(p, (rows, cols))  # the pointer's own dtype
    f = farray(p, (cols, rows), dtype=cuda.float32)
    i, j = cuda.grid(2)
    if i < rows and j < cols:
        c[i, j] = 10 * i + j
    cuda.syncthreads()
    if i < rows and j < cols:
        c[i, j] += f[j, i] * 0  # the same element through the Fortran-ordered view

d = cuda.to_device(np.zeros((3, 4), dtype=np.float32))
fill[(1, 1), (4, 4)](d.device_ctypes_pointer.value, 3, 4)
values = d.copy_to_host().tolist()

small = cuda.to_device(np.zeros(4, dtype=np.float32))
try:  # a view past the end of its allocation
    fill[(1, 1), (1, 1)](small.device_ctypes_pointer.value, 1000, 1000)
    cuda.synchronize()
    error = ""
except CudaAPIError as exc:
    error = str(exc)
print(json.dumps({"values": values, "error": error}))
"""


def test_carray_and_farray_over_a_pointer_read_and_write_device_memory() -> None:
    """``carray``/``farray`` over a ``CPointer`` argument are views of the device memory it
    points to; one that spans past its allocation faults as an access there would."""
    out = run_fake(CARRAY)
    assert out["values"] == [[10.0 * i + j for j in range(4)] for i in range(3)]
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in out["error"], out
    assert "carray(" in out["_stderr"]


CAPTURE = """
from numba.cuda.cudadrv.driver import CudaAPIError

table = cuda.to_device(np.array([1.5, 2.5, 3.5, 4.5]))

@cuda.jit(device=True)
def lookup(i):
    return table[i]

@cuda.jit
def gather(out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = lookup(out.size - 1 - i) * 2

out = cuda.device_array(4)
gather[1, 4](out)
values = out.copy_to_host().tolist()
print(json.dumps({"values": values}))
"""


def test_a_kernel_reads_a_device_array_it_captures_from_its_globals() -> None:
    """A captured device array is read in place (it once deadlocked: the interpreter copied it
    to the host through the driver while the driver ran the kernel)."""
    out = run_fake(CAPTURE)
    assert out["values"] == [9.0, 7.0, 5.0, 3.0]


MANAGED = """
from numba.cuda.cudadrv.driver import CudaAPIError, driver, binding

a = cuda.managed_array(16, dtype=np.float64)
a[:] = np.arange(16.0)  # the host writes managed memory in place

@cuda.jit
def double(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] *= 2

double[1, 16](a)
cuda.synchronize()
values = np.asarray(a).tolist()
attr = binding.CUpointer_attribute.CU_POINTER_ATTRIBUTE_IS_MANAGED
managed = int(driver.cuPointerGetAttribute(attr, a.device_ctypes_pointer.value))
plain = int(driver.cuPointerGetAttribute(attr, cuda.device_array(4).device_ctypes_pointer.value))
try:
    driver.cuMemAllocManaged(64, 3)  # both attach flags: invalid
    error = ""
except CudaAPIError as exc:
    error = str(exc)
print(json.dumps({"values": values, "managed": managed, "plain": plain, "error": error}))
"""


def test_managed_memory_is_shared_by_the_host_and_kernels() -> None:
    """``cuda.managed_array``: the host and a kernel use the same memory, the pointer reads as
    managed, and flags CUDA refuses are refused."""
    out = run_fake(MANAGED)
    assert out["values"] == [2.0 * i for i in range(16)]
    assert (out["managed"], out["plain"]) == (1, 0)
    assert "CUDA_ERROR_INVALID_VALUE" in out["error"], out


PROPERTIES = """
table = np.arange(32, dtype=np.int64)

@cuda.jit("void(float32[::1], int64)", launch_bounds=(128,))
def bounded(x, n):
    sm = cuda.shared.array(100, dtype=np.float32)
    C = cuda.const.array_like(table)
    scratch = cuda.local.array(50, dtype=np.float64)
    for j in range(n):
        scratch[j] = x[j]
    i = cuda.threadIdx.x
    if i < 100:
        sm[i] = x[i]
    cuda.syncthreads()
    x[i] = sm[(i + n) % 100] + C[n] + scratch[n]

got = {
    "threads": bounded.get_max_threads_per_block(),
    "shared": bounded.get_shared_mem_per_block(),
    "const": bounded.get_const_mem_size(),
    "local": bounded.get_local_mem_per_thread(),
    "regs": bounded.get_regs_per_thread(),
}
x = cuda.to_device(np.zeros(256, dtype=np.float32))
bounded[1, 128](x, 3)
cuda.synchronize()
try:
    bounded[1, 129](x, 3)  # one thread more than its launch bounds
    cuda.synchronize()
    got["error"] = ""
except Exception as exc:  # cuda.core's CUDAError: the launch itself fails
    got["error"] = str(exc)
print(json.dumps(got))
"""


def test_kernel_properties_are_read_from_the_cubin_and_launch_bounds_hold() -> None:
    """``get_max_threads_per_block`` & co. answer what the linked cubin records (numba-cuda
    links it with the CUDA toolkit on the host), and a block past the launch bounds fails to
    launch with CUDA_ERROR_INVALID_VALUE, as on a GPU."""
    out = run_fake(PROPERTIES)
    assert out["threads"] == 128
    assert out["shared"] == 100 * 4
    assert out["const"] >= 32 * 8  # the table
    assert out["local"] >= 50 * 8
    assert out["regs"] > 0
    assert "CUDA_ERROR_INVALID_VALUE" in out["error"], out


NRT = """
from numba.cuda.memory_management.nrt import rtsys

try:
    rtsys.allocate()  # reads memsys_size, then launches memsys.cu's NRT_MemSys_set
    error = ""
except Exception as exc:
    error = str(exc)
size = int(rtsys._memsys.size) if rtsys._memsys is not None else None
d = cuda.to_device(np.arange(4.0))
d[:] = 2.0  # the process goes on: the gap was not a fault
print(json.dumps({"memsys_size": size, "error": error, "after": d.copy_to_host().tolist()}))
"""


def test_module_globals_come_from_the_cubin_and_a_cuda_c_kernel_is_a_loud_gap() -> None:
    """NRT's ``memsys_size`` (a ``__device__`` global of memsys.cu, 40 bytes of struct) reads
    its initial value from the cubin; memsys.cu's kernels have no Python body: their launch
    fails with CUDA_ERROR_NOT_SUPPORTED, named on stderr, and nothing is sticky."""
    out = run_fake(NRT, env={"NUMBA_CUDA_ENABLE_NRT": "1"})
    assert out["memsys_size"] == 40
    assert "CUDA_ERROR_NOT_SUPPORTED" in out["error"], out
    assert "NRT_MemSys_set is not one numba-cuda compiled from Python" in out["_stderr"]
    assert out["after"] == [2.0] * 4


EXIT = """
import weakref

class Keep:
    pass

keep = Keep()
weakref.finalize(keep, lambda: None)  # weakref's exit hook registered before the driver's

import numpy as np
import smartarray
from numba import cuda

def add_one(a):
    i = cuda.grid(1)
    if i < a.size:
        a[i] += 1

kernels = []
d = cuda.to_device(np.zeros(4))
for n in range(12):  # modules numba-cuda unloads at exit, more than it defers
    k = cuda.jit("void(float64[::1])")(add_one)
    k[1, 4](d)
    kernels.append(k)
print(d.copy_to_host().tolist())
"""


def test_a_program_that_ends_with_kernels_loaded_exits_without_driver_errors() -> None:
    """numba-cuda unloads its modules at exit from weakref finalizers; when weakref's exit
    hook was registered first (as under pytest) they ran after the fake driver closed:
    ``CUDA_ERROR_DEINITIALIZED`` tracebacks at the end of every numba-cuda test file."""
    env = real_target_env()
    with_checkout(env)
    env["SMARTARRAY_FAKE_GPU"] = "1"
    done = _child(["-c", EXIT], env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("[12.0, 12.0, 12.0, 12.0]")
    assert "DEINITIALIZED" not in done.stderr, done.stderr
