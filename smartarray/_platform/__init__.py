"""The platform: what the process runs on, read once, for every layer above.

- :mod:`.environment`: the environment variables smartarray reads, parsed strictly;
- :mod:`.cuda_simulator`: every gap of the numba CUDA simulator, filled in one place, and
  whether it is the target;
- :mod:`.sessions`: the test double's session, when one is on (all production code knows of it);
- :mod:`.no_device`: a clear error where device work is attempted without a CUDA target.

Like every private package of smartarray, this ``__init__`` imports nothing: importing one
module loads only what that module needs (the fake driver and strict mode must be chosen before
numba.cuda loads, and :mod:`.cuda_simulator` imports it). ``__all__`` lists the modules the
rest of the package may import; ``tests/structure/test_layers.py`` checks it.
"""

__all__ = ["cuda_simulator", "environment", "no_device", "sessions"]
