"""What users see of transfers: the records, their reports and pictures, performance warnings.

- :mod:`.transfer_records`: the records a trace and ``stats()`` hand out (re-exported by
  :mod:`smartarray.stats`);
- :mod:`.report`: their text summary; :mod:`.plot`: their timeline pictures (matplotlib);
- :mod:`.frames`: the user's source line behind a transfer;
- :mod:`.performance`: warnings for patterns that move far more bytes than needed.

Below :mod:`smartarray.stats` and :mod:`smartarray.guard`, which build on it. Imports nothing
itself; ``__all__`` lists the modules the rest of the package may import
(``tests/structure/test_layers.py``).
"""

__all__ = ["frames", "performance", "plot", "transfer_records"]
