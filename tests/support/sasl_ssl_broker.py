"""A broker process with a PLAINTEXT listener (setup, checks) and a SASL_SSL listener
(SCRAM-SHA-512, the test CA's certificate), SCRAM users created over PLAINTEXT, and a
client .properties file for the SASL_SSL listener as Kafka's tools take one (--command-config)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from support.broker import BrokerProcess, free_port

CERTS = Path(__file__).resolve().parent / "tls_certs"
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required"


@contextmanager
def sasl_ssl_broker(workdir: Path, users: dict[str, str]) -> Iterator[BrokerProcess]:
    """The broker, started, with `users` (name -> password) as SCRAM-SHA-512 users; its
    ``sasl_ssl_bootstrap`` is the SASL_SSL listener, ``bootstrap`` the PLAINTEXT one."""
    from odradek.client import Admin, UserScramCredentialUpsertion

    plain_port, sasl_ssl_port = free_port(), free_port()
    b = BrokerProcess(
        workdir,
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},SASL_SSL://127.0.0.1:{sasl_ssl_port}",
            "inter.broker.listener.name": "PLAINTEXT",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": SCRAM_JAAS + ";",
            "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
            "listener.name.sasl_ssl.ssl.keystore.location": str(CERTS / "broker.keystore.pem"),
        },
        port=plain_port,
    )
    b.sasl_ssl_bootstrap = f"127.0.0.1:{sasl_ssl_port}"
    with b.start():
        with Admin(bootstrap_servers=b.bootstrap) as a:
            a.alter_user_scram_credentials(
                [UserScramCredentialUpsertion(u, "SCRAM-SHA-512", pw) for u, pw in users.items()]
            )
        yield b


def client_settings(user: str, password: str) -> dict[str, str]:
    """The Java client's settings for the SASL_SSL listener."""
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": f'{SCRAM_JAAS} username="{user}" password="{password}";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(CERTS / "ca.pem"),
    }


def client_properties(path: Path, user: str, password: str) -> str:
    """`client_settings` written as a .properties file; returns its path."""
    path.write_text("".join(f"{k}={v}\n" for k, v in client_settings(user, password).items()))
    return str(path)
