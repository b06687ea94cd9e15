"""Transactional producers of the five real clients, driven by one script format.

A script is a list of operations run in order on named producers (several producers in one
script share a process, so one can fence another)::

    {"op": "init", "p": "a", "transactional_id": "tx-1"}  # create, initTransactions()
    {"op": "begin", "p": "a"}
    {"op": "send", "p": "a", "partition": 0, "value": b"..."}
    {"op": "flush", "p": "a"}                              # every send so far acknowledged
    {"op": "commit", "p": "a"} / {"op": "abort", "p": "a"}
    {"op": "sleep", "ms": 500}
    {"op": "close", "p": "a"}

``run_script(client, bootstrap, topic, ops)`` returns one :class:`Step` per operation: ``ok`` or
the error the client raised, its kind normalized as in :mod:`support.clients` (Java's
``ProducerFencedException`` and kafka-python's ``ProducerFencedError`` are both
``ProducerFenced``). A failed operation does not stop the script; the test decides what it
expected. Java runs tests/clients/java/TxnCli.java (``script``), kafkajs
tests/clients/node/kafkajs_txn.js, the three Python clients run in this process.

:data:`FENCED` is every kind a client reports for "another producer with this transactional id
took over" (or its open transaction was aborted under it, which bumps the epoch the same way).
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
import time
from dataclasses import dataclass

from support.clients import JAVA_DIR, NODE_DIR, normalize_kind
from support.clients import unavailable_reason as client_unavailable

CLIENTS = ("java", "confluent", "kafka_python", "aiokafka", "kafkajs")

#: error kinds that mean "fenced": the producer's epoch is no longer the coordinator's
FENCED = {
    "ProducerFenced",  # Java, kafka-python, aiokafka, kafkajs (PRODUCER_FENCED)
    "InvalidProducerEpoch",  # Java (abortable since KIP-588), kafkajs (INVALID_PRODUCER_EPOCH)
    "Fenced",  # librdkafka's _FENCED (its fatal error for either of the above)
}


@dataclass
class Step:
    op: str
    ok: bool
    error: str | None = None
    message: str = ""

    def __str__(self) -> str:
        return f"{self.op}: ok" if self.ok else f"{self.op}: {self.error} ({self.message[:200]})"


def unavailable_reason(client: str) -> str | None:
    reason = client_unavailable(client)
    if reason:
        return reason
    if client == "java" and not (JAVA_DIR / "classes" / "TxnCli.class").is_file():
        return "TxnCli not built: run scripts/install-test-deps.sh"
    if client == "kafkajs" and shutil.which("node") is None:
        return "no node on PATH"
    return None


def run_script(
    client: str,
    bootstrap: str,
    topic: str,
    ops: list[dict],
    *,
    transaction_timeout_ms: int = 60000,
    timeout: float = 10.0,
) -> list[Step]:
    if client in ("java", "kafkajs"):
        return _run_subprocess(client, bootstrap, topic, ops, transaction_timeout_ms, timeout)
    runner = {"confluent": _Confluent, "kafka_python": _KafkaPython, "aiokafka": _Aiokafka}[client]
    return runner(bootstrap, topic, transaction_timeout_ms, timeout).run(ops)


def java_cmd() -> list[str]:
    return ["java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto"] + [
        "-cp",
        f"{JAVA_DIR}/*:{JAVA_DIR}/classes",
        "TxnCli",
    ]


def _run_subprocess(client, bootstrap, topic, ops, transaction_timeout_ms, timeout) -> list[Step]:
    base = java_cmd() if client == "java" else ["node", str(NODE_DIR / "kafkajs_txn.js")]
    cmd = base + [
        "--bootstrap",
        bootstrap,
        "--timeout-ms",
        str(int(timeout * 1000)),
        "--transaction-timeout-ms",
        str(transaction_timeout_ms),
        "script",
        topic,
    ]
    stdin = "".join(json.dumps(_wire(op)) + "\n" for op in ops)
    sleeps = sum(op.get("ms", 0) for op in ops) / 1000
    p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=sleeps + timeout * len(ops) + 60)
    steps = []
    for line in p.stdout.splitlines():
        if not line.startswith("{"):
            continue
        d = json.loads(line)
        if "i" not in d:
            raise AssertionError(f"{client} script failed: {d}; stderr tail:\n{p.stderr[-3000:]}")
        err = d.get("error")
        steps.append(Step(d["op"], err is None, normalize_kind(err) if err else None, d.get("message", "")))
    if len(steps) != len(ops):
        raise AssertionError(f"{client}: {len(steps)} answers to {len(ops)} operations; stderr:\n{p.stderr[-3000:]}")
    return steps


def _wire(op: dict) -> dict:
    out = dict(op)
    if isinstance(out.get("value"), bytes):
        out["value"] = base64.b64encode(out["value"]).decode()
    return out


class _InProcess:
    """Runs a script in this process; a subclass maps each operation to its client's calls."""

    def __init__(self, bootstrap: str, topic: str, transaction_timeout_ms: int, timeout: float) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.txn_timeout_ms = transaction_timeout_ms
        self.timeout = timeout
        self.producers: dict = {}
        self.pending: dict[str, list] = {}

    def run(self, ops: list[dict]) -> list[Step]:
        steps = []
        try:
            for op in ops:
                try:
                    self.do(op)
                    steps.append(Step(op["op"], True))
                except Exception as e:  # noqa: BLE001 - every client error becomes a Step
                    kind, message = self.describe(e)
                    steps.append(Step(op["op"], False, kind, message))
        finally:
            self.close_all()
        return steps

    def do(self, op: dict) -> None:
        if op["op"] == "sleep":
            time.sleep(op["ms"] / 1000)
            return
        getattr(self, "op_" + op["op"])(op["p"], op)

    def describe(self, e: Exception) -> tuple[str, str]:
        return normalize_kind(type(e).__name__), str(e)

    def close_all(self) -> None:
        pass


class _Confluent(_InProcess):
    def describe(self, e):
        from confluent_kafka import KafkaError, KafkaException

        err = e.args[0] if isinstance(e, KafkaException) and e.args else e
        if isinstance(err, KafkaError):
            return normalize_kind(err.name()), err.str()
        return super().describe(e)

    def op_init(self, name, op):
        from confluent_kafka import Producer

        p = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": op["transactional_id"],
                "transaction.timeout.ms": self.txn_timeout_ms,
                "linger.ms": 5,
                # librdkafka wants both <= transaction.timeout.ms (+ 100 for the socket)
                "message.timeout.ms": min(int(self.timeout * 1000), self.txn_timeout_ms),
                "socket.timeout.ms": min(int(self.timeout * 1000), self.txn_timeout_ms),
            }
        )
        self.producers[name] = p
        self.pending[name] = []
        p.init_transactions(self.timeout)

    def op_begin(self, name, op):
        self.producers[name].begin_transaction()

    def op_send(self, name, op):
        failed = self.pending[name]

        def done(err, msg):
            if err is not None:
                failed.append(err)

        self.producers[name].produce(self.topic, op["value"], partition=op["partition"], on_delivery=done)
        self.producers[name].poll(0)

    def op_flush(self, name, op):
        from confluent_kafka import KafkaException

        left = self.producers[name].flush(self.timeout)
        if self.pending[name]:
            raise KafkaException(self.pending[name].pop())
        if left:
            raise TimeoutError(f"{left} records not acknowledged")

    def op_commit(self, name, op):
        self.producers[name].commit_transaction(self.timeout)

    def op_abort(self, name, op):
        self.producers[name].abort_transaction(self.timeout)

    def op_close(self, name, op):
        self.producers.pop(name).flush(0)


class _KafkaPython(_InProcess):
    def op_init(self, name, op):
        from kafka import KafkaProducer

        p = KafkaProducer(
            bootstrap_servers=self.bootstrap,
            transactional_id=op["transactional_id"],
            transaction_timeout_ms=self.txn_timeout_ms,
            linger_ms=5,
            request_timeout_ms=int(self.timeout * 1000),
            max_block_ms=int(self.timeout * 1000),
            client_id="odradek-test-kafka-python-txn",
        )
        self.producers[name] = p
        self.pending[name] = []
        p.init_transactions()

    def op_begin(self, name, op):
        self.producers[name].begin_transaction()

    def op_send(self, name, op):
        self.pending[name].append(self.producers[name].send(self.topic, value=op["value"], partition=op["partition"]))

    def op_flush(self, name, op):
        self.producers[name].flush(self.timeout)
        futures, self.pending[name] = self.pending[name], []
        for f in futures:
            f.get(0)

    def op_commit(self, name, op):
        self.producers[name].commit_transaction()

    def op_abort(self, name, op):
        self.producers[name].abort_transaction()

    def op_close(self, name, op):
        self.producers.pop(name).close(timeout=self.timeout)

    def close_all(self):
        for p in self.producers.values():
            p.close(timeout=0)


class _Aiokafka(_InProcess):
    def run(self, ops):
        loop = asyncio.new_event_loop()
        self.loop = loop
        try:
            return super().run(ops)
        finally:
            loop.close()

    def do(self, op):
        if op["op"] == "sleep":
            time.sleep(op["ms"] / 1000)  # nothing runs meanwhile: as a stalled application would
            return
        self.loop.run_until_complete(
            asyncio.wait_for(getattr(self, "op_" + op["op"])(op["p"], op), self.timeout * 3 + 5)
        )

    async def op_init(self, name, op):
        from aiokafka import AIOKafkaProducer

        p = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            transactional_id=op["transactional_id"],
            transaction_timeout_ms=self.txn_timeout_ms,
            linger_ms=5,
            request_timeout_ms=int(self.timeout * 1000),
            client_id="odradek-test-aiokafka-txn",
        )
        self.producers[name] = p
        self.pending[name] = []
        await p.start()  # sends InitProducerId for a transactional producer

    async def op_begin(self, name, op):
        await self.producers[name].begin_transaction()

    async def op_send(self, name, op):
        self.pending[name].append(await self.producers[name].send(self.topic, op["value"], partition=op["partition"]))

    async def op_flush(self, name, op):
        await self.producers[name].flush()
        futures, self.pending[name] = self.pending[name], []
        for f in futures:
            await f

    async def op_commit(self, name, op):
        await self.producers[name].commit_transaction()

    async def op_abort(self, name, op):
        await self.producers[name].abort_transaction()

    async def op_close(self, name, op):
        await self.producers.pop(name).stop()

    def close_all(self):
        for p in self.producers.values():
            try:
                self.loop.run_until_complete(asyncio.wait_for(p.stop(), 5))
            except Exception:  # noqa: BLE001 - a fenced producer may fail to stop cleanly
                pass
