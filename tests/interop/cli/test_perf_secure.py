"""`odradek perf produce|consume|e2e` over a SASL_SSL listener with `--command-config` (client
settings as Kafka's perf tools take them), run as processes against a broker process: only the
SASL_SSL listener is given, what was produced is read back over PLAINTEXT; a wrong password
fails with the broker's error and without the password; the confluent driver, which takes
librdkafka's names, refuses the file rather than ignore it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
from support.sasl_ssl_broker import client_properties, sasl_ssl_broker

from odradek.client import Consumer, TopicPartition

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with sasl_ssl_broker(tmp_path_factory.mktemp("perf-sasl-ssl"), {"perf": "perf-pw"}) as b:
        yield b


def perf(bootstrap: str, *args: str, config: str, ok: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="220", NO_COLOR="1", TERM="dumb")
    cmd = [sys.executable, "-m", "odradek", "perf", *args, "--bootstrap-server", bootstrap, "--command-config", config]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)
    if ok:
        assert p.returncode == 0, f"{args}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def last_json(out: str) -> dict:
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def test_perf_produce_consume_and_e2e_over_sasl_ssl(broker, tmp_path):
    conf = client_properties(tmp_path / "perf.properties", "perf", "perf-pw")
    t = f"perf-{uuid.uuid4().hex[:8]}"
    sasl = broker.sasl_ssl_bootstrap
    produced = perf(sasl, "produce", "-t", t, "--partitions", "2", "-n", "3000", "-s", "50", "--json", config=conf)
    r = last_json(produced.stdout)
    assert r["records"] == 3000 and r["errors"] == 0
    c = last_json(perf(sasl, "consume", "-t", t, "-n", "3000", "--timeout", "10", "--json", config=conf).stdout)
    assert c["records"] == 3000
    e = last_json(
        perf(sasl, "e2e", "-t", t + "-e2e", "--rate", "200", "--duration", "2", "--warmup", "0.5", "--json",
             config=conf).stdout
    )  # fmt: skip
    assert e["sent"] == 400 and e["received"] == 400
    # the records are on the broker: read back over PLAINTEXT
    with Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest") as cons:
        tps = [TopicPartition(t, p) for p in range(2)]
        cons.assign(tps)
        assert sum(cons.end_offsets(tps).values()) == 3000


def test_a_wrong_password_fails_without_the_password(broker, tmp_path):
    conf = client_properties(tmp_path / "wrong.properties", "perf", "not-the-perf-pw")
    t = f"perf-{uuid.uuid4().hex[:8]}"
    for args in (["produce", "-t", t, "-n", "10"], ["consume", "-t", t, "-n", "10", "--timeout", "2"]):
        p = perf(broker.sasl_ssl_bootstrap, *args, config=conf, ok=False)
        assert p.returncode == 1 and "SaslAuthenticationFailedError" in p.stderr, p.stdout + p.stderr
        assert "not-the-perf-pw" not in p.stdout + p.stderr


def test_the_confluent_driver_refuses_a_command_config(broker, tmp_path):
    pytest.importorskip("confluent_kafka")
    conf = client_properties(tmp_path / "perf.properties", "perf", "perf-pw")
    p = perf(broker.sasl_ssl_bootstrap, "consume", "-t", "x", "-n", "1", "--driver", "confluent", config=conf, ok=False)
    assert p.returncode == 1 and "--command-config needs --driver odradek" in p.stderr, p.stderr


def test_a_setting_the_client_does_not_know_is_refused(broker, tmp_path):
    conf = tmp_path / "bad.properties"
    client_properties(conf, "perf", "perf-pw")
    conf.write_text(conf.read_text() + "sasl.login.frobnicate=1\n")
    p = perf(broker.sasl_ssl_bootstrap, "produce", "-t", "x", "-n", "1", config=str(conf), ok=False)
    assert p.returncode == 1 and "unknown configuration 'sasl.login.frobnicate'" in p.stderr, p.stderr
