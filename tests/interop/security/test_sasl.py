"""SASL_PLAINTEXT (and SASL_SSL with confluent-kafka) with PLAIN, SCRAM-SHA-256 and
SCRAM-SHA-512 against a real broker process: the real clients (confluent-kafka, kcat,
kafka-python, aiokafka, kafkajs, Java) produce and consume; Kafka's own kafka-configs creates a
SCRAM user; 1,000 wrong passwords cost bounded memory, are counted per peer in the metrics, never
reach the log, and a good client is served.
(The protocol by hand, error codes and messages: tests/inprocess/security/test_sasl_inprocess.py.)

One broker for the module: a PLAINTEXT listener (brokers' and the admin's), a SASL_PLAINTEXT
listener and a SASL_SSL listener, each enabling the three mechanisms; PLAIN users come from the
listener's JAAS setting, SCRAM users are created through AlterUserScramCredentials
(confluent-kafka's admin client).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from support.apache_kafka import tool_command, unavailable_reason
from support.broker import BrokerProcess, free_port
from support.clients.base import NODE_DIR
from support.raw import RawConnection, request

from odradek.protocol.sasl import plain

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_admin="admin-Secret-0" user_alice="alice-Secret-1";'
)
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
USERS = {
    "PLAIN": ("alice", "alice-Secret-1"),
    "SCRAM-SHA-256": ("bob", "bob-Secret-256"),
    "SCRAM-SHA-512": ("carol", "carol-Secret-512"),
}
MECHANISMS = list(USERS)
CERTS = Path(__file__).resolve().parents[2] / "support" / "tls_certs"  # a CA and a broker certificate for 127.0.0.1
SECRETS = ("admin-Secret-0", "alice-Secret-1", "bob-Secret-256", "carol-Secret-512", "dave-Secret-9")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    plain_port, sasl_port, sasl_ssl_port, metrics_port = free_port(), free_port(), free_port(), free_port()
    b = BrokerProcess(
        tmp_path_factory.mktemp("sasl"),
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},SASL_PLAINTEXT://127.0.0.1:{sasl_port},"
            f"SASL_SSL://127.0.0.1:{sasl_ssl_port}",
            "inter.broker.listener.name": "PLAINTEXT",
            "sasl.enabled.mechanisms": ",".join(MECHANISMS),
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
            "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
            **{f"listener.name.sasl_ssl.{m.lower()}.sasl.jaas.config": SCRAM_JAAS for m in MECHANISMS[1:]},
            "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
            "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
            "listener.name.sasl_ssl.ssl.keystore.location": str(CERTS / "broker.keystore.pem"),
            "metrics.listener": f"127.0.0.1:{metrics_port}",
        },
        port=plain_port,
    )
    b.sasl_bootstrap = f"127.0.0.1:{sasl_port}"
    b.sasl_ssl_bootstrap = f"127.0.0.1:{sasl_ssl_port}"
    b.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    with b.start():
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        upserts = [
            UserScramCredentialUpsertion(
                user, ScramCredentialInfo(getattr(ScramMechanism, m.replace("-", "_")), 4096), pw.encode()
            )
            for m, (user, pw) in USERS.items()
            if m != "PLAIN"
        ]
        for f in admin.alter_user_scram_credentials(upserts).values():
            f.result(timeout=30)
        yield b


def _topic(broker) -> str:
    name = f"sasl-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=30)
    return name


def _librdkafka(broker, mechanism: str) -> dict:
    user, pw = USERS[mechanism]
    return {
        "bootstrap.servers": broker.sasl_bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": pw,
    }


def _python_client(broker, mechanism: str) -> dict:
    """kafka-python's and aiokafka's settings for the SASL_PLAINTEXT listener."""
    user, pw = USERS[mechanism]
    return dict(
        bootstrap_servers=broker.sasl_bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism,
        sasl_plain_username=user,
        sasl_plain_password=pw,
    )


def _confluent_round_trip(conf: dict, topic: str) -> None:
    """Ten records produced with `conf`, read back in a new group."""
    p = Producer(conf)
    for i in range(10):
        p.produce(topic, f"v{i}".encode())
    assert p.flush(30) == 0
    c = Consumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 10 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    assert got == [f"v{i}".encode() for i in range(10)]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka(broker, mechanism):
    _confluent_round_trip(_librdkafka(broker, mechanism), _topic(broker))


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka_over_sasl_ssl(broker, mechanism):
    """SASL_SSL: librdkafka checks the broker's certificate, then authenticates inside TLS."""
    topic = _topic(broker)
    conf = {
        **_librdkafka(broker, mechanism),
        "bootstrap.servers": broker.sasl_ssl_bootstrap,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(CERTS / "ca.pem"),
    }
    _confluent_round_trip(conf, topic)
    # a wrong password: librdkafka reports an authentication error (not merely a timeout)
    errors: list = []
    wrong = Producer({**conf, "sasl.password": "not-the-password", "error_cb": errors.append})
    deadline = time.monotonic() + 15
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
        wrong.poll(0.2)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors


@pytest.mark.skipif(shutil.which("kcat") is None, reason="no kcat on PATH")
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kcat(broker, mechanism):
    topic = _topic(broker)
    user, pw = USERS[mechanism]
    sec = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", f"sasl.mechanisms={mechanism}"]
    sec += ["-X", f"sasl.username={user}", "-X", f"sasl.password={pw}"]
    subprocess.run(
        ["kcat", "-b", broker.sasl_bootstrap, *sec, "-P", "-t", topic], input=b"k1\nk2\n", check=True, timeout=60
    )
    out = subprocess.run(
        ["kcat", "-b", broker.sasl_bootstrap, *sec, "-C", "-t", topic, "-o", "beginning", "-c", "2", "-e"],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    assert out.split() == [b"k1", b"k2"]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python(broker, mechanism):
    from kafka import KafkaConsumer, KafkaProducer

    conf = _python_client(broker, mechanism)
    topic = _topic(broker)
    p = KafkaProducer(**conf)
    for i in range(5):
        p.send(topic, f"k{i}".encode())
    p.flush(30)
    p.close()
    c = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10000, group_id=f"g-{topic}", **conf)
    got = [m.value for m in c][:5]
    c.close()
    assert got == [f"k{i}".encode() for i in range(5)]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_aiokafka(broker, mechanism):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    conf = _python_client(broker, mechanism)
    topic = _topic(broker)

    async def run() -> list[bytes]:
        p = AIOKafkaProducer(**conf)
        await p.start()
        try:
            for i in range(5):
                await p.send_and_wait(topic, f"a{i}".encode())
        finally:
            await p.stop()
        c = AIOKafkaConsumer(topic, auto_offset_reset="earliest", group_id=f"g-{topic}", **conf)
        await c.start()
        got: list[bytes] = []
        try:
            while len(got) < 5:
                batch = await asyncio.wait_for(c.getmany(timeout_ms=1000), 20)
                for msgs in batch.values():
                    got += [m.value for m in msgs]
        finally:
            await c.stop()
        return got

    assert asyncio.run(run()) == [f"a{i}".encode() for i in range(5)]


KAFKAJS = """
const { Kafka, logLevel } = require('kafkajs');
const [broker, mechanism, username, password, topic] = process.argv.slice(1);
(async () => {
  const kafka = new Kafka({ brokers: [broker], sasl: { mechanism, username, password }, logLevel: logLevel.NOTHING });
  const p = kafka.producer(); await p.connect();
  await p.send({ topic, messages: [{ value: 'j1' }, { value: 'j2' }] }); await p.disconnect();
  const c = kafka.consumer({ groupId: 'g-' + topic }); await c.connect();
  await c.subscribe({ topic, fromBeginning: true });
  const got = [];
  await new Promise((resolve) => c.run({ eachMessage: async ({ message }) => {
    got.push(message.value.toString()); if (got.length === 2) resolve(); } }));
  await c.disconnect(); console.log(JSON.stringify(got));
})().catch((e) => { console.error(e); process.exit(1); });
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="no node on PATH")
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafkajs(broker, mechanism):
    topic = _topic(broker)
    user, pw = USERS[mechanism]
    out = subprocess.run(
        ["node", "-e", KAFKAJS, broker.sasl_bootstrap, mechanism.lower(), user, pw, topic],
        cwd=NODE_DIR,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == ["j1", "j2"]


def _client_properties(tmp_path, mechanism: str, user: str, pw: str) -> str:
    module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
    path = tmp_path / f"client-{mechanism}.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        f"sasl.mechanism={mechanism}\n"
        f'sasl.jaas.config=org.apache.kafka.common.security.{module} required username="{user}" password="{pw}";\n'
    )
    return str(path)


@pytest.mark.skipif(unavailable_reason("4") is not None, reason=str(unavailable_reason("4")))
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_java_console_clients(broker, mechanism, tmp_path):
    topic = _topic(broker)
    props = _client_properties(tmp_path, mechanism, *USERS[mechanism])
    produce = tool_command(
        "4", "org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server", broker.sasl_bootstrap,
        "--topic", topic, "--producer.config", props,
    )  # fmt: skip
    subprocess.run(produce, input=b"j1\nj2\n", check=True, timeout=120, capture_output=True)
    consume = tool_command(
        "4", "org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", broker.sasl_bootstrap,
        "--topic", topic, "--from-beginning", "--max-messages", "2", "--consumer.config", props,
        "--timeout-ms", "60000",
    )  # fmt: skip
    out = subprocess.run(consume, check=True, timeout=120, capture_output=True).stdout
    # (Kafka 4.4's tools print a deprecation notice for --consumer.config on stdout)
    assert [line for line in out.splitlines() if not line.startswith(b"Option ")] == [b"j1", b"j2"]


@pytest.mark.skipif(unavailable_reason("4") is not None, reason=str(unavailable_reason("4")))
def test_kafka_configs_adds_a_scram_user_over_sasl(broker, tmp_path):
    """Kafka's own kafka-configs (AlterUserScramCredentials over --bootstrap-server, itself
    authenticated with SCRAM), then the new user is described and logs in."""
    admin = _client_properties(tmp_path, "SCRAM-SHA-512", *USERS["SCRAM-SHA-512"])
    configs = [
        "--bootstrap-server", broker.sasl_bootstrap, "--command-config", admin,
        "--entity-type", "users", "--entity-name", "dave",
    ]  # fmt: skip
    add = tool_command(
        "4", "org.apache.kafka.tools.ConfigCommand", *configs, "--alter",
        "--add-config", "SCRAM-SHA-256=[iterations=8192,password=dave-Secret-9]",
    )  # fmt: skip
    subprocess.run(add, check=True, timeout=120, capture_output=True)
    # (kafka-configs --describe of users asks DescribeClientQuotas too, which odradek does not serve yet)
    admin_client = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = admin_client.describe_user_scram_credentials(["dave"])["dave"].result(timeout=30)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 8192)
    ]
    p = Producer({**_librdkafka(broker, "SCRAM-SHA-256"), "sasl.username": "dave", "sasl.password": "dave-Secret-9"})
    p.produce(_topic(broker), b"from dave")
    assert p.flush(30) == 0


def _rss_kb(broker) -> int:
    with open(f"/proc/{broker.proc.pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def test_many_wrong_passwords(broker):
    """1,000 wrong passwords, each on its own connection: each answered 58 and closed, the
    broker's memory bounded, a good client served after them, the failures counted per peer,
    and no password in the broker's log."""
    rss_before = _rss_kb(broker)
    for i in range(1000):
        with RawConnection(broker.sasl_bootstrap) as conn:
            conn.call(17, 1, mechanism="PLAIN")
            conn.send(36, 2, request(36, 2, auth_bytes=plain("alice", f"guess-{i}-Password")))
            assert conn.recv(36, 2)[1].error_code == 58
    grown = _rss_kb(broker) - rss_before
    assert grown < 30_000, f"1,000 failed authentications grew the broker by {grown} kB"
    with RawConnection(broker.sasl_bootstrap) as conn:
        assert conn.call(17, 1, mechanism="PLAIN").error_code == 0
        assert conn.call(36, 2, auth_bytes=plain(*USERS["PLAIN"])).error_code == 0
    text = urllib.request.urlopen(broker.metrics_url, timeout=10).read().decode()
    line = next(
        x
        for x in text.splitlines()
        if x.startswith("odradek_failed_authentication_total{")
        and 'host="127.0.0.1"' in x
        and 'listener="SASL_PLAINTEXT"' in x
    )
    assert float(line.rsplit(" ", 1)[1]) >= 1000
    # the broker's own lines (the test harness writes the command line, with its settings, first)
    log = "\n".join(x for x in broker.log_path.read_text(errors="replace").splitlines() if "--override" not in x)
    assert "failed authentication with /127.0.0.1" in log
    for secret in (*SECRETS, "guess-1-Password", "guess-999-Password"):
        assert secret not in log
