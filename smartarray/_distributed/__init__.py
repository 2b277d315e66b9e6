"""One array over several devices or processes.

- :mod:`.partition`: a SmartArray split by rows over the process's devices, with halos
  (:func:`smartarray.decompose`);
- :mod:`.mpi_halos`: MPI transfers and halo exchange (the code behind :mod:`smartarray.mpi`).

Imports nothing itself; ``__all__`` lists the modules the rest of the package may import
(``tests/structure/test_layers.py``).
"""

__all__ = ["mpi_halos", "partition"]
