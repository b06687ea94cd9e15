"""kcat (Debian's, librdkafka), one process per operation."""

from __future__ import annotations

import json
import os
import random
import re
import selectors
import shutil
import subprocess
import time

from support.clients.base import (
    GROUP_REBALANCE_TIMEOUT_MS,
    GROUP_SESSION_TIMEOUT_MS,
    Client,
    ClientError,
    Rec,
    Unsupported,
    _acks_str,
    _kind_from_text,
    _public,
    _reset_policy,
    java_partition,
)
from support.clients.confluent import ConfluentClient

_DELIVERED = re.compile(r"Message delivered to partition (-?\d+) \(offset (-?\d+)\)")


class KcatClient(Client):
    """Debian's kcat 1.7.1 (built on librdkafka 2.0.2), via subprocess.

    kcat has no admin commands: create_topic/delete_topic go through
    librdkafka's AdminClient (confluent-kafka); list/describe use ``kcat -L -J``.
    Produce computes the Java (murmur2) partition of each key itself and sends
    one kcat run per (partition, headers, null-ness) run of records, using
    unusual delimiters; offsets come from ``-vvv`` delivery reports. kcat cannot
    set per-message timestamps (Unsupported). Consume uses ``-J``, read as bytes
    with surrogateescape, which round-trips arbitrary bytes.
    """

    name = "kcat"
    headers_per_run = True
    KDELIM = "\x1f\x1dK\x1d\x1f"
    MDELIM = "\x1e\x1dM\x1d\x1e"

    @classmethod
    def unavailable_reason(cls):
        return None if shutil.which("kcat") else "kcat not installed: run scripts/install-test-deps.sh"

    def _cmd(self, *args, extra=()):
        cmd = ["kcat", "-b", self.bootstrap, "-m", str(int(self.timeout)), "-X", "partitioner=murmur2_random"]
        for x in [*extra, *(f"{k}={v}" for k, v in self.librdkafka_tls().items())]:
            cmd += ["-X", x]
        return cmd + list(args)

    def _check(self, p: subprocess.CompletedProcess, what: str):
        err = p.stderr if isinstance(p.stderr, str) else p.stderr.decode("utf-8", "replace")
        errors = [ln for ln in err.splitlines() if "ERROR" in ln or "Delivery failed" in ln]
        if p.returncode != 0 or errors:
            text = "\n".join(errors) or err[-2000:]
            raise ClientError(self.name, _kind_from_text(text), f"{what}: exit {p.returncode}: {text}")

    def _run(self, cmd, input=None, timeout=None):
        try:
            return subprocess.run(cmd, input=input, capture_output=True, timeout=timeout or self.timeout * 3 + 10)
        except subprocess.TimeoutExpired as e:
            raise ClientError(self.name, "Timeout", f"{cmd[3:]} hung") from e

    def create_topic(self, name, partitions, configs=None, *, replication_factor=1):
        ConfluentClient(self.bootstrap, timeout=self.timeout, tls=self.tls, sasl=self.sasl).create_topic(
            name, partitions, configs, replication_factor=replication_factor
        )

    def delete_topic(self, name):
        ConfluentClient(self.bootstrap, timeout=self.timeout, tls=self.tls, sasl=self.sasl).delete_topic(name)

    def _metadata(self, topic=None):
        args = ["-L", "-J"] + (["-t", topic] if topic else [])
        p = self._run(self._cmd(*args))
        self._check(p, "metadata")
        return json.loads(p.stdout)

    def list_topics(self):
        return _public(t["topic"] for t in self._metadata()["topics"])

    def describe_topic(self, name):
        for t in self._metadata(name)["topics"]:
            if t["topic"] == name:
                if t.get("error"):
                    raise ClientError(self.name, _kind_from_text(t["error"]), t["error"])
                return {p["partition"]: p["leader"] for p in t["partitions"]}
        raise ClientError(self.name, "UnknownTopicOrPartition", name)

    def produce(self, topic, records, *, acks=-1, compression=None, idempotent=None):
        nparts = None
        plan = []
        for i, r in enumerate(records):
            if r.timestamp is not None:
                raise Unsupported(self.name, "kcat cannot set per-message timestamps")
            for k, v in r.headers:
                if v is None or b"=" in k.encode():
                    raise Unsupported(self.name, "kcat -H cannot send null header values or '=' in names")
            part = r.partition
            if part is None:
                if nparts is None:
                    nparts = len(self.describe_topic(topic))
                part = java_partition(r.key, nparts) if r.key is not None else random.randrange(nparts)
            for b in (r.key, r.value):
                if b is not None and (self.KDELIM.encode() in b or self.MDELIM.encode() in b):
                    raise Unsupported(self.name, "record contains the kcat delimiter")
            null_mode = r.key is None or r.value is None
            if null_mode and (r.key == b"" or r.value == b""):
                raise Unsupported(self.name, "kcat -Z cannot mix an empty and a null key/value in one record")
            plan.append((i, part, tuple(r.headers), null_mode))
        # Stable sort by partition; then runs of identical (headers, null_mode).
        plan.sort(key=lambda x: x[1])
        runs: list[list] = []
        for item in plan:
            if runs and runs[-1][0][1:] == item[1:]:
                runs[-1].append(item)
            else:
                runs.append([item])
        extra = [f"acks={_acks_str(acks)}", f"message.timeout.ms={int(self.timeout * 1000)}"]
        if idempotent is not None:
            extra.append(f"enable.idempotence={'true' if idempotent else 'false'}")
        if compression:
            extra.append(f"compression.codec={compression}")
        results: list = [None] * len(records)
        for run in runs:
            _, part, headers, null_mode = run[0]
            args = [
                "-P",
                "-t",
                topic,
                "-p",
                str(part),
                "-K",
                self._esc(self.KDELIM),
                "-D",
                self._esc(self.MDELIM),
                "-vvv",
            ]
            if null_mode:
                args.append("-Z")
            for k, v in headers:
                args += ["-H", f"{k}={v.decode('utf-8', 'surrogateescape')}"]
            data = b"".join(
                (records[i].key or b"") + self.KDELIM.encode() + (records[i].value or b"") + self.MDELIM.encode()
                for i, *_ in run
            )
            p = self._run(self._cmd(*args, extra=extra), input=data)
            self._check(p, "produce")
            delivered = [(int(a), int(b)) for a, b in _DELIVERED.findall(p.stderr.decode("utf-8", "replace"))]
            if len(delivered) != len(run):
                raise ClientError(
                    self.name,
                    "Other",
                    f"{len(delivered)} delivery reports for {len(run)} records: "
                    f"{p.stderr.decode('utf-8', 'replace')[-2000:]}",
                )
            for (i, *_), d in zip(run, delivered):
                results[i] = d
        return results

    @staticmethod
    def _esc(delim: str) -> str:
        return "".join(c if c.isalnum() else f"\\x{ord(c):02x}" for c in delim)

    @staticmethod
    def _from_json(line: bytes) -> Rec:
        d = json.loads(line.decode("utf-8", "surrogateescape"))
        enc = lambda s: None if s is None else s.encode("utf-8", "surrogateescape")  # noqa: E731
        hs = d.get("headers") or []
        return Rec(
            enc(d.get("key")),
            enc(d.get("payload")),
            [(hs[i], enc(hs[i + 1])) for i in range(0, len(hs), 2)],
            d["partition"],
            d["offset"],
            d.get("ts"),
        )

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
        offset = str(start_offset) if start_offset is not None else ("beginning" if from_beginning else "end")
        extra = [f"auto.offset.reset={'error' if policy == 'none' else policy}"]
        if self.isolation is not None:
            extra.append(f"isolation.level={self.isolation}")
        if group is not None:
            extra += [
                f"session.timeout.ms={GROUP_SESSION_TIMEOUT_MS}",
                f"max.poll.interval.ms={GROUP_REBALANCE_TIMEOUT_MS}",
            ]
            cmds = [self._cmd("-G", group, "-J", "-u", "-q", "-c", str(expected), topic, extra=extra)]
        elif partitions is None:
            cmds = [self._cmd("-C", "-t", topic, "-o", offset, "-J", "-u", "-q", "-c", str(expected), extra=extra)]
        else:
            cmds = [
                self._cmd(
                    "-C", "-t", topic, "-p", str(p), "-o", offset, "-J", "-u", "-q", "-c", str(expected), extra=extra
                )
                for p in partitions
            ]
        procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for c in cmds]
        out: list[Rec] = []
        sel = selectors.DefaultSelector()
        bufs = {}
        for p in procs:
            os.set_blocking(p.stdout.fileno(), False)
            sel.register(p.stdout, selectors.EVENT_READ, p)
            bufs[p] = b""
        deadline = time.monotonic() + timeout
        try:
            while len(out) < expected and time.monotonic() < deadline and sel.get_map():
                for key, _ in sel.select(timeout=0.2):
                    chunk = key.fileobj.read()
                    if not chunk:
                        sel.unregister(key.fileobj)
                        continue
                    bufs[key.data] += chunk
                    *lines, bufs[key.data] = bufs[key.data].split(b"\n")
                    out.extend(self._from_json(ln) for ln in lines if ln.strip())
        finally:
            for p in procs:
                if p.poll() is None:
                    p.terminate()  # kcat -G commits and leaves the group on SIGTERM
            for p in procs:
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        errs = b"".join(p.stderr.read() for p in procs).decode("utf-8", "replace")
        errors = [ln for ln in errs.splitlines() if "ERROR" in ln]
        if errors and len(out) < expected:
            raise ClientError(self.name, _kind_from_text("\n".join(errors)), "\n".join(errors)[-2000:])
        return out[:expected] if len(out) > expected else out

    def offsets_for_times(self, topic, ts):
        parts = sorted(self.describe_topic(topic))
        args = ["-Q", "-J"]
        for p in parts:
            args += ["-t", f"{topic}:{p}:{ts}"]
        p = self._run(self._cmd(*args))
        self._check(p, "query")
        d = json.loads(p.stdout)[topic]
        return {int(k): (v["offset"] if v["offset"] >= 0 else None) for k, v in d.items() if k != "topic"}
