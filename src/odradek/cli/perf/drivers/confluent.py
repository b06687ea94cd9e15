"""The ``confluent`` driver of `odradek perf`: confluent-kafka, i.e. librdkafka (C) with its
native batching, so that the client is not what is being measured."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

from odradek.cli.perf.engine import Acks, Consumed, ConsumeSpec, E2ESpec, Pacer, ProduceSpec, Progress

QUEUED_MAX = 1_000_000  # queue.buffering.max.messages


class ConfluentDriver:
    name = "confluent"
    native_batch = True
    takes_settings = False  # librdkafka's names differ from the Java client's: -X instead

    def produce(self, spec: ProduceSpec, payload: bytes, acks: Acks, progress: Progress) -> float:
        from confluent_kafka import Producer

        conf: dict = {
            "bootstrap.servers": spec.bootstrap,
            "acks": spec.acks if spec.acks != "-1" else "all",
            "compression.type": spec.compression,
            "linger.ms": spec.linger_ms,
            "enable.idempotence": spec.idempotence,
            "queue.buffering.max.kbytes": 1048576,
            "queue.buffering.max.messages": QUEUED_MAX,
        }
        if spec.batch_size:
            conf["batch.size"] = spec.batch_size
        conf.update(spec.client_config)
        p = Producer(conf)
        p.list_topics(spec.topic, timeout=15)

        def cb_for(t0: int):
            def cb(err, _msg):
                if err is None:
                    acks.acked(t0)
                else:
                    acks.failed(str(err))

            return cb

        start = time.perf_counter()
        if spec.native_batch > 0:
            _produce_batches(p, spec, payload, cb_for, progress)
        else:
            _produce_loop(p, spec, payload, cb_for, progress)
        remaining = p.flush(120)
        elapsed = time.perf_counter() - start
        if remaining:
            acks.failed(f"{remaining} records not delivered after flush")
        return elapsed

    def consume(self, spec: ConsumeSpec, progress: Progress) -> Consumed:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        c = Consumer(
            {
                "bootstrap.servers": spec.bootstrap,
                "group.id": spec.group or f"perf-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": spec.fetch_max_wait_ms,
                "enable.partition.eof": False,
                # librdkafka pauses a partition's fetching for fetch.queue.backoff.ms (1 s)
                # whenever its local queue passes queued.min.messages: that, not the broker,
                # capped this driver near 200k records/s (2.2M without it, same broker)
                "fetch.queue.backoff.ms": 0,
            }
        )
        md = c.list_topics(spec.topic, timeout=15)
        parts = sorted(md.topics[spec.topic].partitions) if spec.topic in md.topics else [0]
        if spec.group:
            c.subscribe([spec.topic])
        else:
            c.assign([TopicPartition(spec.topic, p, OFFSET_BEGINNING) for p in parts])
        out = Consumed()
        out.start = last = time.perf_counter()
        try:
            while out.records < spec.num_records:
                msgs = c.consume(num_messages=min(10000, spec.num_records - out.records), timeout=1.0)
                now = time.perf_counter()
                if not msgs:
                    if now - last > spec.timeout_s:
                        break
                    continue
                if out.first_record_s is None:
                    out.first_record_s = now - out.start
                last = now
                for m in msgs:
                    if m.error() is not None:
                        continue
                    out.records += 1
                    v = m.value()
                    out.payload_bytes += len(v) if v is not None else 0
                    k = m.key()
                    if k is not None:
                        out.payload_bytes += len(k)
                progress.update(out.records)
        finally:
            out.end = last
            c.close()
        return out

    def e2e(self, spec: E2ESpec) -> _E2E:
        return _E2E(spec)


def _produce_loop(p, spec: ProduceSpec, payload: bytes, cb_for, progress: Progress) -> None:
    """One `produce()` call per record (what most applications do)."""
    produce, poll, topic = p.produce, p.poll, spec.topic
    kw = {} if spec.partition is None else {"partition": spec.partition}
    perf = time.perf_counter_ns
    n, every = spec.num_records, spec.sample_every
    pacer = Pacer(spec.throughput)
    for i in range(n):
        if spec.throughput > 0:
            pacer.wait(i)
        while True:
            try:
                if i % every == 0 or i == n - 1:
                    produce(topic, payload, on_delivery=cb_for(perf()), **kw)
                    progress.update(i)
                else:
                    produce(topic, payload, **kw)
                break
            except BufferError:
                poll(0.005)
        if i % 128 == 0:
            poll(0)


def _produce_batches(p, spec: ProduceSpec, payload: bytes, cb_for, progress: Progress) -> None:
    """confluent-kafka's `produce_batch`: one C call enqueues a whole list. The list repeats one
    dict (the same value) except every `sample_every`-th record, which carries its own latency
    callback. A list is offered only when librdkafka's queue has room for all of it (the driver
    allows 1,000,000 queued records), so none is refused for a full queue; any other refusal is
    an error of the run."""
    plain = {"value": payload} if spec.partition is None else {"value": payload, "partition": spec.partition}
    pacer = Pacer(spec.throughput)
    size = min(spec.native_batch, QUEUED_MAX // 2)
    room = QUEUED_MAX - size
    num_records, every = spec.num_records, spec.sample_every
    done = 0
    while done < num_records:
        if spec.throughput > 0:
            pacer.wait(done)
        while len(p) > room:
            p.poll(0.002)
        n = min(size, num_records - done)
        t0 = time.perf_counter_ns()
        msgs = [plain] * n
        for j in range(-done % every, n, every):
            msgs[j] = {**plain, "callback": cb_for(t0)}
        queued = p.produce_batch(spec.topic, msgs)
        if queued != n:
            err = next((m["_error"] for m in msgs if "_error" in m), "unknown")
            raise RuntimeError(f"produce_batch queued {queued} of {n} records: {err}")
        p.poll(0)
        done += n
        progress.update(done)


class _E2E:
    def __init__(self, spec: E2ESpec) -> None:
        from confluent_kafka import Producer

        self.spec = spec
        self.producer = Producer(
            {
                "bootstrap.servers": spec.bootstrap,
                "acks": "all" if spec.acks in ("all", "-1") else spec.acks,
                "linger.ms": spec.linger_ms,
                "enable.idempotence": False,
            }
        )
        self.producer.list_topics(spec.topic, timeout=15)
        self._produce, self._poll = self.producer.produce, self.producer.poll

    def consume(self, received: Callable[[bytes, int], None], ready: threading.Event, stop: threading.Event) -> None:
        from confluent_kafka import OFFSET_END, Consumer, TopicPartition

        spec, perf = self.spec, time.perf_counter_ns
        c = Consumer(
            {
                "bootstrap.servers": spec.bootstrap,
                "group.id": f"e2e-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": spec.fetch_max_wait_ms,
                "fetch.error.backoff.ms": 0,
            }
        )
        c.assign([TopicPartition(spec.topic, spec.partition, OFFSET_END)])
        # wait until the consumer has resolved its position (it reports nothing until it did)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            c.consume(1, 0.05)
            pos = c.position([TopicPartition(spec.topic, spec.partition)])
            if pos and pos[0].offset >= 0:
                break
        ready.set()
        while not stop.is_set():
            m = c.poll(0.1)  # consume(n, t) would wait for n records or t: poll returns each at once
            if m is not None and m.error() is None:
                received(m.value(), perf())
        c.close()

    def send(self, value: bytes) -> None:
        self._produce(self.spec.topic, value, partition=self.spec.partition)
        self._poll(0)

    def finish(self) -> None:
        self.producer.flush(30)
