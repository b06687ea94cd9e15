"""kafka-python, in this process."""

from __future__ import annotations

import importlib.util
import time

from support.clients.base import (
    GROUP_REBALANCE_TIMEOUT_MS,
    GROUP_SESSION_TIMEOUT_MS,
    Client,
    ClientError,
    Rec,
    _public,
    _reset_policy,
    normalize_kind,
)


class KafkaPythonClient(Client):
    """kafka-python 3.0.12, in process."""

    name = "kafka_python"

    def _tls(self) -> dict:
        kw: dict = {"security_protocol": self.security_protocol} if self.tls or self.sasl else {}
        if self.sasl is not None:
            kw |= {"sasl_mechanism": self.sasl.mechanism, "sasl_plain_username": self.sasl.username}
            kw["sasl_plain_password"] = self.sasl.password
        if self.tls is None:
            return kw
        kw["ssl_cafile"] = str(self.tls.ca)
        if self.tls.cert is not None:
            kw.update({"ssl_certfile": str(self.tls.cert), "ssl_keyfile": str(self.tls.key)})
        return kw

    @classmethod
    def unavailable_reason(cls):
        return None if importlib.util.find_spec("kafka") else "kafka-python not installed"

    def _raise(self, e: Exception):
        raise ClientError(self.name, normalize_kind(type(e).__name__), str(e)) from e

    def _admin(self):
        from kafka import KafkaAdminClient

        return KafkaAdminClient(
            bootstrap_servers=self.bootstrap,
            **self._tls(),
            request_timeout_ms=int(self.timeout * 1000),
            client_id="odradek-test-kafka-python",
        )

    def _with_admin(self, fn):
        try:
            a = self._admin()
        except Exception as e:  # noqa: BLE001
            self._raise(e)
        try:
            return fn(a)
        except ClientError:
            raise
        except Exception as e:  # noqa: BLE001
            self._raise(e)
        finally:
            a.close()

    def create_topic(self, name, partitions, configs=None, *, replication_factor=1):
        from kafka.admin import NewTopic

        t = NewTopic(
            name, partitions, replication_factor, topic_configs={k: str(v) for k, v in (configs or {}).items()}
        )
        self._with_admin(lambda a: a.create_topics([t], timeout_ms=int(self.timeout * 1000)))

    def delete_topic(self, name):
        self._with_admin(lambda a: a.delete_topics([name], timeout_ms=int(self.timeout * 1000)))

    def list_topics(self):
        return _public(self._with_admin(lambda a: a.list_topics()))

    def describe_topic(self, name):
        from kafka.errors import for_code

        ts = self._with_admin(lambda a: a.describe_topics([name]))
        for t in ts:
            if t.get("topic", t.get("name")) == name:
                code = t.get("error_code", 0)
                if code:
                    self._raise(for_code(code)())
                return {
                    p["partition_index"] if "partition_index" in p else p["partition"]: p["leader_id"]
                    if "leader_id" in p
                    else p["leader"]
                    for p in t["partitions"]
                }
        raise ClientError(self.name, "UnknownTopicOrPartition", name)

    def produce(self, topic, records, *, acks=-1, compression=None, idempotent=None):
        from kafka import KafkaProducer

        kw = dict(
            bootstrap_servers=self.bootstrap,
            **self._tls(),
            acks="all" if acks == -1 else acks,
            linger_ms=5,
            request_timeout_ms=int(self.timeout * 1000),
            max_block_ms=int(self.timeout * 1000),
            client_id="odradek-test-kafka-python",
        )
        if compression:
            kw["compression_type"] = compression
        if idempotent is not None:
            kw["enable_idempotence"] = bool(idempotent)
        try:
            p = KafkaProducer(**kw)
        except Exception as e:  # noqa: BLE001
            self._raise(e)
        try:
            futs = [
                p.send(
                    topic,
                    key=r.key,
                    value=r.value,
                    headers=list(r.headers),
                    partition=r.partition,
                    timestamp_ms=r.timestamp,
                )
                for r in records
            ]
            p.flush(timeout=self.timeout + 5)
            out = []
            for f in futs:
                md = f.get(timeout=self.timeout)
                out.append((md.partition, md.offset))
            return out
        except ClientError:
            raise
        except Exception as e:  # noqa: BLE001
            self._raise(e)
        finally:
            p.close(timeout=5)

    def _consumer(self, **kw):
        from kafka import KafkaConsumer

        return KafkaConsumer(
            bootstrap_servers=self.bootstrap,
            **self._tls(),
            enable_auto_commit=False,
            request_timeout_ms=int(max(self.timeout, 31) * 1000),
            client_id="odradek-test-kafka-python",
            **({"isolation_level": self.isolation} if self.isolation else {}),
            **kw,
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
        from kafka import TopicPartition

        try:
            policy = _reset_policy(self.name, reset, from_beginning, start_offset, group, partitions)
            c = self._consumer(
                group_id=group,
                auto_offset_reset=policy,
                session_timeout_ms=GROUP_SESSION_TIMEOUT_MS,
                max_poll_interval_ms=GROUP_REBALANCE_TIMEOUT_MS,
                heartbeat_interval_ms=2000,
            )
        except Exception as e:  # noqa: BLE001
            self._raise(e)
        out: list[Rec] = []
        try:
            if group is not None and partitions is None:
                c.subscribe([topic])
            else:
                if partitions is None:
                    ps = c.partitions_for_topic(topic)
                    if not ps:
                        raise ClientError(self.name, "UnknownTopicOrPartition", topic)
                    partitions = sorted(ps)
                tps = [TopicPartition(topic, p) for p in partitions]
                c.assign(tps)
                if start_offset is not None:
                    for tp in tps:
                        c.seek(tp, start_offset)
                elif from_beginning:
                    c.seek_to_beginning(*tps)
                else:
                    c.seek_to_end(*tps)
            deadline = time.monotonic() + timeout
            while len(out) < expected and time.monotonic() < deadline:
                left = deadline - time.monotonic()
                batch = c.poll(timeout_ms=int(max(10, min(500, left * 1000))), max_records=expected - len(out))
                for tp in sorted(batch, key=lambda t: t.partition):
                    for m in batch[tp]:
                        out.append(
                            Rec(
                                m.key,
                                m.value,
                                [(k, v) for k, v in (m.headers or [])],
                                m.partition,
                                m.offset,
                                m.timestamp,
                            )
                        )
            if group is not None and out:
                c.commit()
        except ClientError:
            raise
        except Exception as e:  # noqa: BLE001
            self._raise(e)
        finally:
            c.close()
        return out

    def offsets_for_times(self, topic, ts):
        from kafka import TopicPartition

        c = self._consumer()
        try:
            ps = c.partitions_for_topic(topic) or set()
            res = c.offsets_for_times({TopicPartition(topic, p): ts for p in ps})
            return {tp.partition: (v.offset if v is not None else None) for tp, v in res.items()}
        except Exception as e:  # noqa: BLE001
            self._raise(e)
        finally:
            c.close()
