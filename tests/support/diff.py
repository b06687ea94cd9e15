"""Differential testing: one scenario against Apache Kafka and against odradek, compared field by field.

A scenario is a plain function of a :class:`Target` (which broker, its bootstrap, raw protocol
connections). :meth:`Pair.same` runs it against both brokers (in two threads, so waits overlap),
turns both results into plain data with :func:`normalise` and fails with a readable list of the
fields that differ::

    def scenario(t: Target):
        with t.raw() as c:
            return c.call(CREATE_TOPICS, 7, topics=(...), timeout=10000, validate_only=False)

    pair.same(scenario)                                  # -> Kafka's result, normalised
    pair.same(scenario, ignore=("*.partitions[*].leader_epoch",))

Normalising: kio entities become dicts of their fields (recursively), enums and NewTypes their
plain values, ``timedelta`` milliseconds. What legitimately differs between two brokers is left
out by field name (:data:`IGNORED_FIELDS`: throttle times, cluster ids, hosts and ports, error
message texts) or masked (:data:`MASKED_FIELDS`: topic ids and member ids are compared as
"set or not", never by value). Lists of entities that carry a key (name, partition index, node
id, ...) are sorted by it: the order of configs or partitions in a response is not part of the
protocol's contract. Anything else the two must agree on.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import functools
import re
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from support.raw import RawConnection


def unique(prefix: str) -> str:
    """A name no other test uses: the brokers of tests/reference are shared by the whole session."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


#: fields that legitimately differ between two brokers, dropped wherever they appear
IGNORED_FIELDS = frozenset(
    {
        "throttle_time",
        "throttle_time_ms",
        "cluster_id",
        "host",
        "port",
        "error_message",
        "documentation",
    }
)
#: fields compared only as "set or not" (ids that each broker draws itself)
MASKED_FIELDS = frozenset({"topic_id", "member_id", "leader_id_member"})
#: keys that order a list of entities (the first a list's dicts all have)
SORT_KEYS = (
    "name",
    "partition_index",
    "index",
    "node_id",
    "broker_id",
    "resource_name",
    "group_id",
    "member_id",
    "api_key",
)

ZERO_UUID = uuid.UUID(int=0)


def normalise(value: Any, ignore: Iterable[str] = (), path: str = "") -> Any:
    """Plain data (dicts, lists, ints, strings) of a response, without what may differ.

    ``ignore``: more paths to drop, as globs (:func:`_matches`) over dotted paths whose list
    items are named by their key or index, e.g. ``"topics[*].partitions[*].leader_epoch"``,
    ``"*.timestamp"`` or ``"*.configs[min.insync.replicas].config_source"``."""
    ignore = tuple(ignore)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in dataclasses.fields(value):
            sub = f"{path}.{f.name}" if path else f.name
            if f.name in IGNORED_FIELDS or _matches(sub, ignore):
                continue
            v = getattr(value, f.name)
            out[f.name] = _mask(v) if f.name in MASKED_FIELDS else normalise(v, ignore, sub)
        return out
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            sub = f"{path}.{k}" if path else str(k)
            if k in IGNORED_FIELDS or _matches(sub, ignore):
                continue
            out[k] = _mask(v) if k in MASKED_FIELDS else normalise(v, ignore, sub)
        return out
    if isinstance(value, list | tuple):
        items = [normalise(v, ignore, f"{path}[{_item_key(v, i)}]") for i, v in enumerate(value)]
        return _sorted(items)
    if isinstance(value, enum.Enum):
        return normalise(value.value, ignore, path)
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return value


def _item_key(item: Any, index: int) -> Any:
    """How a list item is named in a path: its key (name, partition index, ...) or its index."""
    for key in SORT_KEYS:
        v = item.get(key, _NO) if isinstance(item, dict) else getattr(item, key, _NO)
        if v is not _NO:
            return normalise(v) if not isinstance(v, str) else v
    return index


_NO = object()


@functools.cache
def _pattern(p: str) -> re.Pattern:
    return re.compile(".*".join(re.escape(part) for part in p.split("*")))


def _matches(path: str, patterns: Iterable[str]) -> bool:
    """Glob match where only ``*`` is special (any text, brackets and dots included): so
    ``topics[*].partitions[*].leader_epoch`` names that field in every partition of every topic,
    and ``*.configs[min.insync.replicas].config_source`` one config's source."""
    return any(_pattern(p).fullmatch(path) for p in patterns)


def _mask(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, uuid.UUID):
        return "<zero>" if v == ZERO_UUID else "<id>"
    return "<id>" if v else "<empty>"


def _sorted(items: list) -> list:
    if items and all(isinstance(i, dict) for i in items):
        for key in SORT_KEYS:
            if all(key in i for i in items):
                return sorted(items, key=lambda i: (str(type(i[key])), i[key] if i[key] is not None else ""))
    return items


def differences(kafka: Any, odradek: Any, path: str = "", common: tuple[str, ...] = ()) -> list[str]:
    """One line per differing field: ``path: kafka=... odradek=...``.

    ``common``: globs (:func:`_matches`) of list paths (``"*.configs"``) whose keyed items are compared
    only where both sides have them (e.g. configs Kafka declares and odradek does not: those
    are compared by name in a test of their own)."""
    here = path or "<result>"
    if isinstance(kafka, dict) and isinstance(odradek, dict):
        out = []
        for k in kafka:
            sub = f"{path}.{k}" if path else str(k)
            if k not in odradek:
                out.append(f"{sub}: only Kafka has it ({_short(kafka[k])})")
            else:
                out += differences(kafka[k], odradek[k], sub, common)
        for k in odradek:
            if k not in kafka:
                sub = f"{path}.{k}" if path else str(k)
                out.append(f"{sub}: only odradek has it ({_short(odradek[k])})")
        return out
    if isinstance(kafka, list) and isinstance(odradek, list):
        keyed = _keyed(kafka, odradek)
        if keyed is not None:
            _key, kmap, omap = keyed
            both_only = _matches(path, common)
            out = []
            for k, kv in kmap.items():
                sub = f"{path}[{k}]"
                if k not in omap:
                    if not both_only:
                        out.append(f"{sub}: only Kafka has it")
                else:
                    out += differences(kv, omap[k], sub, common)
            if not both_only:
                out += [f"{path}[{k}]: only odradek has it" for k in omap if k not in kmap]
            return out
        out = []
        if len(kafka) != len(odradek):
            out.append(f"{here}: Kafka has {len(kafka)} items, odradek {len(odradek)}")
        for i, (a, b) in enumerate(zip(kafka, odradek)):
            out += differences(a, b, f"{path}[{i}]", common)
        n = min(len(kafka), len(odradek))
        out += [f"{path}[{i}]: only Kafka has {_short(v)}" for i, v in enumerate(kafka[n:], n)]
        out += [f"{path}[{i}]: only odradek has {_short(v)}" for i, v in enumerate(odradek[n:], n)]
        return out
    if kafka != odradek:
        return [f"{here}: kafka={_short(kafka)} odradek={_short(odradek)}"]
    return []


def _keyed(a: list, b: list):
    if not (a or b) or not all(isinstance(i, dict) for i in a + b):
        return None
    for key in SORT_KEYS:
        if all(key in i for i in a + b):
            ka = {i[key]: i for i in a}
            kb = {i[key]: i for i in b}
            if len(ka) == len(a) and len(kb) == len(b):
                return key, ka, kb
    return None


def _short(v: Any, limit: int = 200) -> str:
    s = repr(v)
    return s if len(s) <= limit else s[: limit - 3] + "..."


class Target:
    """One broker of a pair: ``name`` is "kafka" or "odradek"."""

    def __init__(self, name: str, bootstrap: str, version: str) -> None:
        self.name = name
        self.bootstrap = bootstrap
        self.version = version

    def __repr__(self) -> str:
        return f"<{self.name} {self.version} at {self.bootstrap}>"

    def raw(self, timeout: float = 15.0) -> RawConnection:
        return RawConnection(self.bootstrap, timeout=timeout)


class DifferentError(AssertionError):
    pass


class Pair:
    """Apache Kafka and odradek side by side (see the module docstring)."""

    def __init__(self, kafka: Target, odradek: Target) -> None:
        self.kafka = kafka
        self.odradek = odradek
        self.targets = (kafka, odradek)

    def run(self, scenario: Callable[[Target], Any]) -> tuple[Any, Any]:
        """The scenario's result on Kafka and on odradek (run at the same time)."""
        with ThreadPoolExecutor(2) as pool:
            futures = [pool.submit(scenario, t) for t in self.targets]
            return futures[0].result(), futures[1].result()

    def same(self, scenario: Callable[[Target], Any], *, ignore: Iterable[str] = (), common: Iterable[str] = ()) -> Any:
        """Run ``scenario`` on both and assert that the normalised results are equal; returns
        Kafka's (normalised), for further assertions that the scenario means what it says.
        ``ignore``: paths left out (see :func:`normalise`); ``common``: list paths compared only
        on the keys both have (see :func:`differences`)."""
        kafka, odradek = self.run(scenario)
        return self.compare(kafka, odradek, ignore=ignore, common=common)

    def compare(self, kafka: Any, odradek: Any, *, ignore: Iterable[str] = (), common: Iterable[str] = ()) -> Any:
        k, o = normalise(kafka, ignore), normalise(odradek, ignore)
        diff = differences(k, o, common=tuple(common))
        if diff:
            shown = diff[:60] + ([f"... and {len(diff) - 60} more"] if len(diff) > 60 else [])
            raise DifferentError(
                f"odradek differs from Apache Kafka {self.kafka.version} in {len(diff)} field(s):\n  "
                + "\n  ".join(shown)
            )
        return k
