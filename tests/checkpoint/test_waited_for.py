"""Which vertices a checkpoint part waits for (``waited_for``): every vertex with state,
every one whose path summary is not the identity, and every one with no output edge;
a stateless vertex that feeds one of those (through stateless vertices) is not waited
for, since that one passing an epoch implies it has.

Checked on a real plan (the table API's word count, and a row pipeline ending in a
user's function) and, with hypothesis, on random graphs: the three rules, that every
vertex left out reaches one waited for, and that every vertex the rules allow to be
left out is (the saving is real). Mutation checks: leaving out a stateless vertex with
no output edge, leaving out every stateless vertex, and leaving out none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import operators  # noqa: F401 - registers the stream methods
from operators.table import col, count, table_input
from tests.conftest import MUTANT_SEARCH
from timely import Dataflow
from timely.vertex import Vertex
from timely.worker import snapshots as snapshots_module
from timely.worker.snapshots import waited_for


class Stateless(Vertex):
    """A vertex with ``snapshot_at`` as :class:`Vertex` has it."""


class Stateful(Vertex):
    def snapshot_at(self, epoch: int) -> dict[str, Any] | None:
        return {"kind": "test"}


def names(flow: Dataflow) -> list[str]:
    plan = flow.build()
    vertices = [spec.factory() for spec in plan.vertices]
    return [plan.vertices[v].name for v in waited_for(plan, vertices)]


def test_a_table_word_count_waits_for_its_state_and_its_sink() -> None:
    flow = Dataflow("wc")
    inp = table_input(flow, pa.schema([("line", pa.string())]))
    (
        inp.table.select(word=col("line").str.split())
        .explode("word")
        .group_by("word")
        .running_agg(count().alias("n"))
        .subscribe(lambda e, t: None)
    )
    plan = flow.build()
    vertices = [spec.factory() for spec in plan.vertices]
    assert len(vertices) == 8
    # The running aggregate (its state) and what hands each epoch to the driver; not
    # the input, the projections, the explode, the partial counts or the gathering.
    kinds = [type(vertices[v]).__name__ for v in waited_for(plan, vertices)]
    assert kinds == ["RunningAggregate", "Gathered"], kinds


def test_a_users_function_at_the_end_is_waited_for() -> None:
    """``inspect`` with nothing after it: its effects for an epoch happen before the
    checkpoint after it commits. The same function with a vertex after it is not."""
    flow = Dataflow("ends")
    lines = flow.new_input()
    words = lines.stream.select_many(str.split)
    words.inspect(lambda w: None, name="end")
    words.inspect(lambda w: None, name="middle").running_reduce(
        lambda w: w, lambda a, b: a + b, lambda w: 1
    ).subscribe(lambda e, r: None)
    waited = names(flow)
    assert "end" in waited
    assert "middle" not in waited


# -- on random graphs ------------------------------------------------------------------


@st.composite
def graphs(draw: st.DrawFn) -> tuple[Any, list[Vertex]]:
    """A plan of up to 9 vertices with random edges (cycles too), each vertex stateful
    or not, some with a path summary."""
    n = draw(st.integers(1, 9))
    edges = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=20))
    stateful = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    summary = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    out: list[list[list[Any]]] = [[[]] for _ in range(n)]
    for src, dst in edges:
        out[src][0].append(SimpleNamespace(dst=dst))
    plan = SimpleNamespace(
        vertices=[SimpleNamespace(internal={(0, 0): "s"} if s else None) for s in summary],
        out_edges=out,
    )
    return plan, [Stateful() if s else Stateless() for s in stateful]


def reach(targets: list[set[int]], ends: set[int]) -> set[int]:
    """The vertices from which a vertex of ``ends`` is reached by output edges (``ends``
    included)."""
    out = set(ends)
    changed = True
    while changed:
        changed = False
        for v, ts in enumerate(targets):
            if v not in out and ts & out:
                out.add(v)
                changed = True
    return out


def check(rule: Callable[[Any, Sequence[Vertex]], list[int]], plan: Any, vs: list[Vertex]) -> None:
    waited = set(rule(plan, vs))
    n = len(vs)
    targets = [{e.dst for e in plan.out_edges[v][0]} for v in range(n)]
    free = {
        v
        for v in range(n)
        if isinstance(vs[v], Stateless) and plan.vertices[v].internal is None and targets[v]
    }
    # Only what is stateless, leaves time as it is and has an output edge is left out.
    assert set(range(n)) - free <= waited
    # Each vertex left out reaches one waited for, through vertices left out.
    left_out = set(range(n)) - waited
    through = [ts if v in left_out else set() for v, ts in enumerate(targets)]
    assert left_out <= reach(through, waited)
    # And every vertex that could be is left out: the fixed point from what must be waited for.
    must = set(range(n)) - free
    could = reach([ts if v in free else set() for v, ts in enumerate(targets)], must) - must
    assert left_out == could


@given(graphs())
def test_waited_for_on_random_graphs(graph: tuple[Any, list[Vertex]]) -> None:
    check(waited_for, *graph)


def ends_too(plan: Any, vs: Sequence[Vertex]) -> list[int]:
    """The mutant: a stateless vertex with no output edge is left out too."""
    return [
        v
        for v in waited_for(plan, vs)
        if not isinstance(vs[v], Stateless)
        or plan.vertices[v].internal is not None
        or plan.out_edges[v][0]
    ]


def all_stateless(plan: Any, vs: Sequence[Vertex]) -> list[int]:
    """The mutant: every stateless vertex is left out."""
    return [v for v in range(len(vs)) if not isinstance(vs[v], Stateless)]


def none_left_out(plan: Any, vs: Sequence[Vertex]) -> list[int]:
    """The mutant: every vertex waited for (safe, but it saves nothing)."""
    return list(range(len(vs)))


@pytest.mark.parametrize("mutant", [ends_too, all_stateless, none_left_out])
def test_mutation_is_caught(mutant: Callable[[Any, Sequence[Vertex]], list[int]]) -> None:
    @MUTANT_SEARCH
    @given(graphs())
    def run(graph: tuple[Any, list[Vertex]]) -> None:
        check(mutant, *graph)

    with pytest.raises(AssertionError):
        run()


def test_a_run_snapshots_only_what_it_waits_for(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A table word count with a checkpoint every epoch takes two snapshots an epoch
    (the running aggregate's, the gathering's), not eight, and its output is whole."""
    taken: list[tuple[int, int]] = []
    take = snapshots_module.Snapshots.take

    def counted(self: snapshots_module.Snapshots, v: int, epoch: int) -> None:
        taken.append((v, epoch))
        take(self, v, epoch)

    monkeypatch.setattr(snapshots_module.Snapshots, "take", counted)
    flow = Dataflow("wc")
    inp = table_input(flow, pa.schema([("line", pa.string())]))
    seen: dict[int, dict[str, int]] = {}
    (
        inp.table.select(word=col("line").str.split())
        .explode("word")
        .group_by("word")
        .running_agg(count().alias("n"))
        .subscribe(lambda e, t: seen.setdefault(e, {}).update(zip(*t.to_pydict().values())))
    )
    epochs = 4
    with flow.activate(workers=1, backend="inline", checkpoint=str(tmp_path)) as session:
        for e in range(epochs):
            inp.advance_to(e)
            inp.send(pa.table({"line": ["a b a", f"w{e} b"]}))
            session.poll()
        inp.close()
        session.join()
    assert sorted({e for _, e in taken}) == list(range(epochs))
    assert len(taken) == 2 * epochs, taken
    assert seen[epochs - 1]["a"] == 2 * epochs
