"""The adapters that drive a client program over JSON lines on stdin/stdout (java, kafkajs)."""

from __future__ import annotations

import json
import subprocess

from support.clients.base import Client, ClientError, _json_rec, _public, _rec_json, _reset_policy, normalize_kind


class JsonCliClient(Client):
    """Clients driven through a subprocess speaking the KafkaCli JSON-lines contract."""

    def base_cmd(self) -> list[str]:
        raise NotImplementedError

    def _run(self, args: list[str], *, stdin: str | None = None, timeout_s: float | None = None) -> list[dict]:
        t = timeout_s if timeout_s is not None else self.timeout
        cmd = self.base_cmd() + ["--bootstrap", self.bootstrap, "--timeout-ms", str(int(t * 1000))] + args
        try:
            p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=t * 3 + 30)
        except subprocess.TimeoutExpired as e:
            msg = f"{' '.join(cmd[-len(args) :])} hung; stderr: {e.stderr!r:.2000}"
            raise ClientError(self.name, "Timeout", msg) from None
        lines = []
        for line in p.stdout.splitlines():
            line = line.strip()
            if line.startswith("{"):
                lines.append(json.loads(line))
        if lines and "error" in lines[-1]:
            err = lines[-1]
            raise ClientError(self.name, normalize_kind(err["error"]), err.get("message", ""))
        if p.returncode != 0:
            raise ClientError(self.name, "Other", f"exit {p.returncode}; stderr tail:\n{p.stderr[-3000:]}")
        return lines

    def create_topic(self, name, partitions, configs=None, *, replication_factor=1):
        args = ["create-topic", name, str(partitions), "--replication-factor", str(replication_factor)]
        args += [f"{k}={v}" for k, v in (configs or {}).items()]
        self._run(args)

    def delete_topic(self, name):
        self._run(["delete-topic", name])

    def list_topics(self):
        return _public(self._run(["list-topics"])[0]["topics"])

    def describe_topic(self, name):
        out = self._run(["describe-topic", name])[0]
        return {p["partition"]: p["leader"] for p in out["partitions"]}

    def produce_args(self, acks, compression, idempotent) -> list[str]:
        raise NotImplementedError

    def produce(self, topic, records, *, acks=-1, compression=None, idempotent=None):
        args = ["produce", topic] + self.produce_args(acks, compression, idempotent)
        out = self._run(args, stdin="".join(_rec_json(r) + "\n" for r in records))
        return [(d["partition"], d["offset"]) for d in out]

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
        policy = _reset_policy(self.name, reset, from_beginning, start_offset, group, partitions)
        args = ["consume", topic, "--max", str(expected)]
        if self.isolation is not None:
            args += ["--isolation", self.isolation]
        if from_beginning:
            args.append("--from-beginning")
        if reset is not None:
            args += self.reset_args(policy)
        if start_offset is not None:
            args += ["--offset", str(start_offset)]
        if partitions is not None:
            args += ["--assign", ",".join(str(p) for p in partitions)]
        if group is not None:
            args += ["--group", group]
        return [_json_rec(d) for d in self._run(args, timeout_s=timeout)]

    def reset_args(self, policy: str) -> list[str]:
        return ["--reset", policy]

    def offsets_for_times(self, topic, ts):
        return {d["partition"]: d["offset"] for d in self._run(["offsets-for-times", topic, str(ts)])}
