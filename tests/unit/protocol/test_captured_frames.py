"""Request frames captured from the six real clients (tests/unit/protocol/fixtures) decode,
re-encode byte for byte, and carry valid record batches.

The fixtures are made by ``scripts/capture_frames.py`` (run by hand): one file per
(client, API, version), the first such frame the client sent through a recording
proxy, without its 4-byte size prefix. Pure: no broker, no sockets.

Round trip: every captured body re-encodes to exactly its bytes with kio, tagged
fields included (the clients send empty tagged-field sections, which kio keeps).
No fixture is Produce v0-2 (no client we support sends it), so the legacy decoder
(which reads those as v3) is not involved here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from odradek.protocol import messages, records
from odradek.protocol.connection import RequestReceived, ServedApi, ServerConnection
from odradek.protocol.framing import encode_frame

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CLIENTS = ("java", "confluent", "kcat", "kafka_python", "aiokafka", "kafkajs")
# What each adapter sends as client id (see scripts/capture_frames.py).
CLIENT_IDS = {
    "java": "odradek-java-cli",
    "confluent": "odradek-test-confluent",
    "kcat": "rdkafka",
    "kafka_python": "odradek-test-kafka-python",
    "aiokafka": "odradek-test-aiokafka",
    "kafkajs": "odradek-kafkajs-cli",
}
# The codec the capture script asked each client to use for its first Produce.
CODECS = {
    "java": records.ZSTD,
    "confluent": records.LZ4,
    "kcat": records.SNAPPY,
    "kafka_python": records.GZIP,
    "aiokafka": records.GZIP,
    "kafkajs": records.GZIP,
}
NAME = re.compile(r"(?P<api>[a-z_]+)_v(?P<version>\d+)\.bin")
API_KEYS = {v: k for k, v in messages.API_NAMES.items()}

FILES = sorted(FIXTURES.glob("*/*.bin"))
# Everything kio has a schema for (what the broker serves is checked in tests/interop).
APIS = {k: ServedApi(r[0], r[0], r[1]) for k in messages.API_NAMES if (r := messages.schema_versions(k))}


def _id(p: Path) -> str:
    return f"{p.parent.name}/{p.stem}"


def _parse(path: Path) -> tuple[bytes, RequestReceived]:
    frame = path.read_bytes()
    conn = ServerConnection(APIS, len(frame))
    conn.receive_data(encode_frame(frame))
    event = conn.next_event()
    assert isinstance(event, RequestReceived), "a captured request was answered without a handler"
    return frame, event


def test_fixtures_present():
    assert FILES, f"no fixtures under {FIXTURES}: run scripts/capture_frames.py"
    assert {p.parent.name for p in FILES} == set(CLIENTS)
    assert sum(p.stat().st_size for p in FILES) < 1024 * 1024


@pytest.mark.parametrize("path", FILES, ids=_id)
def test_parses_and_round_trips(path: Path):
    m = NAME.fullmatch(path.name)
    assert m, f"unexpected fixture name {path.name}"
    api_key, version = API_KEYS[m["api"]], int(m["version"])
    frame, event = _parse(path)
    assert (event.api_key, event.api_version) == (api_key, version)
    assert event.client_id == CLIENT_IDS[path.parent.name]
    assert event.flexible == messages.is_flexible(api_key, version)
    assert type(event.request) is messages.request_class(api_key, version)
    body = frame[event.header_size :]
    assert messages.encode(event.request) == body


@pytest.mark.parametrize("path", [p for p in FILES if p.name.startswith("produce_")], ids=_id)
def test_produce_batches_are_valid(path: Path):
    client = path.parent.name
    _frame, event = _parse(path)
    request = event.request
    batches = 0
    for td in request.topic_data:
        for pd in td.partition_data:
            assert pd.records, "a partition without records"
            for h in records.iter_batches(pd.records, validate=True, strict=True):  # CRC32C, counts, magic 2
                batches += 1
                assert h.magic == 2
                assert h.compression == CODECS[client]
                recs = records.decode_records(pd.records, h.position)
                assert len(recs) == h.record_count > 0
                for r in recs:
                    assert r.key.startswith(b"key-z")
                    assert r.value == b"compressible " * 20
                    assert [(k, v) for k, v in r.headers] == [("codec", records.CODEC_NAMES[CODECS[client]].encode())]
    assert batches >= 1


@pytest.mark.parametrize("client", CLIENTS)
def test_coverage(client: str):
    apis = {NAME.fullmatch(p.name)["api"] for p in (FIXTURES / client).glob("*.bin")}
    missing = {"api_versions", "metadata", "produce", "fetch"} - apis
    assert not missing, f"{client}: no {sorted(missing)} fixture"
    assert {"list_offsets", "find_coordinator", "join_group", "sync_group", "offset_commit"} <= apis
