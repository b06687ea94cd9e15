"""The handler registry: registration rules, ApiVersions from it, per-version codecs."""

from __future__ import annotations

import struct

import pytest

from odradek.broker.handlers.k00_produce import ProduceAnswer
from odradek.broker.registry import REGISTRY, VersionCodec, handles, load_handlers, make
from odradek.protocol import messages
from odradek.protocol.produce_codec import PartitionProduceResult, TopicProduceResult


def test_registering_a_key_twice_fails_loudly():
    load_handlers()
    with pytest.raises(RuntimeError, match="registered twice"):
        handles(18, 0, 4)(lambda ctx, req: None)


def test_a_version_without_a_schema_needs_a_full_codec():
    key = 9999  # no such API: kio has no schema for any version
    with pytest.raises(RuntimeError, match="no codec serves it"):
        handles(key, 0, 0)(lambda ctx, req: None)
    with pytest.raises(RuntimeError, match="no codec serves it"):
        handles(key, 0, 0, codecs={0: VersionCodec(encode=lambda v, r: ([b""], 0))})(lambda ctx, req: None)
    assert key not in REGISTRY


def test_produce_is_advertised_from_v0_and_its_legacy_versions_have_their_own_codec():
    h = load_handlers()[0]
    assert (h.advertised_min, h.min_version, h.max_version) == (0, 3, 13)
    assert h.request_decoder(2) is not None and h.request_decoder(3) is None  # v3+: kio reads
    topics = ProduceAnswer([TopicProduceResult("t", None, [PartitionProduceResult(4, 35, -1, -1)])])
    (body,), size = h.encode_response(2, topics)
    # ProduceResponse v2: [topic name, [index, error, base offset, log append time]], throttle
    assert body == struct.pack(">ih1siihqqi", 1, 1, b"t", 1, 4, 35, -1, -1, 0) and size == len(body)
    (body,), _ = h.encode_response(0, topics)
    assert body == struct.pack(">ih1siihq", 1, 1, b"t", 1, 4, 35, -1)


def test_kio_versions_encode_the_entity():
    h = load_handlers()[18]
    resp = make(messages.response_class(18, 3), error_code=0, api_keys=(), throttle_time=0)
    (body,), size = h.encode_response(3, resp)
    assert body == messages.encode(resp) and size == len(body)


def test_make_drops_fields_a_version_does_not_have():
    old = make(messages.response_class(3, 0), brokers=(), topics=(), cluster_id="c", throttle_time=5)
    assert not hasattr(old, "cluster_id")
    new = make(messages.response_class(3, 12), brokers=(), topics=(), cluster_id="c", throttle_time=5)
    assert new.cluster_id == "c" and new.throttle_time.total_seconds() == 0.005
