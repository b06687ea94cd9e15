"""`odradek pipeline generate|load|stream|sessionize` over a SASL_SSL listener with
`--command-config` (client settings as Kafka's tools take them; the Spark commands pass them to
the odradek data source as its ``kafka.*`` options), run as processes against a broker process
given only its SASL_SSL listener; the results are checked over PLAINTEXT. A wrong password
fails with the broker's error, without the password."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest
from support.sasl_ssl_broker import client_properties, client_settings, sasl_ssl_broker
from support.spark_data import make_topic

from odradek.client import Admin, Consumer, TopicPartition

pytestmark = pytest.mark.spark

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    pytest.importorskip("pyspark")
    with sasl_ssl_broker(tmp_path_factory.mktemp("pipeline-sasl-ssl"), {"pipe": "pipe-pw"}) as b:
        yield b


def pipeline(bootstrap: str, *args: str, config: str, ok: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="220", NO_COLOR="1", TERM="dumb", PYSPARK_PYTHON=sys.executable)
    cmd = [sys.executable, "-m", "odradek", "pipeline", *args, "--bootstrap-server", bootstrap]
    cmd += ["--command-config", config]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, stdin=subprocess.DEVNULL)
    if ok:
        assert p.returncode == 0, f"{args}: exit {p.returncode}\n{p.stdout}\n{p.stderr[-5000:]}"
    return p


def end_offsets(bootstrap: str, topic: str, partitions: int) -> int:
    with Consumer(bootstrap_servers=bootstrap, isolation_level="read_committed") as c:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        return sum(c.end_offsets(tps).values())


def test_generate_and_sessionize_over_sasl_ssl(broker, tmp_path):
    conf = client_properties(tmp_path / "pipe.properties", "pipe", "pipe-pw")
    topic = f"act-{uuid.uuid4().hex[:8]}"
    out = pipeline(broker.sasl_ssl_bootstrap, "generate", "--topic", topic, "--count", "300", "--partitions", "2",
                   config=conf).stdout  # fmt: skip
    assert f"produced 300 events to {topic}" in out
    assert end_offsets(broker.bootstrap, topic, 2) == 300
    pipeline(broker.sasl_ssl_bootstrap, "sessionize", "--topic", topic, "--output", topic + "-sessions",
             "--group", topic, "--gap-ms", "1", "--idle-exit", "3", config=conf)  # fmt: skip
    with Admin(bootstrap_servers=broker.bootstrap) as a:
        tps = [TopicPartition(topic, p) for p in range(2)]
        committed = a.list_group_offsets(topic, tps)
    assert sum(committed[tp].offset for tp in tps) == 300  # every event read, in committed transactions
    assert end_offsets(broker.bootstrap, topic + "-sessions", 2) > 0


def test_stream_and_load_over_sasl_ssl(broker, tmp_path):
    from odradek.pipeline.events import generate
    from odradek.pipeline.load import read_table
    from odradek.pipeline.stream import read_stats

    conf = client_properties(tmp_path / "pipe.properties", "pipe", "pipe-pw")
    topic, stats = f"act-{uuid.uuid4().hex[:8]}", f"stats-{uuid.uuid4().hex[:8]}"
    make_topic(broker.bootstrap, topic, 2, {"retention.ms": "-1"})  # old event times: kept
    # 600 events 200 ms apart, minutes 0..1 of event time, produced over SASL_SSL by the library
    generate(broker.sasl_ssl_bootstrap, topic, count=600, partitions=2, progress=False, start_ms=START_MS,
             spacing_ms=200, settings=client_settings("pipe", "pipe-pw"))  # fmt: skip
    generate(
        broker.sasl_ssl_bootstrap,
        topic,
        count=1,
        partitions=2,
        progress=False,
        start_ms=START_MS + 200_000,
        spacing_ms=1,
        settings=client_settings("pipe", "pipe-pw"),
    )  # fmt: skip  (moves the watermark)
    assert end_offsets(broker.bootstrap, topic, 2) == 601

    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    pipeline(broker.sasl_ssl_bootstrap, "stream", "--topic", topic, "--master", "local[1]", "--out", str(out),
             "--checkpoint", str(ckpt), "--stats-topic", stats, "--available-now", config=conf)  # fmt: skip
    minutes = read_stats(out, "minute")
    assert minutes is not None and set(minutes["events"].to_pylist()) == {300}
    assert end_offsets(broker.bootstrap, stats, 1) > 0  # the stats written to the topic over SASL_SSL

    wh = tmp_path / "wh"
    out_text = pipeline(broker.sasl_ssl_bootstrap, "load", "--topic", topic, "--master", "local[1]",
                        "--warehouse", str(wh), config=conf).stdout  # fmt: skip
    assert "601 records" in out_text
    assert read_table(wh, topic).num_rows == 601


def test_a_wrong_password_fails_without_the_password(broker, tmp_path):
    conf = client_properties(tmp_path / "wrong.properties", "pipe", "not-the-pipe-pw")
    p = pipeline(broker.sasl_ssl_bootstrap, "generate", "--topic", "x", "--count", "1", config=conf, ok=False)
    assert p.returncode != 0 and "SaslAuthenticationFailedError" in p.stderr, p.stderr[-3000:]
    assert "not-the-pipe-pw" not in p.stdout + p.stderr
