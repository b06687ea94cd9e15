"""A TLS listener's keystore and truststore replaced without a restart (KIP-226).

`listener.name.<l>.ssl.keystore.*` and `listener.name.<l>.ssl.truststore.*` (settings/ssl.py
RECONFIGURABLE) set as this broker's own dynamic settings (`kafka-configs --entity-type brokers
--entity-name <id> --alter --add-config ...`, AlterConfigs or IncrementalAlterConfigs) are checked
here before they are kept (broker/config_admin.py), as Kafka's SslFactory checks them: the new
stores must load; the new certificate must have the distinguished name of the one in use (unless
`ssl.allow.dn.changes`) and every subject alternative name of it (unless `ssl.allow.san.changes`);
a listener without a truststore cannot get one. Once kept in the metadata (ZooKeeper's
`/config/brokers/<id>`, the single node's metadata file), broker/dynamic_config.py lays them over the
static settings and `TlsListeners.reload` builds the listener's context again: new connections get
the new certificate, connections already open keep theirs. Setting the same values again reloads
the files (a keystore rewritten in place), as Kafka's `reloadUpdatedFilesWithoutConfigChange`.

The unprefixed names, and the listener-scoped ones for every broker at once (the default entity),
are refused as Kafka refuses them. Password-type values (store and key passwords, KIP-651's inline
PEM) are kept encrypted with `password.encoder.secret` (broker/password_encoder.py, Kafka's format)
and refused with Kafka's answer when that secret is not set.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from odradek.broker.security.tls import (
    ListenerTls,
    TlsConfigError,
    java_alt_names,
    rfc2253_subject,
    subject_alt_names,
)

log = logging.getLogger("odradek.broker.security.tls")


class TlsUpdateRefused(ValueError):
    """A dynamic keystore or truststore update that cannot be applied: the message says why."""


class TlsListeners:
    """The TLS listeners' current contexts, by listener name; what the accept loop takes for
    each new connection."""

    def __init__(self) -> None:
        self._current: dict[str, ListenerTls] = {}

    def get(self, listener: str) -> ListenerTls | None:
        return self._current.get(listener)

    def by_lower_name(self, lower: str) -> str | None:
        """The listener named `lower` in listener.name.<lower>.… settings, if it is a TLS one."""
        return next((name for name in self._current if name.lower() == lower), None)

    def build(self, config: object, listener: str) -> None:
        """At startup: the listener's context from its settings (TlsConfigError if they cannot make one)."""
        self._current[listener] = ListenerTls.of(config, listener)

    def check(self, config: object, listener: str) -> ListenerTls:
        """The listener's context as `config` (with the new dynamic settings) makes it, if it may
        replace the one in use; TlsUpdateRefused otherwise."""
        old = self._current[listener]
        try:
            new = ListenerTls.of(config, listener)
        except TlsConfigError as e:
            raise TlsUpdateRefused(f"Validation of dynamic config update of SSLFactory failed: {e}") from None
        if old.certificate is not None and new.certificate is not None:
            for_listener = config.for_listener  # type: ignore[attr-defined]
            old_dn, new_dn = rfc2253_subject(old.certificate), rfc2253_subject(new.certificate)
            if not for_listener(listener, "ssl.allow.dn.changes") and old_dn.lower() != new_dn.lower():
                raise TlsUpdateRefused(
                    "Validation of dynamic config update of SSLFactory failed: Keystore DistinguishedName does "
                    f"not match: existing={{DN={old_dn}}}, new={{DN={new_dn}}}"
                )
            old_san, new_san = subject_alt_names(old.certificate), subject_alt_names(new.certificate)
            if not for_listener(listener, "ssl.allow.san.changes") and not old_san <= new_san:
                raise TlsUpdateRefused(
                    "Validation of dynamic config update of SSLFactory failed: Keystore SubjectAltNames do not "
                    f"match: existing={{SAN={java_alt_names(old_san)}}}, new={{SAN={java_alt_names(new_san)}}}"
                )
        if not old.has_truststore and new.has_truststore:
            raise TlsUpdateRefused(
                "Validation of dynamic config update of SSLFactory failed: Cannot add SSL truststore to an "
                "existing listener for which no truststore was configured."
            )
        return new

    def install(self, listener: str, tls: ListenerTls) -> None:
        self._current[listener] = tls
        log.info("listener %s: new TLS keystore and truststore in use for new connections", listener)

    def reload(self, config: object, listeners: Iterable[str]) -> None:
        """After the dynamic settings changed (checked before they were kept): build these
        listeners' contexts again. One that cannot be built (a file changed since) keeps the
        context in use, with an error saying why."""
        for listener in listeners:
            if listener not in self._current:
                continue
            try:
                self.install(listener, self.check(config, listener))
            except TlsUpdateRefused as e:
                log.error("listener %s keeps its TLS keystore and truststore: %s", listener, e)
