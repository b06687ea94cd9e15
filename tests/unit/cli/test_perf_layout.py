"""`odradek perf` keeps click in its commands: the engine and the drivers import neither click nor
each other's client library at module level (a driver imports its client when it runs)."""

from __future__ import annotations

import ast
from pathlib import Path

import odradek.cli.perf

PERF = Path(odradek.cli.perf.__file__).parent


def top_level_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0] if node.level == 0 else "." + node.module)
    return names


def test_no_click_in_the_engine_nor_the_drivers():
    files = [PERF / "engine.py", *sorted((PERF / "drivers").glob("*.py"))]
    assert len(files) >= 4
    for f in files:
        assert not {"click", "rich", "confluent_kafka"} & top_level_imports(f), f


def test_every_driver_is_registered_and_names_itself():
    from odradek.cli.perf.drivers import DRIVERS, driver

    assert set(DRIVERS) == {"odradek", "confluent"}
    for name in DRIVERS:
        d = driver(name)
        assert d.name == name and callable(d.produce) and callable(d.consume) and callable(d.e2e)
