"""TLS contexts from Kafka's `ssl.*` settings, for both ends of a connection.

One function, `ssl_context(settings, server=...)`, turns the settings Kafka's Java client and
broker take (keystore, truststore, protocols, cipher suites, endpoint identification and, on
a server, `ssl.client.auth`) into an `ssl.SSLContext`: the odradek client's connections
(client/conn.py) and the broker's listeners and inter-broker connections
(broker/security/tls.py) use it. `settings` maps Kafka's names to values already parsed
(lists for `ssl.enabled.protocols` and `ssl.cipher.suites`, strings otherwise; absent or
empty means Kafka's default).

Stores: PEM (a file holding the private key and the certificate chain, or KIP-651's inline
`ssl.keystore.key` and `ssl.keystore.certificate.chain`; certificates for a truststore,
in a file or inline in `ssl.truststore.certificates`) and PKCS12. Python's `ssl` reads only
PEM files, so inline PEM goes through a private temporary file that is removed at once, and
a PKCS12 store is converted with the `openssl` command (its key re-encrypted with a one-time
password, never written in clear). A JKS store is refused with how to convert it.
"""

from __future__ import annotations

import base64
import os
import re
import secrets
import shutil
import ssl
import subprocess
import tempfile
from collections.abc import Mapping
from typing import Any

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_JKS_MAGIC = (b"\xfe\xed\xfe\xed", b"\xce\xce\xce\xce")  # JKS, JCEKS
_LISTS = ("ssl.enabled.protocols", "ssl.cipher.suites")  # a list, or a comma-separated string
_TLS13_SUITES = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"})


class TlsConfigError(ValueError):
    """The ssl.* settings cannot make a TLS context: the message names the setting and why."""


def ssl_context(settings: Mapping[str, Any], *, server: bool) -> ssl.SSLContext:
    """A context for a TLS server (a broker's listener) or client (a connection to a broker)."""
    get = _getter(settings)

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
    _versions(ctx, get("ssl.enabled.protocols", ["TLSv1.2", "TLSv1.3"]), get("ssl.protocol", "TLSv1.3"))
    suites = get("ssl.cipher.suites", [])
    if suites:
        _cipher_suites(ctx, suites)
    _load_keystore(ctx, get, required=server)
    if server:
        auth = get("ssl.client.auth", "none")
        ctx.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}[auth]
        if auth != "none":
            _load_truststore(ctx, get, ssl.Purpose.CLIENT_AUTH)
    else:
        ctx.check_hostname = get("ssl.endpoint.identification.algorithm", "https") == "https"
        ctx.verify_mode = ssl.CERT_REQUIRED
        _load_truststore(ctx, get, ssl.Purpose.SERVER_AUTH)
    return ctx


def _versions(ctx: ssl.SSLContext, enabled: list[str], protocol: str) -> None:
    unknown = [p for p in enabled if p not in _VERSIONS]
    if unknown:
        raise TlsConfigError(f"ssl.enabled.protocols: {', '.join(unknown)} not served (TLSv1.2, TLSv1.3 only)")
    ctx.minimum_version = min(_VERSIONS[p] for p in enabled)
    highest = max(_VERSIONS[p] for p in enabled)
    if protocol in _VERSIONS:
        highest = min(highest, _VERSIONS[protocol])
    elif protocol != "TLS":
        raise TlsConfigError(f"ssl.protocol={protocol}: expected TLSv1.2, TLSv1.3 or TLS")
    if highest < ctx.minimum_version:
        raise TlsConfigError(f"ssl.protocol={protocol} is below every one of ssl.enabled.protocols={enabled}")
    ctx.maximum_version = highest


def _cipher_suites(ctx: ssl.SSLContext, suites: list[str]) -> None:
    """Kafka names suites as Java does (IANA names); OpenSSL has its own names for TLS 1.2's
    (`openssl ciphers -stdname` gives both), and Python cannot restrict TLS 1.3's."""
    tls13 = {s for s in suites if s in _TLS13_SUITES}
    if tls13 and tls13 != _TLS13_SUITES:
        raise TlsConfigError(
            "ssl.cipher.suites names some TLS 1.3 suites but not all: Python's ssl cannot restrict TLS 1.3 "
            f"suites (name all of {', '.join(sorted(_TLS13_SUITES))} or none)"
        )
    tls12 = [s for s in suites if s not in _TLS13_SUITES]
    if not tls12:
        if ctx.minimum_version < ssl.TLSVersion.TLSv1_3:
            ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        return
    names = _openssl_names()
    unknown = [s for s in tls12 if s not in names]
    if unknown:
        raise TlsConfigError(f"ssl.cipher.suites: unknown cipher suites {', '.join(unknown)}")
    try:
        ctx.set_ciphers(":".join(names[s] for s in tls12))
    except ssl.SSLError as e:
        raise TlsConfigError(f"ssl.cipher.suites: {e}") from None
    if not tls13 and ctx.maximum_version > ssl.TLSVersion.TLSv1_2:
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2  # as Java: no TLS 1.3 suite, no TLS 1.3


def _openssl_names() -> dict[str, str]:
    out = _run_openssl(["ciphers", "-stdname", "ALL"], {}, "ssl.cipher.suites").decode()
    names = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] == "-":
            names[parts[0]] = parts[2]
    return names


# --------------------------------------------------------------------------- stores


def _getter(settings: Mapping[str, Any]) -> Any:
    def get(name: str, default: Any = "") -> Any:
        value = settings.get(name)
        if name in _LISTS and isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        return default if value in (None, "", []) else value

    return get


def keystore_certificate(settings: Mapping[str, Any]) -> bytes | None:
    """The keystore's own certificate (the chain's first) in DER, None without a keystore: what a
    dynamic keystore update compares with the one in use (broker/security/tls_reload.py)."""
    get = _getter(settings)
    location, inline_chain = get("ssl.keystore.location"), get("ssl.keystore.certificate.chain")
    if inline_chain:
        text = inline_chain
    elif not location:
        return None
    elif get("ssl.keystore.type", "JKS") == "PEM":
        try:
            with open(location, encoding="ascii", errors="replace") as f:
                text = f.read()
        except OSError as e:
            raise TlsConfigError(f"ssl.keystore.location: cannot read {location}: {e.strerror}") from None
    else:
        _refuse_jks(location, "ssl.keystore.location")
        text = _run_openssl(
            ["pkcs12", "-in", location, "-nokeys", "-clcerts", "-passin", "env:ODRADEK_STORE_PASSWORD"],
            {"ODRADEK_STORE_PASSWORD": get("ssl.keystore.password")},
            "ssl.keystore.location",
            legacy_retry=True,
        ).decode()
    for m in _PEM_BLOCK.finditer(text):
        if m.group(1) == "CERTIFICATE":
            return base64.b64decode("".join(m.group(2).split()))
    raise TlsConfigError("the keystore holds no certificate")


def _load_keystore(ctx: ssl.SSLContext, get: Any, *, required: bool) -> None:
    kind = get("ssl.keystore.type", "JKS")
    location, key_password = get("ssl.keystore.location"), get("ssl.key.password")
    inline_key, inline_chain = get("ssl.keystore.key"), get("ssl.keystore.certificate.chain")
    if inline_key or inline_chain:
        if kind != "PEM" or location or not (inline_key and inline_chain):
            raise TlsConfigError(
                "ssl.keystore.key and ssl.keystore.certificate.chain go together, with ssl.keystore.type=PEM "
                "and no ssl.keystore.location"
            )
        with _private_file(pem_text(inline_key) + pem_text(inline_chain)) as path:
            _load_chain(ctx, path, key_password, "ssl.keystore.key")
        return
    if not location:
        if required:
            raise TlsConfigError("a TLS listener needs a keystore: ssl.keystore.location (or ssl.keystore.key)")
        return
    if kind == "PEM":
        if get("ssl.keystore.password"):
            raise TlsConfigError("ssl.keystore.password cannot be given with a PEM keystore: use ssl.key.password")
        _load_chain(ctx, location, key_password, "ssl.keystore.location")
        return
    _refuse_jks(location, "ssl.keystore.location")
    store_password = get("ssl.keystore.password")
    one_time = secrets.token_hex(16)
    pem = _run_openssl(
        ["pkcs12", "-in", location, "-passin", "env:ODRADEK_STORE_PASSWORD", "-passout", "env:ODRADEK_KEY_PASSWORD"],
        {"ODRADEK_STORE_PASSWORD": store_password, "ODRADEK_KEY_PASSWORD": one_time},
        "ssl.keystore.location",
        legacy_retry=True,
    )
    with _private_file(pem.decode()) as path:
        _load_chain(ctx, path, one_time, "ssl.keystore.location")


def _load_truststore(ctx: ssl.SSLContext, get: Any, purpose: ssl.Purpose) -> None:
    kind = get("ssl.truststore.type", "JKS")
    location, inline = get("ssl.truststore.location"), get("ssl.truststore.certificates")
    try:
        if inline:
            if kind != "PEM" or location:
                raise TlsConfigError(
                    "ssl.truststore.certificates goes with ssl.truststore.type=PEM and no ssl.truststore.location"
                )
            ctx.load_verify_locations(cadata=pem_text(inline))
        elif not location:
            ctx.load_default_certs(purpose)
        elif kind == "PEM":
            ctx.load_verify_locations(cafile=location)
        else:
            _refuse_jks(location, "ssl.truststore.location")
            pem = _run_openssl(
                ["pkcs12", "-in", location, "-nokeys", "-passin", "env:ODRADEK_STORE_PASSWORD"],
                {"ODRADEK_STORE_PASSWORD": get("ssl.truststore.password")},
                "ssl.truststore.location",
                legacy_retry=True,
            )
            ctx.load_verify_locations(cadata=pem.decode())
    except (ssl.SSLError, OSError) as e:
        raise TlsConfigError(f"cannot load the truststore ({location or 'inline'}): {e}") from None


_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)


def pem_text(value: str) -> str:
    """Inline PEM as OpenSSL reads it: each block's base64 on lines of 64. Kafka's PEM parser
    ignores the whitespace between the markers, so a value written in a properties file with
    continuation lines (which joins them, newlines gone) or on one line is read as well.
    Text that holds no block is returned as it is (OpenSSL then says what is wrong)."""
    blocks = []
    for m in _PEM_BLOCK.finditer(value):
        if ":" in m.group(2):  # RFC 1421 headers (a traditional encrypted key): left as written
            blocks.append(m.group(0) + "\n")
            continue
        body = "".join(m.group(2).split())
        lines = [body[i : i + 64] for i in range(0, len(body), 64)]
        blocks.append("\n".join([f"-----BEGIN {m.group(1)}-----", *lines, f"-----END {m.group(1)}-----"]) + "\n")
    return "".join(blocks) if blocks else value.strip() + "\n"


def _load_chain(ctx: ssl.SSLContext, path: str, password: str, setting: str) -> None:
    try:
        ctx.load_cert_chain(path, password=password or None)
    except ssl.SSLError as e:
        raise TlsConfigError(f"{setting}: cannot load the private key and certificate chain: {e.reason or e}") from None
    except OSError as e:
        raise TlsConfigError(f"{setting}: cannot read {path}: {e.strerror}") from None


def _refuse_jks(location: str, setting: str) -> None:
    try:
        with open(location, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise TlsConfigError(f"{setting}: cannot read {location}: {e.strerror}") from None
    if magic in _JKS_MAGIC:
        raise TlsConfigError(
            f"{setting}: {location} is a Java KeyStore (JKS/JCEKS), which odradek cannot read: convert it with "
            f"`keytool -importkeystore -srckeystore {location} -destkeystore {location}.p12 -deststoretype PKCS12` "
            "and set the type to PKCS12 (or use PEM)"
        )


def _run_openssl(args: list[str], env: dict[str, str], setting: str, *, legacy_retry: bool = False) -> bytes:
    exe = shutil.which("openssl")
    if exe is None:
        raise TlsConfigError(f"{setting}: reading a PKCS12 store needs the openssl command, which is not on PATH")
    full_env = {**os.environ, **env}
    attempts = [args, [*args, "-legacy"]] if legacy_retry else [args]
    err = b""
    for attempt in attempts:
        p = subprocess.run([exe, *attempt], env=full_env, capture_output=True, stdin=subprocess.DEVNULL)
        if p.returncode == 0:
            return p.stdout
        err = p.stderr
    first = err.decode(errors="replace").strip().splitlines()[:1]
    raise TlsConfigError(f"{setting}: openssl cannot read it (wrong password or not PKCS12?): {' '.join(first)}")


class _private_file:
    """A file only this user can read, holding `text`, removed on exit."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.dir = ""

    def __enter__(self) -> str:
        self.dir = tempfile.mkdtemp(prefix="odradek-tls-")
        path = os.path.join(self.dir, "store.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.text)
        return path

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
