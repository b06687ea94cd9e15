"""SASL on a SASL_PLAINTEXT listener, Apache Kafka 4.4 and odradek side by side: the same
requests by hand, the same answers (codes, messages, mechanisms lists) and the same closes."""

from __future__ import annotations

import struct

import pytest
from support import apache_kafka
from support.broker import BrokerProcess, free_port
from support.diff import Pair, Target
from support.raw import RawConnection, request

from odradek.broker.registry import ms
from odradek.protocol.sasl import plain
from odradek.protocol.scram import ScramClient

PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-pw";'
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
SASL = {
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
    "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
    "inter.broker.listener.name": "PLAINTEXT",
}
METADATA = dict(topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False)


@pytest.fixture(scope="module")
def sasl_pair(tmp_path_factory):
    reason = apache_kafka.unavailable_reason("4")
    if reason:
        pytest.skip(reason)
    k = apache_kafka.ApacheKafka(tmp_path_factory.mktemp("kafka-sasl"), line="4")
    node = k.nodes[0]
    k_sasl = free_port()
    node.configure(
        {
            **node.properties,
            **SASL,
            "listeners": f"PLAINTEXT://{node.host}:{node.port},CONTROLLER://{node.host}:{node.controller_port},"
            f"SASL_PLAINTEXT://{node.host}:{k_sasl}",
            "advertised.listeners": f"PLAINTEXT://{node.host}:{node.port},SASL_PLAINTEXT://{node.host}:{k_sasl}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        }
    )
    o_plain, o_sasl = free_port(), free_port()
    o = BrokerProcess(
        tmp_path_factory.mktemp("odradek-sasl"),
        {**SASL, "listeners": f"PLAINTEXT://127.0.0.1:{o_plain},SASL_PLAINTEXT://127.0.0.1:{o_sasl}"},
        port=o_plain,
    )
    k.start()
    try:
        with o.start():
            yield (
                Pair(
                    Target("kafka", f"{node.host}:{k_sasl}", k.version),
                    Target("odradek", f"127.0.0.1:{o_sasl}", "odradek"),
                ),
                Pair(Target("kafka", node.bootstrap, k.version), Target("odradek", o.bootstrap, "odradek")),
            )
    finally:
        k.stop()


def closed(c: RawConnection) -> bool:
    c.sock.settimeout(10)
    try:
        return c.sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_handshake_and_plain(sasl_pair):
    pair, _ = sasl_pair

    def scenario(t: Target):
        out = {}
        with t.raw() as c:
            r = c.call(17, 1, mechanism="GSSAPI")
            out["unknown"] = (int(r.error_code), list(r.mechanisms), closed(c))
        with t.raw() as c:
            r = c.call(17, 1, mechanism="PLAIN")
            out["handshake"] = (int(r.error_code), list(r.mechanisms))
            r = c.call(36, 2, auth_bytes=plain("alice", "wrong"))
            out["wrong"] = (int(r.error_code), r.error_message, closed(c))
        with t.raw() as c:
            c.call(17, 1, mechanism="PLAIN")
            r = c.call(36, 2, auth_bytes=plain("alice", "alice-pw"))
            out["right"] = (int(r.error_code), r.error_message, bytes(r.auth_bytes), ms(r.session_lifetime))
            out["then"] = len(c.call(3, 12, **METADATA).brokers)
        with t.raw() as c:
            c.call(17, 1, mechanism="PLAIN")
            r = c.call(36, 1, auth_bytes=b"alice\x00alice-pw")
            out["malformed"] = (int(r.error_code), r.error_message, closed(c))
        return out

    k = pair.same(scenario)
    assert k["wrong"][0] == 58 and k["unknown"][0] == 33


def test_scram_unknown_user_and_tokenauth(sasl_pair):
    pair, _ = sasl_pair

    def scenario(t: Target):
        out = {}
        for name, client in (
            ("unknown user", ScramClient("SCRAM-SHA-256", "nobody", "x")),
            ("tokenauth", ScramClient("SCRAM-SHA-256", "nobody", "x", extensions={"tokenauth": "true"})),
        ):
            with t.raw() as c:
                c.call(17, 1, mechanism="SCRAM-SHA-256")
                r = c.call(36, 2, auth_bytes=client.first())
                out[name] = (int(r.error_code), r.error_message, closed(c))
        return out

    pair.same(scenario)


def test_what_closes_before_authentication(sasl_pair):
    pair, _ = sasl_pair

    def scenario(t: Target):
        out = {}
        with t.raw() as c:
            c.send(3, 12, request(3, 12, **METADATA))
            out["metadata first"] = closed(c)
        with t.raw() as c:
            c.call(17, 1, mechanism="PLAIN")
            c.send(18, 3, request(18, 3, client_software_name="x", client_software_version="1"))
            out["versions after handshake"] = (int(c.recv(18, 3)[1].error_code), closed(c))
        with t.raw() as c:
            c.send(36, 2, request(36, 2, auth_bytes=b"x"))
            out["authenticate first"] = closed(c)
        with t.raw() as c:
            c.call(17, 1, mechanism="PLAIN")
            c.sock.sendall(struct.pack(">i", 524289) + b"\0" * 1024)
            out["oversized token"] = closed(c)
        return out

    assert pair.same(scenario) == {
        "metadata first": True,
        "versions after handshake": [34, True],  # answered ILLEGAL_SASL_STATE, then closed
        "authenticate first": True,
        "oversized token": True,
    }


def test_handshake_v0_bare_tokens(sasl_pair):
    pair, _ = sasl_pair

    def scenario(t: Target):
        out = {}
        with t.raw() as c:
            out["handshake"] = int(c.call(17, 0, mechanism="PLAIN").error_code)
            token = plain("alice", "alice-pw")
            c.sock.sendall(struct.pack(">i", len(token)) + token)
            out["answer"] = c._read(4)
            out["then"] = len(c.call(3, 12, **METADATA).brokers)
        with t.raw() as c:
            c.call(17, 0, mechanism="PLAIN")
            token = plain("alice", "nope")
            c.sock.sendall(struct.pack(">i", len(token)) + token)
            out["wrong"] = closed(c)
        return out

    pair.same(scenario)


def test_sasl_requests_on_a_plaintext_listener(sasl_pair):
    _, plaintext = sasl_pair

    def scenario(t: Target):
        with t.raw() as c:
            h = c.call(17, 1, mechanism="PLAIN")
            a = c.call(36, 2, auth_bytes=b"x")
            return (
                int(h.error_code),
                list(h.mechanisms),
                int(a.error_code),
                a.error_message,
                len(c.call(3, 12, **METADATA).brokers),
            )

    plaintext.same(scenario)
