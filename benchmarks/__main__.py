"""The benchmark suite of a source checkout: ``python -m benchmarks [--quick] [--json PATH]
[--markdown]``, run from the checkout's root.

The same run as ``python -m smartarray bench`` (the command picks the CUDA target first: a
GPU, else the simulator; ``SMARTARRAY_FAKE_GPU=1`` for the fake driver): every workload of
:mod:`workloads` under every strategy of :mod:`strategies`, then the micro-benchmarks
(``bench_*.py``, each also runnable as a script). See ``suite.py`` for the JSON layout.
"""

from __future__ import annotations

import sys

from smartarray.__main__ import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
