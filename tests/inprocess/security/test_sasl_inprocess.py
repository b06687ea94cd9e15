"""SASL on a real listener of an in-process broker, spoken by hand over a socket (a thread):
Kafka's order of requests, its error codes and messages, each failure closing only its own
connection; SCRAM users through AlterUserScramCredentials / DescribeUserScramCredentials, kept
in the single node's metadata file across a restart; the session lifetime (KIP-368)."""

from __future__ import annotations

import asyncio
import json
import logging
import struct
from collections.abc import Callable
from typing import Any

from support.inprocess import InProcessBroker
from support.raw import RawConnection, nested, request

from odradek.broker.registry import ms
from odradek.protocol.sasl import plain
from odradek.protocol.scram import ScramClient, make_credential, salted_password

PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-Secret-1";'
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
SETTINGS = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "inter.broker.listener.name": "PLAINTEXT",
    "sasl.enabled.mechanisms": ",".join(MECHANISMS),
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
    "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
    "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
}
METADATA = dict(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def run(tmp_path, client: Callable[[InProcessBroker, str, str], Any], **extra: str) -> Any:
    """Start the broker, run `client(broker, sasl_bootstrap, plaintext_bootstrap)` in a thread."""

    async def main() -> Any:
        async with InProcessBroker(tmp_path / "data", {**SETTINGS, **extra}) as b:
            (_h1, plain_port), (_h2, sasl_port) = b.broker.bound
            await add_scram_user(b, "bob", "bob-Secret-256", 1)
            # the broker's background schema warm-up done (its allocations are not the test's)
            await asyncio.wait([t for t in b.broker._tasks if "_warm_up" in repr(t.get_coro())], timeout=60)
            return await asyncio.to_thread(client, b, f"127.0.0.1:{sasl_port}", f"127.0.0.1:{plain_port}")

    return asyncio.run(main())


async def add_scram_user(b: InProcessBroker, user: str, password: str, mechanism: int, iterations: int = 4096):
    salt = b"0123456789abcdef"
    name = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}[mechanism]
    r = await b.call(
        51,
        0,
        deletions=(),
        upsertions=(
            nested(
                51,
                0,
                "ScramCredentialUpsertion",
                name=user,
                mechanism=mechanism,
                iterations=iterations,
                salt=salt,
                salted_password=salted_password(name, password, salt, iterations),
            ),
        ),
    )
    return r


def closed(conn: RawConnection) -> bool:
    conn.sock.settimeout(5)
    try:
        return conn.sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_plain_then_requests(tmp_path):
    def client(b, sasl, _plain):
        with RawConnection(sasl) as c:
            assert c.call(18, 3, client_software_name="raw", client_software_version="1").error_code == 0
            r = c.call(17, 1, mechanism="PLAIN")
            assert (r.error_code, list(r.mechanisms)) == (0, MECHANISMS)
            r = c.call(36, 2, auth_bytes=plain("alice", "alice-Secret-1"))
            assert (r.error_code, r.error_message, r.auth_bytes, ms(r.session_lifetime)) == (0, "", b"", 0)
            brokers = c.call(3, 12, **METADATA).brokers
            assert [x.port for x in brokers] == [int(sasl.rsplit(":", 1)[1])]  # this listener's endpoint

    run(tmp_path, client)


def test_failures_answer_and_close_only_their_connection(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)

    def client(b, sasl, plaintext):
        with RawConnection(sasl) as c:  # wrong password
            c.call(17, 1, mechanism="PLAIN")
            r = c.call(36, 2, auth_bytes=plain("alice", "Wrong-Password-7"))
            assert (r.error_code, r.error_message) == (58, "Authentication failed: Invalid username or password")
            assert closed(c)
        with RawConnection(sasl) as c:  # unknown mechanism
            r = c.call(17, 1, mechanism="GSSAPI")
            assert (r.error_code, list(r.mechanisms)) == (33, MECHANISMS)
            assert closed(c)
        with RawConnection(sasl) as c:  # a request before authentication
            c.send(3, 12, request(3, 12, **METADATA))
            assert closed(c)
        with RawConnection(sasl) as c:  # a request after the handshake, before the token
            c.call(17, 1, mechanism="PLAIN")
            c.send(3, 12, request(3, 12, **METADATA))
            assert closed(c)
        with RawConnection(sasl) as c:  # ApiVersions after the handshake: answered 34, as Kafka, then closed
            c.call(17, 1, mechanism="PLAIN")
            r = c.call(18, 3, client_software_name="raw", client_software_version="1")
            assert (r.error_code, r.api_keys) == (34, ())
            assert closed(c)
        with RawConnection(sasl) as c:  # SaslAuthenticate without a handshake
            c.send(36, 2, request(36, 2, auth_bytes=b"x"))
            assert closed(c)
        with RawConnection(sasl) as c:  # a token over sasl.server.max.receive.size
            c.call(17, 1, mechanism="PLAIN")
            c.sock.sendall(struct.pack(">i", 524289) + b"\0" * 4096)
            assert closed(c)
        with RawConnection(plaintext) as c:  # meanwhile the other listener serves, SASL there is illegal
            assert c.call(17, 1, mechanism="PLAIN").error_code == 34
            r = c.call(36, 2, auth_bytes=b"x")
            assert r.error_code == 34
            assert c.call(3, 12, **METADATA).brokers
        return dict(b.services.metrics.auth_failures) if b.services.metrics else None

    run(tmp_path, client)
    text = caplog.text
    assert "failed authentication with /127.0.0.1" in text
    assert "Wrong-Password-7" not in text and "alice-Secret-1" not in text


def test_failed_authentications_are_counted_per_listener_and_host(tmp_path):
    def client(b, sasl, _plain):
        for _ in range(3):
            with RawConnection(sasl) as c:
                c.call(17, 1, mechanism="PLAIN")
                assert c.call(36, 2, auth_bytes=plain("alice", "nope")).error_code == 58
        with RawConnection(sasl) as c:
            assert c.call(17, 1, mechanism="OTHER").error_code == 33
        return {k: v[0] for k, v in b.services.metrics.auth_failures.items()}

    assert run(tmp_path, client, **{"metrics.listener": "127.0.0.1:0"}) == {("SASL_PLAINTEXT", "127.0.0.1"): 4}


def test_handshake_v0_then_bare_tokens(tmp_path):
    def client(b, sasl, _plain):
        with RawConnection(sasl) as c:
            assert c.call(17, 0, mechanism="SCRAM-SHA-256").error_code == 0
            scram = ScramClient("SCRAM-SHA-256", "bob", "bob-Secret-256")

            def token(data: bytes) -> bytes:
                c.sock.sendall(struct.pack(">i", len(data)) + data)
                return c._read(struct.unpack(">i", c._read(4))[0])

            scram.verify(token(scram.final(token(scram.first()))))
            assert c.call(3, 12, **METADATA).brokers
        with RawConnection(sasl) as c:  # a wrong password: closed without an answer, as Kafka's
            assert c.call(17, 0, mechanism="PLAIN").error_code == 0
            data = plain("alice", "nope")
            c.sock.sendall(struct.pack(">i", len(data)) + data)
            assert closed(c)

    run(tmp_path, client)


def scram_login(sasl: str, mechanism: str, user: str, password: str, version: int = 2, **client_args):
    c = RawConnection(sasl)
    assert c.call(17, 1, mechanism=mechanism).error_code == 0
    scram = ScramClient(mechanism, user, password, **client_args)
    r = c.call(36, version, auth_bytes=scram.first())
    if r.error_code == 0:
        r = c.call(36, version, auth_bytes=scram.final(r.auth_bytes))
        if r.error_code == 0:
            scram.verify(r.auth_bytes)
    return c, r


def test_scram_users(tmp_path):
    def client(b, sasl, _plain):
        c, r = scram_login(sasl, "SCRAM-SHA-256", "bob", "bob-Secret-256")
        assert r.error_code == 0 and c.call(3, 12, **METADATA).brokers
        c.close()
        failed = "Authentication failed during authentication due to invalid credentials with SASL mechanism "
        for mechanism, user, pw in (
            ("SCRAM-SHA-256", "bob", "wrong"),
            ("SCRAM-SHA-256", "nobody", "x"),
            ("SCRAM-SHA-512", "bob", "bob-Secret-256"),  # bob has no SCRAM-SHA-512 credential
        ):
            c, r = scram_login(sasl, mechanism, user, pw)
            assert (r.error_code, r.error_message) == (58, failed + mechanism)
            assert closed(c)
            c.close()
        c, r = scram_login(sasl, "SCRAM-SHA-256", "bob", "bob-Secret-256", extensions={"tokenauth": "true"})
        assert r.error_code == 58  # no delegation tokens
        c.close()

    run(tmp_path, client)


def test_describe_and_alter_user_scram_credentials(tmp_path):
    async def main():
        async with InProcessBroker(tmp_path / "data", SETTINGS) as b:
            r = await add_scram_user(b, "bob", "pw", 1)
            assert [(x.user, x.error_code) for x in r.results] == [("bob", 0)]
            await add_scram_user(b, "bob", "pw", 2, iterations=8192)
            await add_scram_user(b, "a,b=c", "pw", 1)
            r = await b.call(50, 0, users=None)
            assert [(x.user, [(i.mechanism, i.iterations) for i in x.credential_infos]) for x in r.results] == [
                ("a,b=c", [(1, 4096)]),
                ("bob", [(1, 4096), (2, 8192)]),
            ]
            users = tuple(nested(50, 0, "UserName", name=n) for n in ("bob", "nobody", "", "x", "x"))
            r = await b.call(50, 0, users=users)
            assert [(x.user, x.error_code, x.error_message) for x in r.results] == [
                ("bob", 0, None),
                ("nobody", 91, "Attempt to describe a user credential that does not exist: nobody"),
                ("", 91, "Username must not be empty"),
                ("x", 92, "Cannot describe SCRAM credentials for the same user twice in a single request: x"),
            ]

            def up(name, mechanism=1, iterations=4096):
                return nested(
                    51,
                    0,
                    "ScramCredentialUpsertion",
                    name=name,
                    mechanism=mechanism,
                    iterations=iterations,
                    salt=b"s",
                    salted_password=b"p" * 32,
                )

            def rm(name, mechanism=1):
                return nested(51, 0, "ScramCredentialDeletion", name=name, mechanism=mechanism)

            r = await b.call(
                51,
                0,
                upsertions=(up("few", iterations=4095), up("many", iterations=16385), up("odd", mechanism=9), up("")),
                deletions=(rm("nobody"), rm("twice"), rm("twice"), rm("bob", 2)),
            )
            assert sorted((x.user, x.error_code, x.error_message) for x in r.results) == [
                ("", 93, "Username must not be empty"),
                ("bob", 0, None),
                ("few", 93, "Too few iterations"),
                ("many", 93, "Too many iterations"),
                ("nobody", 91, "Attempt to delete a user credential that does not exist"),
                ("odd", 33, "Unknown SCRAM mechanism"),
                ("twice", 92, "A user credential cannot be altered twice in the same request"),
            ]
            assert set(b.services.snapshot.user_configs["bob"]) == {"SCRAM-SHA-256"}
        doc = json.loads((tmp_path / "data" / "odradek-metadata.json").read_text())
        stored = dict(doc["user_configs"])  # [user, config] pairs
        assert set(stored) == {"bob", "a,b=c"}
        assert stored["bob"]["SCRAM-SHA-256"].endswith(",iterations=4096")
        async with InProcessBroker(tmp_path / "data", SETTINGS) as b:  # kept across a restart
            r = await b.call(50, 0, users=None)
            assert [x.user for x in r.results] == ["a,b=c", "bob"]

    asyncio.run(main())


def test_session_lifetime_then_reauthentication_or_close(tmp_path):
    def client(b, sasl, _plain):
        c, r = scram_login(sasl, "SCRAM-SHA-256", "bob", "bob-Secret-256")
        assert ms(r.session_lifetime) == 1000
        session = next(iter(conn.state.sasl for conn in b.broker.connections if conn.state.sasl.complete))
        session.expires_at = session.server.clock()  # the lifetime is over
        assert c.call(17, 1, mechanism="SCRAM-SHA-256").error_code == 0  # re-authentication is allowed
        scram = ScramClient("SCRAM-SHA-256", "bob", "bob-Secret-256")
        r = c.call(36, 2, auth_bytes=scram.first())
        r = c.call(36, 2, auth_bytes=scram.final(r.auth_bytes))
        assert r.error_code == 0 and ms(r.session_lifetime) == 1000
        assert c.call(3, 12, **METADATA).brokers  # a new lifetime
        session.expires_at = session.server.clock()
        c.send(3, 12, request(3, 12, **METADATA))  # anything else after it: closed
        assert closed(c)
        c.close()

    run(tmp_path, client, **{"listener.name.sasl_plaintext.scram-sha-256.connections.max.reauth.ms": "1000"})


def test_credential_strings_are_kafkas(tmp_path):
    async def main():
        async with InProcessBroker(tmp_path / "data", SETTINGS) as b:
            await add_scram_user(b, "u", "pw", 2, iterations=4096)
            text = b.services.snapshot.user_configs["u"]["SCRAM-SHA-512"]
        expected = make_credential("SCRAM-SHA-512", "pw", 4096, b"0123456789abcdef").to_string()
        assert text == expected

    asyncio.run(main())


def test_a_thousand_wrong_passwords_leave_nothing_behind(tmp_path):
    """Each failure closes its own connection: afterwards no connection or session is left, the
    Python heap has not grown with them, all are counted, none of the passwords is logged, and
    a good client is served. (The log goes to a handler that formats as it writes, as a file
    handler does, and not on to pytest's, which keeps every record, and with it each closed
    connection's exception and so the connection.)"""
    import gc
    import io
    import tracemalloc

    text = io.StringIO()
    handler = logging.StreamHandler(text)
    logger = logging.getLogger("odradek")
    logger.addHandler(handler)
    level, propagate = logger.level, logger.propagate
    logger.setLevel(logging.INFO)
    logger.propagate = False

    def client(b, sasl, _plain):
        def attempt(i: int) -> None:
            with RawConnection(sasl) as c:
                c.call(17, 1, mechanism="PLAIN")
                assert c.call(36, 2, auth_bytes=plain("alice", f"guess-{i}-Password")).error_code == 58
                assert closed(c)

        for i in range(100):  # warm up (buffers, pools) before measuring
            attempt(i)
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for i in range(100, 1100):
            attempt(i)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        with RawConnection(sasl) as c:
            c.call(17, 1, mechanism="PLAIN")
            assert c.call(36, 2, auth_bytes=plain("alice", "alice-Secret-1")).error_code == 0
            assert c.call(3, 12, **METADATA).brokers
            left = len(b.broker.connections)
        return grown, left, b.services.metrics.auth_failures[("SASL_PLAINTEXT", "127.0.0.1")][0]

    try:
        grown, left, failures = run(tmp_path, client, **{"metrics.listener": "127.0.0.1:0"})
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
    assert left == 1  # the good client's, nothing of the 1,100 failed ones
    assert failures == 1100
    assert grown < 1_000_000, f"1,000 failed authentications left {grown} bytes allocated"
    log = text.getvalue()
    assert log.count("failed authentication with /127.0.0.1") == 1100
    assert "guess-" not in log and "alice-Secret-1" not in log


def test_one_failed_authentication_logs_one_warning(tmp_path, caplog):
    """A wrong password (SaslAuthenticate, and a bare token after SaslHandshake v0) and an unknown
    mechanism: one WARNING each, the failed authentication's (the close after it is not another)."""
    caplog.set_level(logging.DEBUG)

    def client(b, sasl, _plain):
        caplog.clear()
        with RawConnection(sasl) as c:
            c.call(17, 1, mechanism="PLAIN")
            assert c.call(36, 2, auth_bytes=plain("alice", "Wrong-1")).error_code == 58
            assert closed(c)
        with RawConnection(sasl) as c:
            c.call(17, 0, mechanism="PLAIN")
            token = plain("alice", "Wrong-2")
            c.sock.sendall(struct.pack(">i", len(token)) + token)
            assert closed(c)
        with RawConnection(sasl) as c:
            assert c.call(17, 1, mechanism="OTHER").error_code == 33
            assert closed(c)

    run(tmp_path, client)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 3, warnings
    assert all(w.startswith("failed authentication with /127.0.0.1") for w in warnings), warnings
