"""``smartarray.jit`` and ``smartarray.njit``: Numba's decorators, with inferred ``In`` hints.

:func:`jit` is a drop-in for ``numba.cuda.jit`` and :func:`njit` for ``numba.njit``. Each
returns Numba's own dispatcher inside a ``wrapt.ObjectProxy``: ``.overloads``,
``.specialize``, ``inspect_types``, eager signatures and everything else reach Numba's
dispatcher unchanged. Only a launch (``kernel[griddim, blockdim, stream, sharedmem](...)``,
``kernel.forall(n)(...)``) and an njit call are intercepted: each positional (njit: and keyword)
argument whose parameter the function's code never writes (:mod:`smartarray._access`) is passed
as read only:

- a :class:`~smartarray.SmartArray` as :class:`smartarray.In` (nothing is recorded as written,
  so the other copy stays current), with the array's own Numba type, so the same compiled
  version serves hinted and bare arguments;
- a plain ``numpy.ndarray`` passed to a kernel as ``numba.cuda.In`` (numba copies it in, not
  back out); on a stream other than the default one every bare ndarray is passed in
  smartarray's ``In`` or ``InOut`` instead (numba-cuda 0.30 cannot move one there: NumPy's
  ``__dlpack__`` refuses the stream), which moves it on that stream, counted;
- an explicit ``In`` / ``Out`` / ``InOut`` (smartarray's or numba's), a device array, a scalar
  or anything else as it is: an explicit hint always wins.

The analysis runs on a function's first launch or call, and again only when a global, closure
cell or attribute it resolved (a helper) was rebound since (the result then keeps the earlier
writes too: Numba may still run code compiled with the old helper); a launch then costs a few
attribute reads, one identity check per binding the analysis resolved and one ``isinstance``
per parameter proven read only.
"""

from __future__ import annotations

import inspect
from typing import Any

import numba
import numpy as np
import wrapt
from numba import cuda
from numba.cuda import args as _numba_args

from . import _access
from ._memory import streams as _streams
from ._platform import cuda_simulator as _sim
from .array import SmartArray
from .hints import In, InOut, maybe_page_locked

__all__ = ["explain", "jit", "njit"]

_NEVER = _access.NEVER
_CONFIGS_KEPT = 64  # launch configurations a kernel keeps a wrapper for (numba-cuda: 128)


class _InferredIn(In):
    """``In`` for a parameter the code never writes: typed as the bare array would be.

    :class:`smartarray.In` types its array read only, which makes Numba compile a version of
    its own (and refuse eager signatures with writable arrays); the analysis has already
    proven the parameter is not written, so the plain type serves.
    """

    _typed_as_bare = True
    _smart = True  # (made by _inferred_in without __init__: the value is always a SmartArray)


_new_hint = _InferredIn.__new__


def _inferred_in(a: SmartArray) -> _InferredIn:
    """``_InferredIn(a)`` without the constructor's checks (``a`` is a SmartArray): a launch
    makes one per read-only argument."""
    hint = _new_hint(_InferredIn)
    hint.value = a
    hint._numba_type_ = a._numba_type_
    return hint


def _plan(py_func: Any, cuda: bool) -> tuple[tuple[int, str, float], ...]:
    """``(index, name, threshold)`` of each parameter that is read only for some arrays."""
    return _plan_and_deps(py_func, cuda)[0]


def _plan_and_deps(py_func: Any, cuda: bool) -> tuple[Any, _access.Deps]:
    """:func:`_plan`, and the bindings it depends on (rebinding one makes it stale)."""
    access, deps = _access.analysis(py_func, cuda)
    plan = tuple((i, p.name, p.threshold) for i, p in enumerate(access.params) if p.threshold >= 1)
    return plan, deps


def _read_only(a: Any, thr: float) -> bool:
    return thr == _NEVER or (1 <= a.ndim <= thr and a.dtype.fields is None)


# What an argument's class is to the hints: 1 SmartArray, 2 ndarray, 0 anything else (explicit
# hints included). Cached per class: ``isinstance`` against numba's ABC-based ``ArgHint``
# hierarchy costs a few hundred nanoseconds, a dict look-up a few tens.
_KINDS: dict[type, int] = {}


def _kind(cls: type) -> int:
    kind = 1 if issubclass(cls, SmartArray) else 2 if issubclass(cls, np.ndarray) else 0
    _KINDS[cls] = kind
    return kind


def _hint(a: Any, thr: float, kernel: bool) -> Any:
    """``a`` as a read-only argument, or ``None`` where it stays as it is."""
    cls = type(a)
    kind = _KINDS.get(cls)
    if kind is None:
        kind = _kind(cls)
    if kind == 1:
        if thr != _NEVER and not _read_only(a, thr):
            return None
        if not kernel and a._njit_fast is not None:
            # current on the host only: the bare fast path moves nothing and records nothing
            return None
        return _inferred_in(a)
    if kind == 2 and kernel and a.ndim > 0 and _read_only(a, thr) and not _maybe_page_locked(a):
        return _numba_args.In(a)
    return None


def _maybe_page_locked(a: np.ndarray) -> bool:
    """Whether ``a``'s memory may be page-locked (:func:`smartarray.hints.maybe_page_locked`).

    numba's ``In`` uploads with ``cuMemcpyHtoDAsync`` even on stream 0: from page-locked
    memory the DMA reads the host bytes when it runs, so a host write right after the launch
    would reach the kernel. Such arrays keep numba's default (``InOut``, which waits).
    """
    return maybe_page_locked(a)


def _on_stream(stream: Any) -> bool:
    """Whether a launch's ``stream`` is another than the default one."""
    return _streams.pending(stream) is not _streams.DEFAULT


def _stream_hints(plan: tuple[tuple[int, str, float], ...], args: tuple) -> tuple:
    """``args`` with each bare ndarray in smartarray's ``In`` (a parameter the code never
    writes) or ``InOut``: on a stream other than the default one numba-cuda cannot move a
    plain ndarray (it asks NumPy's ``__dlpack__`` for that stream, which NumPy refuses);
    smartarray's hints move it on the launch's stream, counted."""
    read_only = {i: thr for i, _name, thr in plan}
    out = list(args)
    for i, a in enumerate(args):
        if _KINDS.get(type(a)) == 2 or (type(a) not in _KINDS and _kind(type(a)) == 2):
            thr = read_only.get(i)
            hinted = thr is not None and a.ndim > 0 and _read_only(a, thr)
            out[i] = In(a) if hinted else InOut(a)
    return tuple(out)


def _hinted_args(plan: tuple[tuple[int, str, float], ...], args: tuple, kernel: bool) -> tuple:
    out = None
    n = len(args)
    for i, _name, thr in plan:
        if i >= n:
            break
        new = _hint(args[i], thr, kernel)
        if new is not None:
            if out is None:
                out = list(args)
            out[i] = new
    return args if out is None else tuple(out)


class _Proxy(wrapt.ObjectProxy):
    """Common part of the kernel and njit proxies.

    Each proxy gets a class of its own (:func:`_new`) holding the dispatcher, the plan and the
    last launch as *class* attributes: an attribute read on a ``wrapt`` proxy instance goes
    through its ``__getattr__`` hook (a few hundred nanoseconds), a class attribute read
    through ``type(self)`` costs tens.
    """

    _cuda = False
    _inner: Any = None  # numba's dispatcher
    _plan: Any = None  # ((index, name, threshold), ...), computed on first use
    _deps: Any = None  # the bindings the plan depends on (_access.Deps)
    _last: Any = None  # the last _Launch (kernels)
    _configs: Any = None  # launch configuration -> its _Launch (kernels, real target only)

    @property
    def _smartarray_access(self) -> _access.Access:
        """The access analysis of the function (what :func:`explain` prints)."""
        return _access.analyse(self.__wrapped__.py_func, cuda=self._cuda)

    def __repr__(self) -> str:
        return f"<smartarray.{type(self).__name__[1:].lower()} of {self.__wrapped__!r}>"


def _new(base: type, dispatcher: Any, plan: Any = None, deps: Any = None) -> Any:
    attrs = {"_inner": dispatcher, "_plan": plan, "_deps": deps, "_last": None}
    if not _sim.SIMULATOR:
        # numba-cuda's ``configure`` is cached and pure: one launch wrapper per configuration
        # skips it. (The simulator's kernel configures itself in place: not cached there.)
        attrs["_configs"] = {}
    cls = type(base.__name__, (base,), attrs)
    cls.__qualname__ = base.__qualname__
    return cls(dispatcher)


def _get_plan(cls: Any) -> Any:
    """The class's plan, (re)computed when missing or when a binding it depends on changed.

    Plans only grow more conservative (each analysis is merged with the earlier ones), so a
    racing thread is safe as long as it never uses a plan older than the bindings it checked:
    the plan is stored before its bindings, and read after them.
    """
    deps = cls._deps
    if deps is None or not deps.current():
        plan, deps = _plan_and_deps(cls._inner.py_func, cls._cuda)
        cls._plan = plan
        cls._deps = deps
    return cls._plan


class _Launch:
    """A configured launch (numba's ``_LaunchConfiguration``, or the simulator's kernel).

    Calls hint the arguments, then the launch; every other attribute (``griddim``,
    ``pre_launch_callbacks``, ...) is the configured launch's. A plain class, not a proxy:
    creating a proxy costs more than the rest of the launch's overhead.
    """

    __slots__ = ("_deps", "_inner", "_on_stream", "_owner", "_plan")

    def __init__(self, inner: Any, owner: Any, stream: Any = 0) -> None:
        self._inner = inner
        self._owner = owner  # the proxy's class: its plan, and what the plan depends on
        # (read from the configuration: the simulator's configured kernel keeps no stream)
        self._on_stream = _on_stream(stream)
        self._refresh()

    def _refresh(self) -> None:
        owner = self._owner
        _get_plan(owner)
        deps = owner._deps  # read before the plan, stored after it (see _get_plan)
        self._plan = owner._plan
        self._deps = deps

    def __call__(self, *args: Any) -> Any:
        if not self._deps.current():  # a helper was rebound since: analyse again
            self._refresh()
        plan = self._plan
        if self._on_stream:
            args = _stream_hints(plan, args)
        if plan:
            out = None
            n = len(args)
            for i, _name, thr in plan:
                if i >= n:
                    break
                a = args[i]
                kind = _KINDS.get(type(a))
                if kind is None:
                    kind = _kind(type(a))
                if kind:
                    if kind == 1 and thr == _NEVER:  # the common case, inlined
                        new = _new_hint(_InferredIn)
                        new.value = a
                        new._numba_type_ = a._numba_type_
                    else:
                        new = _hint(a, thr, True)
                    if new is not None:
                        if out is None:
                            out = list(args)
                        out[i] = new
            if out is not None:
                return self._inner(*out)
        return self._inner(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __repr__(self) -> str:
        return f"<smartarray.jit launch of {self._inner!r}>"


class _Kernel(_Proxy):
    """A ``numba.cuda.jit`` kernel whose launches pass never-written arrays as ``In``."""

    _cuda = True

    def __getitem__(self, config: Any) -> _Launch:
        cls = type(self)
        configs = cls._configs
        if configs is not None:
            try:
                launch = configs.get(config)
            except TypeError:  # an unhashable part (a stream object): not cached
                configs = launch = None
            if launch is not None:
                return launch
        inner = cls._inner[config]
        stream = config[2] if isinstance(config, tuple) and len(config) > 2 else 0
        # The simulator returns the kernel itself, configured: the same one again needs no
        # new wrapper.
        last = cls._last
        if last is not None and last._inner is inner:
            last._on_stream = _on_stream(stream)
            return last
        launch = cls._last = _Launch(inner, cls, stream)
        if configs is not None and len(configs) < _CONFIGS_KEPT:
            configs[config] = launch
        return launch

    def configure(self, *args: Any, **kws: Any) -> _Launch:
        """numba's ``configure``, with inferred hints (see :func:`jit`)."""
        stream = args[2] if len(args) > 2 else kws.get("stream", 0)
        return _Launch(self.__wrapped__.configure(*args, **kws), type(self), stream)

    def forall(self, *args: Any, **kws: Any) -> _Launch:
        """numba's ``forall``, with inferred hints (see :func:`jit`)."""
        stream = args[2] if len(args) > 2 else kws.get("stream", 0)
        return _Launch(self.__wrapped__.forall(*args, **kws), type(self), stream)

    def specialize(self, *args: Any) -> Any:
        """numba's ``specialize`` (for the hinted arguments), still inferring hints."""
        cls = type(self)
        plan = _get_plan(cls)
        if plan:
            args = _hinted_args(plan, args, True)
        return _new(_Kernel, self.__wrapped__.specialize(*args), plan, cls._deps)


class _Njit(_Proxy):
    """A ``numba.njit`` dispatcher whose calls pass never-written SmartArrays as ``In``."""

    def __call__(self, *args: Any, **kws: Any) -> Any:
        cls = type(self)
        deps = cls._deps
        plan = _get_plan(cls) if deps is None or not deps.current() else cls._plan
        if plan:
            args = _hinted_args(plan, args, False)
            if kws:
                for _i, name, thr in plan:
                    if name in kws:
                        new = _hint(kws[name], thr, False)
                        if new is not None:
                            kws[name] = new
        return cls._inner(*args, **kws)


def _decorate(make: Any, proxy: type, func_or_sig: Any, kws: dict[str, Any]) -> Any:
    if inspect.isfunction(func_or_sig):
        return _new(proxy, make(func_or_sig, **kws))
    decorator = make(func_or_sig, **kws) if func_or_sig is not None else make(**kws)

    def wrap(fn: Any) -> Any:
        return _new(proxy, decorator(fn))

    return wrap


def jit(func_or_sig: Any = None, **kws: Any) -> Any:
    """``numba.cuda.jit`` that passes arrays the kernel never writes as read only.

    Same arguments and results as ``numba.cuda.jit`` (signatures, ``device=True``,
    ``debug``, ``fastmath``, ...): the kernel is Numba's dispatcher in a transparent proxy.
    On every launch, a SmartArray argument whose parameter the kernel's code never writes is
    passed as :class:`smartarray.In` (its other copy stays current) and a plain ndarray as
    ``numba.cuda.In`` (not copied back); an explicit ``In`` / ``Out`` / ``InOut`` always
    wins. Device functions (``device=True``) are returned as Numba makes them: kernels that
    call them analyse their code.

    Parameters
    ----------
    func_or_sig : function, signature or list of signatures, optional
        As for ``numba.cuda.jit``.
    **kws
        Passed to ``numba.cuda.jit``.

    Returns
    -------
    dispatcher or decorator
        As ``numba.cuda.jit`` returns.

    Examples
    --------
    >>> import numpy as np, smartarray as sa
    >>> from numba import cuda
    >>> @sa.jit
    ... def scale(out, x):
    ...     i = cuda.grid(1)
    ...     if i < out.size:
    ...         out[i] = 2.0 * x[i]
    >>> x, out = sa.SmartArray(np.arange(4.0)), sa.SmartArray(np.zeros(4))
    >>> scale[1, 4](out, x)
    >>> x.is_valid('host'), out.is_valid('host')     # x was only read: still current
    (True, False)
    """
    if kws.get("device"):
        return cuda.jit(func_or_sig, **kws)
    return _decorate(cuda.jit, _Kernel, func_or_sig, kws)


def njit(func_or_sig: Any = None, **kws: Any) -> Any:
    """``numba.njit`` that passes SmartArrays the function never writes as read only.

    Same arguments and results as ``numba.njit``: the function is Numba's dispatcher in a
    transparent proxy. On every call, a SmartArray argument whose parameter the function's
    code never writes is passed as :class:`smartarray.In`: its host copy is made current and
    nothing is recorded as written, so its device copy stays current.

    Parameters
    ----------
    func_or_sig : function, signature or list of signatures, optional
        As for ``numba.njit``.
    **kws
        Passed to ``numba.njit``.

    Returns
    -------
    dispatcher or decorator
        As ``numba.njit`` returns.

    Examples
    --------
    >>> import numpy as np, smartarray as sa
    >>> @sa.njit
    ... def total(x):
    ...     return x.sum()
    >>> total(sa.SmartArray(np.arange(4.0)))
    6.0
    """
    return _decorate(numba.njit, _Njit, func_or_sig, kws)


def explain(func: Any) -> str:
    """What :func:`jit` / :func:`njit` infer for each parameter of ``func``, and why.

    Parameters
    ----------
    func : function or dispatcher
        A kernel or function from :func:`jit`, :func:`njit`, ``numba.cuda.jit`` or
        ``numba.njit``, or a plain Python function.

    Returns
    -------
    str
        One line per parameter: ``read only``, or the first way it may be written
        (``written at line 12: `out[i] = ...```).

    Raises
    ------
    TypeError
        If ``func`` is neither a Python function nor a Numba dispatcher.

    Examples
    --------
    >>> import smartarray as sa
    >>> def axpy(out, a, x):
    ...     for i in range(out.size):
    ...         out[i] += a * x[i]
    >>> print(sa.explain(axpy))
    axpy:
      out: written at line 3: `out[i] += a * x[i]`
      a: read only
      x: read only
    """
    try:
        return _access.analyse(func).explain()
    except TypeError:
        raise TypeError(
            f"explain() takes a function or a Numba dispatcher (func), not {type(func).__name__}"
        ) from None
