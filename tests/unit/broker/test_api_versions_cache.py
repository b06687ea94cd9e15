"""ApiVersions' advertised list: built once per response version, rebuilt when the registry changes."""

from __future__ import annotations

import dataclasses

from odradek.broker.handlers import k18_api_versions
from odradek.broker.registry import REGISTRY, RequestContext, load_handlers


def _ctx(version: int) -> RequestContext:
    return RequestContext(None, None, 18, version, 1, "t")  # type: ignore[arg-type]


def _rows(keys) -> list[tuple[int, int, int]]:
    return [(k.api_key, k.min_version, k.max_version) for k in keys]


def test_the_list_is_the_registry_in_key_order_and_built_once_per_version():
    load_handlers()
    expected = sorted((h.api_key, h.advertised_min, h.max_version) for h in REGISTRY.values())
    for version in (0, 3):
        first = k18_api_versions.advertised(_ctx(version))
        assert _rows(first) == expected
        assert k18_api_versions.advertised(_ctx(version)) is first
    assert type(k18_api_versions.advertised(_ctx(0))[0]) is not type(k18_api_versions.advertised(_ctx(3))[0])


def test_a_handler_registered_or_changed_later_is_advertised(monkeypatch):
    load_handlers()
    before = k18_api_versions.advertised(_ctx(3))
    produce = REGISTRY[0]
    monkeypatch.setitem(REGISTRY, 0, dataclasses.replace(produce, advertised_min=3))
    monkeypatch.setitem(REGISTRY, 1000, dataclasses.replace(REGISTRY[18], api_key=1000))
    rows = _rows(k18_api_versions.advertised(_ctx(3)))
    assert rows[0] == (0, 3, produce.max_version)
    assert rows[-1] == (1000, REGISTRY[18].advertised_min, REGISTRY[18].max_version)
    monkeypatch.undo()
    assert k18_api_versions.advertised(_ctx(3)) is before
