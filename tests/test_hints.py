"""In / Out / InOut: construction, typing and what they delegate to."""

from __future__ import annotations

import numba
import numpy as np
import pytest
from numba.cuda.args import ArgHint

import smartarray as sa


@pytest.mark.parametrize("hint", [sa.In, sa.Out, sa.InOut])
def test_hints_are_numba_arg_hints_with_a_repr(hint):
    a = sa.SmartArray(np.zeros(2))
    h = hint(a)
    assert isinstance(h, ArgHint)
    assert repr(h).startswith(f"{hint.__name__}(SmartArray(")
    assert h.value is a


def test_hint_of_a_hint_is_refused():
    with pytest.raises(TypeError, match="not another intent wrapper"):
        sa.In(sa.Out(sa.SmartArray(np.zeros(2))))


def test_types_of_hints():
    a = sa.SmartArray(np.zeros((3, 2)))
    assert numba.typeof(sa.In(a)).mutable is False
    assert numba.typeof(sa.Out(a)) == numba.typeof(a)
    assert numba.typeof(sa.InOut(a)) == numba.typeof(a)
    plain = np.zeros(4, dtype=np.int32)
    assert sa.In(plain)._numba_type_ == numba.typeof(plain)


def test_bare_smartarray_is_inout():
    assert sa.SmartArray(np.zeros(1)).intent == sa.InOut.intent == "inout"
    assert (sa.In.intent, sa.Out.intent) == ("in", "out")
