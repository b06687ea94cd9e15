"""`odradek users` and `odradek acls` run as processes against a broker process with an authorizer
and a SASL_SSL listener, reached with a --command-config file as Kafka's tools take one: the first
super user is created over the PLAINTEXT listener (whose ANONYMOUS principal is a super user here),
every later command goes over SASL_SSL as that user; a user added by the CLI authenticates; a
principal without cluster ALTER/DESCRIBE is refused with the broker's error; an unknown client
setting in the file is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.broker import BrokerProcess, free_port

CERTS = Path(__file__).resolve().parents[2] / "support" / "tls_certs"
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    plain_port, sasl_ssl_port = free_port(), free_port()
    b = BrokerProcess(
        tmp_path_factory.mktemp("secure-cli"),
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},SASL_SSL://127.0.0.1:{sasl_ssl_port}",
            "inter.broker.listener.name": "PLAINTEXT",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
            "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
            "listener.name.sasl_ssl.ssl.keystore.location": str(CERTS / "broker.keystore.pem"),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin;User:ANONYMOUS",
        },
        port=plain_port,
    )
    b.sasl_ssl_bootstrap = f"127.0.0.1:{sasl_ssl_port}"
    with b.start():
        yield b


def properties(path: Path, user: str, password: str, mechanism: str = "SCRAM-SHA-512", **extra: str) -> str:
    lines = [
        "security.protocol=SASL_SSL",
        f"sasl.mechanism={mechanism}",
        f'sasl.jaas.config={SCRAM_JAAS[:-1]} username="{user}" password="{password}";',
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={CERTS / 'ca.pem'}",
        *(f"{k}={v}" for k, v in extra.items()),
    ]
    path.write_text("# client settings\n" + "\n".join(lines) + "\n")
    return str(path)


def cli(bootstrap: str, *args: str, config: str | None = None, ok: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="220", NO_COLOR="1", TERM="dumb")
    cmd = [sys.executable, "-m", "odradek", *args, "--bootstrap-server", bootstrap]
    if config is not None:
        cmd += ["--command-config", config]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60, stdin=subprocess.DEVNULL)
    if ok:
        assert p.returncode == 0, f"{args}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def test_users_and_acls_over_sasl_ssl_with_a_command_config(broker, tmp_path):
    out = cli(broker.bootstrap, "users", "add", "admin", "--password", "admin-pw").stdout
    assert "Added SCRAM-SHA-512 credentials of user admin." in out
    admin = properties(tmp_path / "admin.properties", "admin", "admin-pw")
    sasl = broker.sasl_ssl_bootstrap

    cli(sasl, "users", "add", "alice", "--password", "alice-pw", "--iterations", "8192",
        "--mechanism", "SCRAM-SHA-256", "--mechanism", "SCRAM-SHA-512", config=admin)  # fmt: skip
    listed = cli(sasl, "users", "list", config=admin).stdout.splitlines()
    assert (
        "SCRAM credential configs for user-principal 'alice' are "
        "SCRAM-SHA-256=iterations=8192,SCRAM-SHA-512=iterations=8192"
    ) in listed
    assert any("'admin' are SCRAM-SHA-512=iterations=4096" in line for line in listed)

    cli(sasl, "acls", "add", "--allow-principal", "User:alice", "--operation", "Read", "--operation", "describe",
        "--topic", "orders", config=admin)  # fmt: skip
    cli(sasl, "acls", "add", "--deny-principal", "User:bob", "--operation", "WRITE", "--topic", "ord",
        "--resource-pattern-type", "prefixed", config=admin)  # fmt: skip
    out = cli(sasl, "acls", "add", "--allow-principal", "User:carol", "--consumer", "--topic", "t2", "--group", "g",
              config=admin).stdout  # fmt: skip
    assert out.startswith("Adding ACLs: 3")

    every = cli(sasl, "acls", "list", config=admin).stdout
    assert every.count("Current ACLs for resource") == 4
    assert (
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=ord, patternType=PREFIXED)`: \n"
        " \t(principal=User:bob, host=*, operation=WRITE, permissionType=DENY)\n"
    ) in every
    assert "(principal=User:carol, host=*, operation=READ, permissionType=ALLOW)" in every
    # match: every pattern applying to topic "orders"
    match = cli(sasl, "acls", "list", "--topic", "orders", "--resource-pattern-type", "match", config=admin).stdout
    assert match.count("Current ACLs for resource") == 2 and "name=orders" in match and "name=ord," in match
    literal = cli(sasl, "acls", "list", "--topic", "orders", config=admin).stdout
    assert literal.count("Current ACLs for resource") == 1 and literal.count("principal=User:alice") == 2
    assert cli(sasl, "acls", "list", "--principal", "User:carol", config=admin).stdout.count("User:carol") == 3

    # alice authenticates with the credential the CLI salted, and is no super user: refused
    alice = properties(tmp_path / "alice.properties", "alice", "alice-pw", "SCRAM-SHA-256")
    refused = cli(sasl, "acls", "list", config=alice, ok=False)
    assert refused.returncode == 1 and "ClusterAuthorizationFailedError" in refused.stderr, refused.stderr
    wrong = properties(tmp_path / "wrong.properties", "alice", "not-her-password")
    refused = cli(sasl, "acls", "list", config=wrong, ok=False)
    assert refused.returncode == 1 and "SaslAuthenticationFailedError" in refused.stderr, refused.stderr
    assert "not-her-password" not in refused.stderr

    out = cli(sasl, "acls", "remove", "--topic", "ord", "--resource-pattern-type", "prefixed", config=admin).stdout
    assert out.startswith("Removed ACLs: 1") and "User:bob" in out
    out = cli(sasl, "acls", "remove", "--topic", "orders", "--allow-principal", "User:alice", "--operation", "Read",
              config=admin).stdout  # fmt: skip
    assert out.startswith("Removed ACLs: 1") and "operation=READ" in out
    assert cli(sasl, "acls", "list", config=admin).stdout.count("(principal=") == 4

    out = cli(sasl, "users", "delete", "alice", config=admin).stdout
    assert out.strip() == "Deleted SCRAM-SHA-256, SCRAM-SHA-512 credentials of user alice."
    gone = cli(sasl, "users", "list", "alice", config=admin, ok=False)
    assert gone.returncode == 1 and "ResourceNotFoundError" in gone.stderr


def test_a_command_config_with_a_setting_the_client_does_not_know_is_refused(broker, tmp_path):
    bad = properties(tmp_path / "bad.properties", "admin", "admin-pw", **{"sasl.login.frobnicate": "1"})
    p = cli(broker.sasl_ssl_bootstrap, "users", "list", config=bad, ok=False)
    assert p.returncode == 1 and "unknown configuration 'sasl.login.frobnicate'" in p.stderr, p.stderr


def test_acls_add_refuses_an_unknown_operation_and_a_missing_principal(broker):
    p = cli(broker.bootstrap, "acls", "add", "--allow-principal", "User:x", "--operation", "Frob", "--topic", "t",
            ok=False)  # fmt: skip
    assert p.returncode == 2 and "unknown operation 'Frob'" in p.stderr
    p = cli(broker.bootstrap, "acls", "add", "--operation", "Read", "--topic", "t", ok=False)
    assert p.returncode == 2 and "name a principal" in p.stderr


def test_topics_console_groups_and_transactions_over_sasl_ssl_with_a_command_config(broker, tmp_path):
    """The other commands that talk to a broker take the same file: `topics` (the describe's
    offsets through a consumer too), `produce` / `consume` (as --producer.config / --consumer.config,
    Kafka's console tools' names), `groups`, `transactions` and `quotas`; the principal is the file's."""
    cli(broker.bootstrap, "users", "add", "admin", "--password", "admin-pw")
    cli(broker.bootstrap, "users", "add", "carl", "--password", "carl-pw")
    admin = properties(tmp_path / "admin.properties", "admin", "admin-pw")
    sasl = broker.sasl_ssl_bootstrap

    assert cli(sasl, "topics", "create", "cc-t", "-p", "2", config=admin).stdout.strip() == "Created topic cc-t."
    assert "cc-t" in cli(sasl, "topics", "list", config=admin).stdout.split()
    lines = tmp_path / "lines.txt"
    lines.write_text("k1:one\nk2:two\nk3:three\n")
    env = dict(os.environ, NO_COLOR="1", TERM="dumb")
    produce = [sys.executable, "-m", "odradek", "produce", "cc-t", "--key-separator", ":", "--input", str(lines),
               "--bootstrap-server", sasl, "--producer.config", admin]  # fmt: skip
    p = subprocess.run(produce, capture_output=True, text=True, env=env, timeout=60, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr
    described = json.loads(cli(sasl, "topics", "describe", "cc-t", "--json", config=admin).stdout)
    assert sum(part["log_end_offset"] for part in described[0]["partitions"]) == 3
    consume = [sys.executable, "-m", "odradek", "consume", "cc-t", "--from-beginning", "--group", "cc-g", "-n", "3",
               "--timeout-ms", "20000", "--bootstrap-server", sasl, "--consumer.config", admin]  # fmt: skip
    p = subprocess.run(consume, capture_output=True, text=True, env=env, timeout=60, stdin=subprocess.DEVNULL)
    assert p.returncode == 0 and sorted(p.stdout.split()) == ["one", "three", "two"], p.stdout + p.stderr
    assert "cc-g" in cli(sasl, "groups", "list", config=admin).stdout
    assert "cc-t" in cli(sasl, "groups", "describe", "cc-g", config=admin).stdout
    cli(sasl, "transactions", "list", config=admin)
    cli(sasl, "quotas", "alter", "--client-id", "cc", "--add-config", "producer_byte_rate=1024", config=admin)
    out = cli(sasl, "quotas", "describe", "--client-id", "cc", config=admin).stdout
    assert "Quota configs for client-id 'cc' are producer_byte_rate=1024.0" in out, out
    cli(sasl, "topics", "alter", "cc-t", "--partitions", "3", config=admin)
    assert len(json.loads(cli(sasl, "topics", "describe", "cc-t", "--json", config=admin).stdout)[0]["partitions"]) == 3

    # carl authenticates from his file and is no super user, with no ACL: refused
    carl = properties(tmp_path / "carl.properties", "carl", "carl-pw")
    refused = cli(sasl, "topics", "delete", "cc-t", config=carl, ok=False)
    assert refused.returncode == 1 and "AuthorizationFailed" in refused.stderr, refused.stderr
    cli(sasl, "topics", "delete", "cc-t", config=admin)
    assert "cc-t" not in cli(sasl, "topics", "list", config=admin).stdout.split()
