"""``profile_dir``: each worker writes a cProfile of its run that ``pstats`` loads, on the
inline backend and on Ray; ``TIMELY_PROFILE_DIR`` stands in for the option; a bad value
fails before anything starts."""

from __future__ import annotations

import pstats
from pathlib import Path

import pytest

import operators  # noqa: F401 - registers the stream methods
from timely import Dataflow
from timely.errors import ConfigError
from timely.worker.profiling import PROFILE_ENV


def _flow() -> Dataflow:
    flow = Dataflow("profiled")
    inp = flow.new_input("n")
    inp.stream.exchange(lambda x: x).select(lambda x: x * 2).collect("out")
    for epoch in range(3):
        inp.send(list(range(epoch * 10, epoch * 10 + 10)))
        inp.advance_to(epoch + 1)
    return flow


def _functions(path: Path) -> set[str]:
    stats = pstats.Stats(str(path))
    return {name for (_, _, name) in stats.stats}  # type: ignore[attr-defined]


def test_inline_workers_write_loadable_profiles(tmp_path: Path) -> None:
    out = _flow().run(workers=2, backend="inline", profile_dir=tmp_path / "prof")
    assert sorted(out.records("out")) == [2 * x for x in range(30)]
    for i in range(2):
        assert "step" in _functions(tmp_path / "prof" / f"worker-{i}.prof")


def test_the_environment_variable_asks_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PROFILE_ENV, str(tmp_path))
    _flow().run(workers=1, backend="inline")
    assert "step" in _functions(tmp_path / "worker-0.prof")


def test_no_profile_unless_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROFILE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    _flow().run(workers=1, backend="inline")
    assert not list(tmp_path.rglob("*.prof"))


def test_a_bad_value_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="profile_dir"):
        _flow().run(workers=1, backend="inline", profile_dir=3)


@pytest.mark.usefixtures("ray_local")
def test_ray_actors_write_loadable_profiles(tmp_path: Path) -> None:
    out = _flow().run(workers=2, backend="ray", profile_dir=str(tmp_path))
    assert sorted(out.records("out")) == [2 * x for x in range(30)]
    for i in range(2):
        names = _functions(tmp_path / f"worker-{i}.prof")
        assert "step" in names  # the worker's loop ran under the profiler
