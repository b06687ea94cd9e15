"""kafkajs, through tests/clients/node/kafkajs_cli.js run by node."""

from __future__ import annotations

import shutil

from support.clients.base import NODE_DIR, Unsupported
from support.clients.cli import JsonCliClient


class KafkajsClient(JsonCliClient):
    """kafkajs 2.2.4 through tests/clients/node/kafkajs_cli.js (gzip is its only codec)."""

    name = "kafkajs"

    @classmethod
    def unavailable_reason(cls):
        if shutil.which("node") is None:
            return "no node on PATH"
        if not (NODE_DIR / "node_modules" / "kafkajs").is_dir():
            return "kafkajs not installed: run scripts/install-test-deps.sh"
        return None

    def base_cmd(self):
        cmd = ["node", str(NODE_DIR / "kafkajs_cli.js")]
        if self.tls is not None:
            cmd += ["--ssl-ca", str(self.tls.ca)]
            if self.tls.cert is not None:
                cmd += ["--ssl-cert", str(self.tls.cert), "--ssl-key", str(self.tls.key)]
        if self.sasl is not None:
            cmd += ["--sasl-mechanism", self.sasl.mechanism.lower(), "--sasl-username", self.sasl.username]
            cmd += ["--sasl-password", self.sasl.password]
        return cmd

    def reset_args(self, policy: str) -> list[str]:
        return []  # checked in consume(): kafkajs_cli.js has no --reset

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
        # kafkajs has no auto.offset.reset: on OFFSET_OUT_OF_RANGE its consumer group always
        # seeks to the default offset (earliest with fromBeginning, else latest) and logs it
        # (consumerGroup.js recoverFromOffsetOutOfRange); the error never reaches the caller.
        if reset == "none":
            raise Unsupported(
                self.name,
                "kafkajs always resets an out-of-range offset (to earliest with "
                "fromBeginning, else latest): it has no 'none' policy",
            )
        if reset is not None and (reset == "earliest") != from_beginning:
            raise Unsupported(self.name, "kafkajs resets to earliest exactly when fromBeginning is set")
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

    def produce_args(self, acks, compression, idempotent):
        if compression not in (None, "none", "gzip"):
            raise Unsupported(self.name, f"kafkajs supports only gzip compression, not {compression}")
        args = ["--acks", str(acks), "--compression-type", compression or "none"]
        if idempotent:
            args += ["--enable-idempotence", "true"]
        return args
