"""What a Ray session reads of the cluster at its start, from one ``ray.nodes()``, on
fake node tables: live nodes only, each worker's CPU share, whether the workers fit,
whether they talk over TCP; bad sizes still fail before anything starts."""

from __future__ import annotations

from typing import Any

import pytest

from timely import ConfigError
from timely.backends import ray as backend
from timely.backends.ray import _check_fits, _Cluster, _share_cpus


def nodes(monkeypatch: pytest.MonkeyPatch, table: list[dict[str, Any]]) -> list[int]:
    calls: list[int] = []

    def fake() -> list[dict[str, Any]]:
        calls.append(1)
        return table

    monkeypatch.setattr(backend.ray, "nodes", fake)
    return calls


def test_only_live_nodes_count(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = nodes(
        monkeypatch,
        [
            {"Alive": True, "Resources": {"CPU": 2.0, "memory": 1e9}},
            {"Alive": False, "Resources": {"CPU": 16.0}},
            {"Alive": True, "Resources": {"CPU": 4.0}},
        ],
    )
    cluster = _Cluster.now()
    assert calls == [1]
    assert cluster.nodes == 2 and cluster.total() == 6.0
    assert _share_cpus(4, cluster) == 1.0 and _share_cpus(12, cluster) == 0.5
    _check_fits(1.0, 6, cluster)
    with pytest.raises(ConfigError, match="largest Ray node has 4 CPUs"):
        _check_fits(8.0, 1, cluster)
    with pytest.raises(ConfigError, match="need 7 CPUs but Ray has 6"):
        _check_fits(1.0, 7, cluster)


def test_a_cluster_that_names_no_cpu_counts_as_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """As ``ray.cluster_resources().get("CPU", 1.0)`` did: a share of one CPU."""
    nodes(monkeypatch, [{"Alive": True, "Resources": {"GPU": 1.0}}, {"Alive": True}])
    cluster = _Cluster.now()
    assert cluster.nodes == 2 and cluster.total() == 1.0
    assert _share_cpus(2, cluster) == 0.5
    with pytest.raises(ConfigError, match="largest Ray node has 0 CPUs"):
        _check_fits(0.5, 2, cluster)
