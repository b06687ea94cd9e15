"""The Apache Kafka Java client (kafka-clients 3.9.1), through tests/clients/java/KafkaCli.java."""

from __future__ import annotations

import shutil

from support.clients.base import GROUP_REBALANCE_TIMEOUT_MS, GROUP_SESSION_TIMEOUT_MS, JAVA_DIR, _acks_str
from support.clients.cli import JsonCliClient


class JavaClient(JsonCliClient):
    """Apache Kafka Java client 3.9.1 through tests/clients/java/KafkaCli.java."""

    name = "java"

    @classmethod
    def unavailable_reason(cls):
        if shutil.which("java") is None:
            return "no java on PATH"
        if not (JAVA_DIR / "kafka-clients.jar").is_file() or not (JAVA_DIR / "classes" / "KafkaCli.class").is_file():
            return "Java client not built: run scripts/install-test-deps.sh"
        return None

    def base_cmd(self):
        return [
            "java",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Xshare:auto",
            "-cp",
            f"{JAVA_DIR}/*:{JAVA_DIR}/classes",
            "KafkaCli",
        ]

    def produce_args(self, acks, compression, idempotent):
        args = ["--acks", _acks_str(acks), "--compression-type", compression or "none"]
        if idempotent is not None:
            args += ["--enable-idempotence", "true" if idempotent else "false"]
        elif acks != -1:
            args += ["--enable-idempotence", "false"]
        return args

    def consume(
        self,
        topic,
        *,
        expected,
        timeout=30,
        from_beginning=True,
        partitions=None,
        group=None,
        start_offset=None,
        reset=None,
    ):
        args_extra = []
        if group is not None:
            args_extra = [
                "--prop",
                f"session.timeout.ms={GROUP_SESSION_TIMEOUT_MS}",
                "--prop",
                f"max.poll.interval.ms={GROUP_REBALANCE_TIMEOUT_MS}",
            ]
        self._extra = args_extra
        try:
            return super().consume(
                topic,
                expected=expected,
                timeout=timeout,
                from_beginning=from_beginning,
                partitions=partitions,
                group=group,
                start_offset=start_offset,
                reset=reset,
            )
        finally:
            self._extra = []

    _extra: list[str] = []

    def _run(self, args, **kw):
        return super()._run(args + self._extra + self._tls_props(), **kw)

    def _tls_props(self) -> list[str]:
        props = {"security.protocol": self.security_protocol} if self.tls or self.sasl else {}
        if self.sasl is not None:
            module = "plain.PlainLoginModule" if self.sasl.mechanism == "PLAIN" else "scram.ScramLoginModule"
            props["sasl.mechanism"] = self.sasl.mechanism
            props["sasl.jaas.config"] = (
                f"org.apache.kafka.common.security.{module} required "
                f'username="{self.sasl.username}" password="{self.sasl.password}";'
            )
        if self.tls is None:
            return [a for k, v in props.items() for a in ("--prop", f"{k}={v}")]
        props |= {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.tls.ca)}
        if self.tls.keystore is not None:
            props.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.tls.keystore)})
        return [a for k, v in props.items() for a in ("--prop", f"{k}={v}")]
