"""The end-to-end scenarios of the inline property tests, as fixed examples on Ray.

Chains, diamonds, exchanges, broadcasts, loops with feedback and nested loops, fed
several epochs, with 2 and 4 workers on local Ray; each output must equal the
plain-Python reference. (The recorders of the inline tests log into driver memory,
which actors do not share; on Ray the workers' own check that every batch arrives at
a time its input's frontier permits stands in for them.)
"""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from tests.runtime.dataflows import Data, Log, Step, build, reference
from timely import Dataflow

pytestmark = pytest.mark.usefixtures("ray_local")

SCENARIOS: dict[str, list[Step]] = {
    "chain": [("map", 3, 1), ("filter", 3, 0), ("flat",), ("map", 2, 5)],
    "diamond-exchange": [
        ("diamond", [("exchange", 5), ("map", 2, 1)], [("filter", 2, 1), ("exchange", 3)]),
        ("sum",),
    ],
    "broadcast": [("broadcast",), ("map", 1, 1), ("exchange", 7), ("sum",)],
    "loop": [("iterate", [("map", 2, 3), ("filter", 4, 1), ("exchange", 5)], 3)],
    "nested-loops": [
        ("iterate", [("iterate", [("map", 1, 2), ("exchange", 2)], 2), ("sum",)], 2),
        ("flat",),
    ],
}

FEED = [(0, [1, 2, 3, 4, 5]), (1, [10, 20]), (3, [7, 7, 8]), (4, [])]


@pytest.mark.parametrize("workers", [2, pytest.param(4, marks=pytest.mark.ci)])
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_matches_reference_on_ray(name: str, workers: int) -> None:
    """Every scenario on 2 Ray workers; on 4 (two per CPU, other actors: new processes)
    in CI's profile (the quick one runs 4-worker word counts and loops in
    ``test_ray_backend``)."""
    chain = SCENARIOS[name]
    flow = Dataflow(name)
    inp = flow.new_input()
    build(inp.stream, chain, Log()).collect("out")
    data: Data = {}
    for epoch, records in FEED:
        inp.advance_to(epoch)
        inp.send(records)
        data.setdefault((epoch,), Counter()).update(records)
    out = flow.run(workers=workers, backend="ray")
    want = {t[0]: c for t, c in reference(chain, data, workers).items()}
    got: dict[int, Counter[int]] = defaultdict(Counter)
    for epoch, record in out["out"]:
        got[epoch][record] += 1
    assert dict(got) == want
    assert [e for e, _ in out["out"]] == sorted(e for e, _ in out["out"])
