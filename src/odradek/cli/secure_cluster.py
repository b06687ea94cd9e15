"""What `odradek cluster up --secure` adds to the local cluster: a private CA and a broker
certificate made with the openssl command, each broker's two listeners, the first SCRAM user and
the clients' settings file.

Each broker listens on
* EXTERNAL (SASL_SSL, SCRAM-SHA-512): the clients' listener, the port `cluster up` prints;
* INTERNAL (SSL with mutual TLS, `ssl.client.auth=required`): the inter-broker listener; the
  brokers present the broker certificate to each other (principal `User:CN=odradek-broker`).
The StandardAuthorizer is on, with the brokers' principal and `User:admin` as super users.

The admin user's SCRAM-SHA-512 credential is created through AlterUserScramCredentials on the
INTERNAL listener with the broker certificate (a super user's identity), salted by the client, so
no password reaches a broker; its random password goes into `client.properties` (mode 0600), the
settings Kafka's tools (`--command-config`, `--producer.config`) and odradek's client take.
"""

from __future__ import annotations

import asyncio
import secrets
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

BROKER_SUBJECT = "/O=odradek/CN=odradek-broker"
BROKER_PRINCIPAL = "User:CN=odradek-broker,O=odradek"
ADMIN_USER = "admin"
MECHANISM = "SCRAM-SHA-512"
SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule required"
CERT_DAYS = "30"


class SecureSetupError(RuntimeError):
    """The certificates or the admin user could not be made: the message says which step."""


@dataclass(frozen=True)
class SecureFiles:
    dir: Path
    ca: Path  # the CA certificate: every truststore
    keystore: Path  # the brokers' key and certificate chain (PEM keystore)
    client_properties: Path


def _openssl(directory: Path, *args: str) -> None:
    try:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True, timeout=60)
    except FileNotFoundError:
        raise SecureSetupError("the openssl command is needed for --secure (apt-get install openssl)") from None
    except subprocess.CalledProcessError as e:
        raise SecureSetupError(f"openssl {args[0]} failed: {e.stderr.decode(errors='replace').strip()}") from None


def make_pki(directory: Path) -> SecureFiles:
    """A CA and one certificate for every broker (127.0.0.1 and localhost), made once per DIR."""
    d = directory
    d.mkdir(parents=True, exist_ok=True)
    files = SecureFiles(d, d / "ca.pem", d / "broker.keystore.pem", d / "client.properties")
    if files.ca.exists() and files.keystore.exists():
        return files
    curve = ("-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256")
    _openssl(d, "genpkey", *curve, "-out", "ca.key")
    _openssl(d, "req", "-x509", "-new", "-key", "ca.key", "-days", CERT_DAYS, "-subj", "/O=odradek/CN=odradek local CA",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             "-out", "ca.pem")  # fmt: skip
    _openssl(d, "genpkey", *curve, "-out", "broker.key")
    _openssl(d, "req", "-new", "-key", "broker.key", "-subj", BROKER_SUBJECT, "-out", "broker.csr")
    (d / "broker.ext").write_text(
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n"
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
    )
    _openssl(d, "x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", CERT_DAYS, "-extfile", "broker.ext", "-out", "broker.crt")  # fmt: skip
    for private in ("ca.key", "broker.key"):
        (d / private).chmod(0o600)
    files.keystore.write_text((d / "broker.key").read_text() + (d / "broker.crt").read_text() + files.ca.read_text())
    files.keystore.chmod(0o600)
    return files


def broker_overrides(files: SecureFiles, external_port: int, internal_port: int) -> list[str]:
    """One broker's settings (`--override` values) for the two listeners and the authorizer."""
    settings = {
        "listeners": f"EXTERNAL://127.0.0.1:{external_port},INTERNAL://127.0.0.1:{internal_port}",
        "listener.security.protocol.map": "EXTERNAL:SASL_SSL,INTERNAL:SSL",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": MECHANISM,
        f"listener.name.external.{MECHANISM.lower()}.sasl.jaas.config": SCRAM_LOGIN + ";",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:{ADMIN_USER};{BROKER_PRINCIPAL}",
    }
    for listener in ("external", "internal"):
        settings[f"listener.name.{listener}.ssl.keystore.type"] = "PEM"
        settings[f"listener.name.{listener}.ssl.keystore.location"] = str(files.keystore)
    settings["listener.name.internal.ssl.truststore.type"] = "PEM"
    settings["listener.name.internal.ssl.truststore.location"] = str(files.ca)
    settings["listener.name.internal.ssl.client.auth"] = "required"
    return [f"{k}={v}" for k, v in settings.items()]


def client_settings(files: SecureFiles, password: str) -> dict[str, str]:
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": MECHANISM,
        "sasl.jaas.config": f'{SCRAM_LOGIN} username="{ADMIN_USER}" password="{password}";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(files.ca),
    }


def write_client_properties(files: SecureFiles, password: str) -> Path:
    path = files.client_properties
    path.touch(mode=0o600)
    path.chmod(0o600)
    lines = [f"{k}={v}" for k, v in client_settings(files, password).items()]
    path.write_text("# odradek cluster up --secure: the admin user's client settings\n" + "\n".join(lines) + "\n")
    return path


def create_admin(files: SecureFiles, internal_bootstrap: str, timeout: float = 90) -> str:
    """The admin user's credential (a new random password) through the INTERNAL listener, as the
    brokers' identity; retried until a broker answers. The password."""
    from odradek.client import errors as E
    from odradek.client.aio import AIOAdmin, UserScramCredentialUpsertion

    password = secrets.token_urlsafe(18)
    config = {
        "bootstrap.servers": internal_bootstrap,
        "security.protocol": "SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(files.keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(files.ca),
        "default.api.timeout.ms": 10000,
    }

    async def once() -> None:
        async with AIOAdmin(config) as admin:
            await admin.alter_user_scram_credentials(
                [UserScramCredentialUpsertion(ADMIN_USER, MECHANISM, password, iterations=8192)]
            )

    deadline = time.monotonic() + timeout
    while True:
        try:
            asyncio.run(once())
            return password
        except (E.KafkaError, OSError) as e:
            if time.monotonic() > deadline:
                raise SecureSetupError(f"could not create the admin user: {type(e).__name__}: {e}") from None
            time.sleep(0.5)
