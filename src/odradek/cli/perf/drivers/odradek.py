"""The ``odradek`` driver of `odradek perf`: odradek's own Python client (`odradek.client`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from odradek.cli.perf.engine import Acks, Consumed, ConsumeSpec, E2ESpec, Pacer, ProduceSpec, Progress, acks_value


class OdradekDriver:
    name = "odradek"
    native_batch = False
    takes_settings = True  # the specs' settings (--command-config) go to every client

    def produce(self, spec: ProduceSpec, payload: bytes, acks: Acks, progress: Progress) -> float:
        from odradek.client import Producer

        p = Producer(
            spec.settings,
            bootstrap_servers=spec.bootstrap,
            acks=acks_value(spec.acks),
            compression_type=spec.compression,
            linger_ms=spec.linger_ms,
            batch_size=spec.batch_size or 16384,
            enable_idempotence=spec.idempotence,
            buffer_memory=64 * 1024 * 1024,
        )
        # connect and fetch metadata outside the timing
        p.partitions_for(spec.topic)
        send, topic, partition = p.send, spec.topic, spec.partition
        perf = time.perf_counter_ns

        def cb_for(t0: int):
            def cb(_meta, exc):
                if exc is None:
                    acks.acked(t0)
                else:
                    acks.failed(repr(exc))

            return cb

        n, every = spec.num_records, spec.sample_every
        pacer = Pacer(spec.throughput)
        start = time.perf_counter()
        for i in range(n):
            if spec.throughput > 0:
                pacer.wait(i)
            if i % every == 0 or i == n - 1:
                send(topic, payload, partition=partition, callback=cb_for(perf()))
                progress.update(i)
            else:
                send(topic, payload, partition=partition)
        p.flush()
        elapsed = time.perf_counter() - start
        p.close(10)
        return elapsed

    def consume(self, spec: ConsumeSpec, progress: Progress) -> Consumed:
        from odradek.client import Consumer, TopicPartition

        cfg = dict(
            bootstrap_servers=spec.bootstrap,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=spec.fetch_max_wait_ms,
            max_poll_records=5000,
            enable_auto_commit=False,
        )
        if spec.group:
            cfg["group_id"] = spec.group
        c = Consumer(config=spec.settings, **cfg)
        if spec.group:
            c.subscribe([spec.topic])
        else:
            c.assign([TopicPartition(spec.topic, p) for p in sorted(c.partitions_for_topic(spec.topic))])
        out = Consumed()
        out.start = last = time.perf_counter()
        try:
            while out.records < spec.num_records:
                recs = c.poll(1.0)
                now = time.perf_counter()
                if not recs:
                    if now - last > spec.timeout_s:
                        break
                    continue
                if out.first_record_s is None:
                    out.first_record_s = now - out.start
                last = now
                out.records += len(recs)
                for r in recs:
                    out.payload_bytes += len(r.value) if r.value is not None else 0
                    if r.key is not None:
                        out.payload_bytes += len(r.key)
                progress.update(out.records)
        finally:
            out.end = last
            c.close(autocommit=False)
        return out

    def e2e(self, spec: E2ESpec) -> _E2E:
        return _E2E(spec)


class _E2E:
    def __init__(self, spec: E2ESpec) -> None:
        from odradek.client import Producer

        self.spec = spec
        self.producer = Producer(
            spec.settings,
            bootstrap_servers=spec.bootstrap,
            acks=acks_value(spec.acks),
            linger_ms=spec.linger_ms,
            enable_idempotence=False,
        )
        self.producer.partitions_for(spec.topic)

    def consume(self, received: Callable[[bytes, int], None], ready: threading.Event, stop: threading.Event) -> None:
        from odradek.client import Consumer, TopicPartition

        spec, perf = self.spec, time.perf_counter_ns
        c = Consumer(
            config=spec.settings,
            bootstrap_servers=spec.bootstrap,
            auto_offset_reset="latest",
            fetch_max_wait_ms=spec.fetch_max_wait_ms,
        )
        tp = TopicPartition(spec.topic, spec.partition)
        c.assign([tp])
        c.seek_to_end(tp)
        c.position(tp)
        ready.set()
        while not stop.is_set():
            for r in c.poll(0.2):
                received(r.value, perf())
        c.close(autocommit=False)

    def send(self, value: bytes) -> None:
        self.producer.send(self.spec.topic, value, partition=self.spec.partition)

    def finish(self) -> None:
        self.producer.flush()
        self.producer.close(10)
