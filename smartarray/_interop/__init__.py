"""Interoperability: device objects of other libraries in and out, coherence kept.

- :mod:`.exports`: the CUDA Array Interface, ``cuda_view`` and DLPack going out;
- :mod:`.dlpack`: DLPack export of the device copy to CUDA consumers;
- :mod:`.foreign`: device objects coming in (construction, ``copy``, numba.cuda's primitives);
- :mod:`.device_objects`: what the others share about device memory (address, layout, order).

Below the array layer, whose class statement binds these functions: they test ``isinstance``
against SmartArray's base class, construct through :mod:`smartarray._engine.array_classes` and
read a SmartArray's buffer, bytes and hand-outs through :mod:`smartarray._engine.interface`
(never its private slots: ``tests/structure/test_layers.py``).
Imports nothing itself; ``__all__`` lists the modules the rest of the package may import
(``tests/structure/test_layers.py``).
"""

__all__ = ["dlpack", "exports", "foreign"]
