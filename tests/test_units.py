"""How the suite is dealt (tests/units.py): files that share a long-lived head form one unit."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
import units


def _item(path: str, *fixtures: str) -> Any:
    return SimpleNamespace(location=(path, 1, "t"), fixturenames=["workdir", *fixtures])


def test_files_sharing_a_head_are_one_unit_and_the_others_alone() -> None:
    got = units.units_of([_item("a.py", "cluster"), _item("a.py"), _item("b.py", "client"),
                          _item("c.py", "one_node"), _item("d.py", "fresh_clusters"), _item("e.py", "two_nodes")])
    assert got == {"a.py": "embedded", "b.py": "embedded", "c.py": "one_node", "d.py": "d.py", "e.py": "two_nodes"}
    assert units.heads_of("embedded") == {"embedded"} and units.heads_of("d.py") == set()


def test_a_file_using_two_heads_joins_their_units_whatever_the_order() -> None:
    items = [_item("a.py", "cluster"), _item("m.py", "one_node"), _item("m.py", "cluster"), _item("c.py", "one_node"),
             _item("e.py", "two_nodes")]
    for order in (items, items[::-1]):
        got = units.units_of(order)
        assert got == {"a.py": "embedded+one_node", "m.py": "embedded+one_node", "c.py": "embedded+one_node",
                       "e.py": "two_nodes"}, got
    assert units.heads_of("embedded+one_node") == {"embedded", "one_node"}


def test_the_scheduler_deals_by_the_published_map(tmp_path, monkeypatch, pytestconfig) -> None:
    path = tmp_path / "units.json"
    monkeypatch.setenv(units.MAP_ENV, str(path))
    units.publish({"tests/a.py": "embedded", "tests/b.py": "embedded", "tests/c.py": "tests/c.py"})
    assert json.loads(path.read_text())["tests/b.py"] == "embedded"
    monkeypatch.setattr(pytestconfig.option, "tx", ["2*popen"], raising=False)  # two test processes
    sched = units.make_scheduler(pytestconfig, None)
    assert sched._split_scope("tests/a.py::test_x") == sched._split_scope("tests/b.py::test_y[1]") == "embedded"
    assert sched._split_scope("tests/c.py::test_z") == "tests/c.py"
    assert sched._split_scope("tests/new.py::test") == "tests/new.py"  # not in the map: its own unit


def test_each_test_process_gives_its_clusters_worker_ports_no_other_live_cluster_has(monkeypatch, tmp_path) -> None:
    """Two raylets handing out one range race to bind the same ports (a driver that loses dies):
    each test process has its own share of the slots, and a new cluster a slot none of its live ones holds."""
    import clusters

    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    bases: dict[str, list[int]] = {}
    for worker in ("gw0", "gw1", "gw2"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        factory = clusters.Clusters()
        for k in range(clusters.SLOTS // 3):
            c = factory.get(((2, 6),), fresh=True, start=False)
            bases.setdefault(worker, []).append(c.worker_port_base)
        with pytest.raises(RuntimeError, match="slots of this test process are held"):
            factory.get(((2, 6),), fresh=True, start=False)
        factory.fresh.pop(1)  # its cluster stopped: the slot is free again
        assert factory.get(((2, 6),), fresh=True, start=False).worker_port_base == bases[worker][1]
        factory.close()
    ranges = [range(b, b + clusters.SLOT) for bs in bases.values() for b in bs]
    ports = [p for r in ranges for p in r]
    assert len(ports) == len(set(ports)) and min(ports) >= 20000 and max(ports) < 32768
