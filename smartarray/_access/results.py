"""The analysis's answer: per parameter, every way the function may write it, and why.

Owns the report types (:class:`Write`, :class:`ParamAccess`, :class:`Access`, with their
``describe`` / ``explain`` text for :func:`smartarray.explain`) and the two constants a level or
a threshold is compared with (:data:`NEG`, :data:`NEVER`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: The level of a value whose rank is unknown: it may be the whole array.
NEG = -(10**6)
#: The threshold of a parameter that is never written.
NEVER = float("inf")


@dataclass(frozen=True)
class Write:
    """One way a function may write a parameter's array.

    Attributes
    ----------
    level : int
        Dimensions removed by indexing before the write; it writes the array when
        ``level < ndim`` (:data:`NEG`: always).
    line : int
        Source line of the write (in ``filename``).
    filename : str
        The file of the function that writes.
    reason : str
        What happens there, in words.
    """

    level: int
    line: int
    filename: str
    reason: str
    returned: bool = False

    def describe(self) -> str:
        """``"written at line 12: `out[i] = x`"``-style text."""
        return self.reason


@dataclass
class ParamAccess:
    """What a function does with one parameter.

    Attributes
    ----------
    name : str
        The parameter's name.
    writes : list of Write
        Every way it may be written, least level first (empty: read only).
    """

    name: str
    writes: list[Write] = field(default_factory=list)

    @property
    def threshold(self) -> float:
        """The least level of any write (``inf``: never written)."""
        return self.writes[0].level if self.writes else NEVER

    def read_only_for(self, ndim: int, record: bool = False) -> bool:
        """Whether an array of ``ndim`` dimensions (record dtype: ``record``) is only read."""
        thr = self.threshold
        if thr == NEVER:
            return True
        return not record and 1 <= ndim <= thr

    def describe(self) -> str:
        """One line: what was inferred and why."""
        thr = self.threshold
        if thr == NEVER:
            return "read only"
        first = self.writes[0]
        if thr < 1:
            return first.reason
        plural = "s" if thr > 1 else ""
        return (
            f"read only for arrays of 1 to {thr} dimension{plural} without record fields; "
            f"with more dimensions: {first.reason}"
        )


@dataclass
class Access:
    """The analysis of one function: one :class:`ParamAccess` per parameter.

    Attributes
    ----------
    name : str
        The function's qualified name.
    params : list of ParamAccess
        In parameter order.
    returns : dict
        Parameter index to the least level of any alias of it the function returns.
    """

    name: str
    params: list[ParamAccess]
    returns: dict[int, int] = field(default_factory=dict)

    def explain(self) -> str:
        """Per parameter, what was inferred and why (one line each)."""
        lines = [f"{self.name}:"]
        lines += [f"  {p.name}: {p.describe()}" for p in self.params]
        return "\n".join(lines)
