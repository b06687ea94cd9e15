"""Certificates for TLS tests, made with the openssl command: a CA, a broker certificate naming
127.0.0.1 and localhost, client certificates; as PEM files (the key in PKCS#8, which Kafka's PEM
keystores want) and PKCS12; and each client's settings for SSL and mutual TLS."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@dataclass(frozen=True)
class Identity:
    """A private key and its certificate signed by the CA."""

    key: Path  # PKCS#8 PEM, unencrypted
    cert: Path  # PEM, the certificate then the CA's
    keystore: Path  # PEM: key then certificate chain (ssl.keystore.type=PEM)
    p12: Path  # PKCS12, password PASSWORD
    subject: str  # as given to openssl (-subj)


PASSWORD = "changeit"


@dataclass(frozen=True)
class Pki:
    dir: Path
    ca: Path  # the CA certificate (PEM): every truststore
    ca_key: Path

    @classmethod
    def create(cls, directory: Path) -> Pki:
        directory.mkdir(parents=True, exist_ok=True)
        _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "ca.key", cwd=directory)
        _openssl(
            "req", "-x509", "-new", "-key", "ca.key", "-days", "2", "-subj", "/CN=odradek test CA",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            "-out", "ca.pem", cwd=directory,
        )  # fmt: skip
        return cls(directory, directory / "ca.pem", directory / "ca.key")

    def identity(self, name: str, subject: str, *, hosts: tuple[str, ...] = ()) -> Identity:
        """A key and certificate for `subject` (openssl -subj form, e.g. "/C=DE/O=odradek/CN=alice"),
        with the given hosts (IP addresses or DNS names) as subject alternative names."""
        d = self.dir
        _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", f"{name}.key", cwd=d)
        _openssl("req", "-new", "-key", f"{name}.key", "-subj", subject, "-out", f"{name}.csr", cwd=d)
        ext = d / f"{name}.ext"
        lines = ["basicConstraints=CA:FALSE", "keyUsage=digitalSignature", "extendedKeyUsage=serverAuth,clientAuth"]
        if hosts:
            san = ",".join(f"IP:{h}" if h.replace(".", "").isdigit() else f"DNS:{h}" for h in hosts)
            lines.append(f"subjectAltName={san}")
        ext.write_text("\n".join(lines) + "\n")
        _openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "2", "-extfile", ext.name, "-out", f"{name}.crt", cwd=d,
        )  # fmt: skip
        cert = d / f"{name}.pem"
        cert.write_text((d / f"{name}.crt").read_text() + self.ca.read_text())
        keystore = d / f"{name}.keystore.pem"
        keystore.write_text((d / f"{name}.key").read_text() + cert.read_text())
        keystore.chmod(0o600)
        _openssl(
            "pkcs12", "-export", "-in", f"{name}.crt", "-inkey", f"{name}.key", "-certfile", "ca.pem",
            "-passout", f"pass:{PASSWORD}", "-out", f"{name}.p12", cwd=d,
        )  # fmt: skip
        return Identity(d / f"{name}.key", cert, keystore, d / f"{name}.p12", subject)

    def pkcs12(self, name: str, password: str) -> Path:
        """Identity `name`'s key and certificate chain (made by `identity`) as a PKCS12 file with
        another password than PASSWORD."""
        out = self.dir / f"{name}.{password}.p12"
        _openssl(
            "pkcs12", "-export", "-in", f"{name}.crt", "-inkey", f"{name}.key", "-certfile", "ca.pem",
            "-passout", f"pass:{password}", "-out", str(out), cwd=self.dir,
        )  # fmt: skip
        return out

    def broker_settings(self, broker: Identity, listener: str = "SSL", client_auth: str = "none") -> dict[str, str]:
        """The overrides of a broker with one PEM-keystore TLS listener `listener`."""
        prefix = f"listener.name.{listener.lower()}."
        return {
            prefix + "ssl.keystore.type": "PEM",
            prefix + "ssl.keystore.location": str(broker.keystore),
            prefix + "ssl.truststore.type": "PEM",
            prefix + "ssl.truststore.location": str(self.ca),
            prefix + "ssl.client.auth": client_auth,
        }

    def client_files(self, client: Identity | None = None):
        """What the client adapters (support/clients) take: SSL, mutual TLS with `client`."""
        from support.clients import TlsFiles

        if client is None:
            return TlsFiles(self.ca)
        return TlsFiles(self.ca, client.cert, client.key, client.keystore)

    def java_client_props(self, client: Identity | None) -> dict[str, str]:
        """The Java client's (and the odradek client's) settings for SSL, with `client`'s
        certificate for mutual TLS."""
        props = {
            "security.protocol": "SSL",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca),
        }
        if client is not None:
            props.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(client.keystore)})
        return props
