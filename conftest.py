"""Collection of the package's doctests: ``smartarray.mpi`` needs the optional ``mpi`` extra."""

import importlib.util

collect_ignore = [] if importlib.util.find_spec("mpi4py") else ["smartarray/mpi.py"]
