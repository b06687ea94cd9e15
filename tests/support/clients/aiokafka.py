"""aiokafka, in this process (each operation on its own event loop)."""

from __future__ import annotations

import asyncio
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


class AiokafkaClient(Client):
    """aiokafka 0.14.0, each call in its own ``asyncio.run``."""

    name = "aiokafka"

    def _tls(self) -> dict:
        kw: dict = {"security_protocol": self.security_protocol} if self.tls or self.sasl else {}
        if self.sasl is not None:
            kw |= {"sasl_mechanism": self.sasl.mechanism, "sasl_plain_username": self.sasl.username}
            kw["sasl_plain_password"] = self.sasl.password
        if self.tls is None:
            return kw
        from aiokafka.helpers import create_ssl_context

        cert = self.tls.cert
        context = create_ssl_context(
            cafile=str(self.tls.ca),
            certfile=str(cert) if cert else None,
            keyfile=str(self.tls.key) if cert else None,
        )
        return {**kw, "ssl_context": context}

    @classmethod
    def unavailable_reason(cls):
        return None if importlib.util.find_spec("aiokafka") else "aiokafka not installed"

    def _call(self, coro):
        try:
            return asyncio.run(asyncio.wait_for(coro, self.timeout * 3 + 30))
        except ClientError:
            raise
        except TimeoutError as e:
            raise ClientError(self.name, "Timeout", f"{type(e).__name__}: {e}") from e
        except Exception as e:  # noqa: BLE001
            raise ClientError(self.name, normalize_kind(type(e).__name__), str(e)) from e

    async def _admin(self, fn):
        from aiokafka.admin import AIOKafkaAdminClient

        a = AIOKafkaAdminClient(
            bootstrap_servers=self.bootstrap,
            **self._tls(),
            request_timeout_ms=int(self.timeout * 1000),
            client_id="odradek-test-aiokafka",
        )
        await a.start()
        try:
            return await fn(a)
        finally:
            await a.close()

    @staticmethod
    def _check_response(resp):
        from aiokafka.errors import for_code

        for t in getattr(resp, "topic_errors", None) or getattr(resp, "topic_error_codes", None) or []:
            code = t[1]
            if code:
                msg = t[2] if len(t) > 2 and isinstance(t[2], str) else ""
                raise for_code(code)(msg)

    def create_topic(self, name, partitions, configs=None, *, replication_factor=1):
        from aiokafka.admin import NewTopic

        t = NewTopic(
            name, partitions, replication_factor, topic_configs={k: str(v) for k, v in (configs or {}).items()}
        )

        async def go(a):
            self._check_response(await a.create_topics([t], timeout_ms=int(self.timeout * 1000)))

        self._call(self._admin(go))

    def delete_topic(self, name):
        async def go(a):
            self._check_response(await a.delete_topics([name], timeout_ms=int(self.timeout * 1000)))

        self._call(self._admin(go))

    def list_topics(self):
        async def go(a):
            return await a.list_topics()

        return _public(self._call(self._admin(go)))

    def describe_topic(self, name):
        async def go(a):
            return await a.describe_topics([name])

        from aiokafka.errors import for_code

        for t in self._call(self._admin(go)):
            if t["topic"] == name:
                if t["error_code"]:
                    e = for_code(t["error_code"])
                    raise ClientError(self.name, normalize_kind(e.__name__), name)
                return {p["partition"]: p["leader"] for p in t["partitions"]}
        raise ClientError(self.name, "UnknownTopicOrPartition", name)

    def produce(self, topic, records, *, acks=-1, compression=None, idempotent=None):
        from aiokafka import AIOKafkaProducer

        kw = dict(
            bootstrap_servers=self.bootstrap,
            **self._tls(),
            acks="all" if acks == -1 else acks,
            linger_ms=5,
            request_timeout_ms=int(self.timeout * 1000),
            client_id="odradek-test-aiokafka",
        )
        if compression:
            kw["compression_type"] = compression
        if idempotent is not None:
            kw["enable_idempotence"] = bool(idempotent)

        async def go():
            p = AIOKafkaProducer(**kw)
            await p.start()
            try:
                futs = [
                    await p.send(
                        topic,
                        key=r.key,
                        value=r.value,
                        partition=r.partition,
                        timestamp_ms=r.timestamp,
                        headers=list(r.headers) or None,
                    )
                    for r in records
                ]
                mds = [await f for f in futs]
                return [(md.partition, md.offset) for md in mds]
            finally:
                await p.stop()

        return self._call(go())

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
        from aiokafka import AIOKafkaConsumer, TopicPartition

        out: list[Rec] = []
        policy = _reset_policy(self.name, reset, from_beginning, start_offset, group, partitions)

        async def go():
            c = AIOKafkaConsumer(
                bootstrap_servers=self.bootstrap,
                **self._tls(),
                group_id=group,
                enable_auto_commit=False,
                auto_offset_reset=policy,
                session_timeout_ms=GROUP_SESSION_TIMEOUT_MS,
                rebalance_timeout_ms=GROUP_REBALANCE_TIMEOUT_MS,
                max_poll_interval_ms=max(GROUP_REBALANCE_TIMEOUT_MS, 10000),
                heartbeat_interval_ms=2000,
                request_timeout_ms=int(max(self.timeout, 31) * 1000),
                client_id="odradek-test-aiokafka",
                **({"isolation_level": self.isolation} if self.isolation else {}),
            )
            await c.start()
            try:
                parts = partitions
                if group is not None and parts is None:
                    c.subscribe([topic])
                else:
                    if parts is None:
                        ps = (
                            await c.partitions_for_topic(topic)
                            if asyncio.iscoroutinefunction(c.partitions_for_topic)
                            else c.partitions_for_topic(topic)
                        )
                        if not ps:
                            await c._client.force_metadata_update()
                            ps = c.partitions_for_topic(topic)
                        if not ps:
                            raise ClientError(self.name, "UnknownTopicOrPartition", topic)
                        parts = sorted(ps)
                    tps = [TopicPartition(topic, p) for p in parts]
                    c.assign(tps)
                    if start_offset is not None:
                        for tp in tps:
                            c.seek(tp, start_offset)
                    elif from_beginning:
                        await c.seek_to_beginning(*tps)
                    else:
                        await c.seek_to_end(*tps)
                deadline = time.monotonic() + timeout
                while len(out) < expected and time.monotonic() < deadline:
                    left = deadline - time.monotonic()
                    batch = await c.getmany(
                        timeout_ms=int(max(10, min(500, left * 1000))), max_records=expected - len(out)
                    )
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
                    await c.commit()
            finally:
                await c.stop()

        self.timeout, saved = max(self.timeout, timeout), self.timeout
        try:
            self._call(go())
        finally:
            self.timeout = saved
        return out

    def offsets_for_times(self, topic, ts):
        from aiokafka import AIOKafkaConsumer, TopicPartition

        async def go():
            c = AIOKafkaConsumer(
                bootstrap_servers=self.bootstrap,
                **self._tls(),
                enable_auto_commit=False,
                request_timeout_ms=int(max(self.timeout, 31) * 1000),
            )
            await c.start()
            try:
                await c._client.force_metadata_update()
                ps = c.partitions_for_topic(topic) or set()
                res = await c.offsets_for_times({TopicPartition(topic, p): ts for p in ps})
                return {tp.partition: (v.offset if v is not None else None) for tp, v in res.items()}
            finally:
                await c.stop()

        return self._call(go())
