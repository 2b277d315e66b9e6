"""The coherence engine: one base buffer's copies, writes, stream order and residency.

What the layers above may use (``__all__``):

- :mod:`.buffer`: :class:`~smartarray._engine.buffer.Buffer`, the state every view of one
  SmartArray shares, changed only through its named operations (``acquire``/``release``,
  ``adopt_host``, ``record_write``, ...), and the location and intent names;
- :mod:`.launch`: one object per kernel launch, in which the array layer's kernel-argument
  functions (``smartarray/_array/arguments.py``) gather a launch's arguments and whose callback
  records their writes;
- :mod:`.residency`: the device-memory budget's bookkeeping and eviction, and the per-view
  launch cache (``LaunchCache``, one object in a view's one slot, which only the engine makes,
  opens and closes);
- :mod:`.budget`: the budget as users set and see it;
- :mod:`.auto_pin`: the automatic page-lock policy and its page-locked budget
  (``set_pinned_budget``), which the copies consult before they run;
- :mod:`.array_classes`: where the array layer registers the classes the code below it makes;
- :mod:`.interface`: what the layers above, other than the array's own, read of a view's
  engine side (its buffer, its bytes, its hand-outs), never its private slots;
- :mod:`.prefetch`: copies started early on a stream (``SmartArray.prefetch``); host
  accesses wait for a download so started (``Buffer.arrive``).

The engine's own rooms, used by nothing above it: :mod:`.device_work` (which stream holds a
buffer's work), :mod:`.held` (host arrays the user holds), :mod:`.deferred_lock`.

The engine never imports the array layer (it names SmartArray's base class, or the protocol).
Imports nothing itself (``tests/structure/test_layers.py`` checks the list and the layers).
"""

__all__ = [
    "array_classes",
    "auto_pin",
    "budget",
    "buffer",
    "interface",
    "launch",
    "prefetch",
    "residency",
]
