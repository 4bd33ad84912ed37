"""Critical participation (CP): how much of the window an activity held everything up.

SnailTrail's metric. Every path through the PAG from a start vertex to an end vertex
is a candidate critical path: it spans the whole window, so shortening any activity on
it could have shortened the window's work. With ``N`` such paths and ``C(a)`` of them
through activity ``a`` (weight ``w_a``, window length ``T``)::

    CP(a) = C(a) * w_a / (N * T)

``C(a) = fwd(src) * bwd(dst)``: the paths from the sources to ``a``'s start times the
paths from its end to the sinks, one pass each in the PAG's vertex order (a topological
order), so nothing is ever enumerated. Each counted path's weights add up to ``T``, so
over a window with ``N > 0`` the CPs sum to 1. With ``N = 0`` (every path is cut, e.g. by
a wait whose message came from an earlier window) every CP is 0 and ``paths`` says so.

**Numbers.** Path counts grow exponentially with the messages in a window (every receipt
adds the sender's paths to the receiver's): ~1,300 bits for a 20,000-event second over 3
workers, 3,400 for 53,000 events. Counts are exact Python ints, which are only ever
*added* here; CP is then formed from each vertex's count cut to its top 64 bits and a
power of two, so there is no big-number product per edge and no float overflow, and the
result is within ~1e-15 relative of the exact quotient. Chosen by measurement
(``benchmarks/bench_snailtrail.py``, figures in ``benchmarks/README.md``): for 20,000
events this stage takes ~18 ms of a ~90 ms analysis; exact ``fwd * bwd`` products with an
exact division cost 1.3x that, 2.5x at 3,400 bits (multiplication grows faster than
addition); counting in rescaled floats (mantissa, exponent) is 1.5x faster: ~6 ms saved.
Exact counts win for now: ``N`` is exact and reported, path counts are checked exactly
against brute force, and no scaling logic can be subtly wrong. Their cost grows with
edges x bits of ``N``, so for much busier windows the float scheme (kept in the
benchmark) is the one to switch to.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from analysis.pag import PAG


@dataclass(frozen=True)
class PathCounts:
    """``fwd[v]``: start-to-``v`` paths; ``bwd[v]``: ``v``-to-end paths; ``paths``: N."""

    fwd: list[int]
    bwd: list[int]
    paths: int


@dataclass(frozen=True)
class Critical:
    """The CP of every activity of ``pag``: ``cp[i]`` is that of ``pag.activities[i]``.

    ``paths`` is ``N``, exact; when it is 0 there is no start-to-end path and every CP
    is 0 (``has_paths`` is False), which is a finding, not an error.
    """

    pag: PAG
    cp: tuple[float, ...]
    paths: int

    @property
    def has_paths(self) -> bool:
        """Whether any path spans the window (otherwise every CP is 0)."""
        return self.paths > 0


def path_counts(pag: PAG) -> PathCounts:
    """Forward and backward path counts, exact, one pass each over the edges.

    Edges sorted by source are a valid order for the forward pass (every edge into a
    vertex starts at a lower-numbered one, so it comes first), edges sorted by target,
    highest first, for the backward pass.
    """
    n = len(pag.times)
    edges = sorted((a.src, a.dst) for a in pag.activities)
    fwd = [0] * n
    for s in pag.sources:
        fwd[s] = 1
    for s, d in edges:
        f = fwd[s]
        if f:
            fwd[d] += f
    edges.sort(key=_target, reverse=True)
    bwd = [0] * n
    for s in pag.sinks:
        bwd[s] = 1
    for s, d in edges:
        b = bwd[d]
        if b:
            bwd[s] += b
    return PathCounts(fwd, bwd, sum(fwd[s] for s in pag.sinks))


def critical_participation(pag: PAG) -> Critical:
    """The CP of every activity of ``pag`` (see the module's docstring for the numbers)."""
    counts = path_counts(pag)
    n = counts.paths
    if n == 0:
        return Critical(pag, (0.0,) * len(pag.activities), 0)
    fm, fe = _split_all(counts.fwd)
    bm, be = _split_all(counts.bwd)
    nm, ne = _split(n)
    scale = 1.0 / (nm * pag.length)
    ldexp = math.ldexp
    cp = tuple(
        ldexp(fm[a.src] * bm[a.dst] * (a.end - a.start) * scale, fe[a.src] + be[a.dst] - ne)
        for a in pag.activities
    )
    return Critical(pag, cp, n)


def _target(edge: tuple[int, int]) -> int:
    return edge[1]


_BITS = 64
"""Bits of a count kept as a float's integer part: beyond a float's 53, so the cut
costs nothing; small enough that two of them, a weight and a window fit a float."""


def _split(x: int) -> tuple[float, int]:
    """``x`` as ``m * 2**e`` with ``m < 2**64`` a float: no overflow, ~1e-16 relative."""
    shift = x.bit_length() - _BITS
    if shift <= 0:
        return float(x), 0
    return float(x >> shift), shift


def _split_all(xs: list[int]) -> tuple[list[float], list[int]]:
    """``_split`` of every count, inlined: it runs twice per vertex."""
    ms: list[float] = []
    es: list[int] = []
    keep = _BITS
    for x in xs:
        shift = x.bit_length() - keep
        if shift > 0:
            ms.append(float(x >> shift))
            es.append(shift)
        else:
            ms.append(float(x))
            es.append(0)
    return ms, es
