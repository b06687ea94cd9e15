"""The clients `odradek perf` can drive, by name (each a :class:`odradek.cli.perf.engine.Driver`)."""

from __future__ import annotations

from odradek.cli.perf.drivers.confluent import ConfluentDriver
from odradek.cli.perf.drivers.odradek import OdradekDriver
from odradek.cli.perf.engine import Driver, PerfError

DRIVERS: dict[str, type[Driver]] = {"odradek": OdradekDriver, "confluent": ConfluentDriver}


def driver(name: str) -> Driver:
    try:
        return DRIVERS[name]()
    except KeyError:
        raise PerfError(f"unknown driver {name}") from None
