"""confluent-kafka (librdkafka), in this process."""

from __future__ import annotations

import importlib.util
import time
import uuid

from support.clients.base import (
    GROUP_REBALANCE_TIMEOUT_MS,
    GROUP_SESSION_TIMEOUT_MS,
    Client,
    ClientError,
    Rec,
    _acks_str,
    _public,
    _reset_policy,
    normalize_kind,
)


class ConfluentClient(Client):
    """confluent-kafka (librdkafka 2.16), in process."""

    name = "confluent"

    @classmethod
    def unavailable_reason(cls):
        return None if importlib.util.find_spec("confluent_kafka") else "confluent-kafka not installed"

    def _conf(self, **extra):
        conf = {"bootstrap.servers": self.bootstrap, "client.id": "odradek-test-confluent", **self.librdkafka_tls()}
        conf.update(extra)
        return conf

    def _admin(self):
        from confluent_kafka.admin import AdminClient

        return AdminClient(self._conf())

    def _raise(self, e: Exception):
        from confluent_kafka import KafkaError, KafkaException

        err = e.args[0] if isinstance(e, KafkaException) and e.args else e
        if isinstance(err, KafkaError):
            raise ClientError(self.name, normalize_kind(err.name()), err.str()) from e
        raise ClientError(self.name, normalize_kind(type(e).__name__), str(e)) from e

    def _wait(self, futures: dict):
        for f in futures.values():
            try:
                f.result(timeout=self.timeout)
            except Exception as e:  # noqa: BLE001
                if type(e).__name__ == "TimeoutError":
                    raise ClientError(self.name, "Timeout", "admin request timed out") from e
                self._raise(e)

    def create_topic(self, name, partitions, configs=None, *, replication_factor=1):
        from confluent_kafka.admin import NewTopic

        t = NewTopic(
            name,
            num_partitions=partitions,
            replication_factor=replication_factor,
            config={k: str(v) for k, v in (configs or {}).items()},
        )
        admin = self._admin()  # must outlive its futures
        self._wait(admin.create_topics([t], request_timeout=self.timeout, operation_timeout=self.timeout))

    def delete_topic(self, name):
        admin = self._admin()
        self._wait(admin.delete_topics([name], request_timeout=self.timeout, operation_timeout=self.timeout))

    def _metadata(self, topic=None):
        try:
            return self._admin().list_topics(topic=topic, timeout=self.timeout)
        except Exception as e:  # noqa: BLE001
            self._raise(e)

    def list_topics(self):
        return _public(self._metadata().topics)

    def describe_topic(self, name):
        t = self._metadata(name).topics.get(name)
        if t is None:
            raise ClientError(self.name, "UnknownTopicOrPartition", name)
        if t.error is not None:
            raise ClientError(self.name, normalize_kind(t.error.name()), t.error.str())
        return {p.id: p.leader for p in t.partitions.values()}

    def produce(self, topic, records, *, acks=-1, compression=None, idempotent=None):
        from confluent_kafka import Producer

        extra = {
            "acks": _acks_str(acks),
            "linger.ms": 5,
            "partitioner": "murmur2_random",
            "message.timeout.ms": int(self.timeout * 1000),
        }
        if compression:
            extra["compression.type"] = compression
        if idempotent is not None:
            extra["enable.idempotence"] = bool(idempotent)
        p = Producer(self._conf(**extra))
        results: list = [None] * len(records)

        def cb(i):
            def done(err, msg):
                results[i] = err if err is not None else (msg.partition(), msg.offset())

            return done

        try:
            for i, r in enumerate(records):
                kw = {"key": r.key, "value": r.value, "on_delivery": cb(i)}
                if r.headers:
                    kw["headers"] = list(r.headers)
                if r.partition is not None:
                    kw["partition"] = r.partition
                if r.timestamp is not None:
                    kw["timestamp"] = r.timestamp
                while True:
                    try:
                        p.produce(topic, **kw)
                        break
                    except BufferError:
                        p.poll(0.1)
            left = p.flush(self.timeout + 5)
        except Exception as e:  # noqa: BLE001
            self._raise(e)
        if left:
            raise ClientError(self.name, "Timeout", f"{left} messages undelivered")
        for res in results:
            if not isinstance(res, tuple):
                raise ClientError(self.name, normalize_kind(res.name()), res.str())
        return results

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
        from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, TopicPartition

        policy = _reset_policy(self.name, reset, from_beginning, start_offset, group, partitions)
        conf = self._conf(
            **{
                "group.id": group or f"odradek-assign-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "auto.offset.reset": "error" if policy == "none" else policy,
                "session.timeout.ms": GROUP_SESSION_TIMEOUT_MS,
                "max.poll.interval.ms": GROUP_REBALANCE_TIMEOUT_MS,
                **({"isolation.level": self.isolation} if self.isolation else {}),
            }
        )
        c = Consumer(conf)
        out: list[Rec] = []
        try:
            if group is not None and partitions is None:
                c.subscribe([topic])
            else:
                if partitions is None:
                    md = c.list_topics(topic, timeout=self.timeout).topics[topic]
                    if md.error is not None:
                        raise ClientError(self.name, normalize_kind(md.error.name()), md.error.str())
                    partitions = sorted(md.partitions)
                start = OFFSET_BEGINNING if from_beginning else OFFSET_END
                if start_offset is not None:
                    start = start_offset
                c.assign([TopicPartition(topic, p, start) for p in partitions])
            deadline = time.monotonic() + timeout
            while len(out) < expected and time.monotonic() < deadline:
                for m in c.consume(
                    num_messages=expected - len(out), timeout=min(0.5, max(0.01, deadline - time.monotonic()))
                ):
                    if m.error() is not None:
                        if m.error().code() == KafkaError._PARTITION_EOF:
                            continue
                        raise ClientError(self.name, normalize_kind(m.error().name()), m.error().str())
                    ts_type, ts = m.timestamp()
                    out.append(
                        Rec(m.key(), m.value(), [(k, v) for k, v in (m.headers() or [])], m.partition(), m.offset(), ts)
                    )
            if group is not None and out:
                c.commit(asynchronous=False)
        except ClientError:
            raise
        except Exception as e:  # noqa: BLE001
            self._raise(e)
        finally:
            c.close()
        return out

    def offsets_for_times(self, topic, ts):
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer(self._conf(**{"group.id": "odradek-oft", "enable.auto.commit": False}))
        try:
            parts = sorted(c.list_topics(topic, timeout=self.timeout).topics[topic].partitions)
            res = c.offsets_for_times([TopicPartition(topic, p, ts) for p in parts], timeout=self.timeout)
        except Exception as e:  # noqa: BLE001
            self._raise(e)
        finally:
            c.close()
        out = {}
        for tp in res:
            if tp.error is not None:
                raise ClientError(self.name, normalize_kind(tp.error.name()), tp.error.str())
            out[tp.partition] = tp.offset if tp.offset >= 0 else None
        return out
