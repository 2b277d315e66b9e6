"""Memory and streams: the layer under the engine, behind the public :mod:`smartarray.memory`.

- :mod:`.checks`: argument checks of the memory primitives (shared with SmartArray), run before
  anything moves;
- :mod:`.counted`: numba's device objects re-classed so that their copies are counted;
- :mod:`.pinning`: the registry of page-locked and mapped host memory;
- :mod:`.byte_ranges`: byte-range copies and device views of a flat buffer;
- :mod:`.streams`: streams as the engine sees them (identity, host waits, cross-stream order);
- :mod:`.devices`: which device a copy lives on, contexts, peer access.

Imports nothing itself; ``__all__`` lists the modules the rest of the package may import
(``tests/structure/test_layers.py``).
"""

__all__ = ["byte_ranges", "checks", "counted", "devices", "pinning", "streams"]
