"""The broker's client quota managers: Kafka's ClientQuotaManager (produce, fetch),
ClientRequestQuotaManager (request) and ControllerMutationQuotaManager, on one event loop.

Each quota type keeps one sensor per metric tags (entities.QuotaTable.metric_tags): every
connection of the same user and client id shares it, as Kafka's. Recording a value measures the
rate right after it; above the bound, the throttle time is rates.throttle_time_ms (the request
quota's capped at one window, as Kafka's ClientRequestQuotaManager). The caller puts it in the
response's throttle_time_ms and mutes the connection for that long after sending it (KIP-219,
broker/connection.py). The bounds come from the metadata snapshot: `update` is called on
every change, so a quota altered on any broker applies here within the watch's delay.

Metrics (docs/metrics.md): per quota type and (user, client-id) tags, the measured rate and
the throttle time given, `odradek_quota_rate` and `odradek_quota_throttle_time_ms_total`.
"""

from __future__ import annotations

import time
import types
from collections.abc import Awaitable, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from odradek.broker.quotas import entities as E
from odradek.broker.quotas.rate import Rate, round_half_up, throttle_time_ms

PRODUCE, FETCH, REQUEST, CONTROLLER_MUTATION = "Produce", "Fetch", "Request", "ControllerMutation"
KEY_OF = {
    PRODUCE: E.PRODUCER_BYTE_RATE,
    FETCH: E.CONSUMER_BYTE_RATE,
    REQUEST: E.REQUEST_PERCENTAGE,
    CONTROLLER_MUTATION: E.CONTROLLER_MUTATION_RATE,
}
INACTIVE_SENSOR_SECONDS = 3600  # Kafka's InactiveSensorExpirationTimeSeconds


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class _Sensor:
    rate: Rate
    last_used: float
    throttle_ms_total: int = 0
    throttled: int = 0


@dataclass(slots=True)
class ClientQuotaManager:
    """One quota type. `samples`, `window_ms`: quota.window.num, quota.window.size.seconds
    (the controller.* ones for controller mutations)."""

    quota_type: str
    samples: int
    window_ms: int
    table: E.QuotaTable = field(default_factory=lambda: E.QuotaTable({}))
    sensors: dict[tuple[str, str], _Sensor] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        return bool(self.table.quotas)

    def _sensor(self, tags: tuple[str, str]) -> _Sensor:
        s = self.sensors.get(tags)
        if s is None:
            s = self.sensors[tags] = _Sensor(Rate(self.samples, self.window_ms), time.monotonic())
        else:
            s.last_used = time.monotonic()
        return s

    def record(self, user: str, client_id: str, value: float, at_ms: int | None = None) -> int:
        """Kafka's maybeRecordAndGetThrottleTimeMs: record `value` for this client, and the
        milliseconds it must now wait (0: within its quota, or no quota applies)."""
        if not self.table.quotas:
            return 0
        at = now_ms() if at_ms is None else at_ms
        tags = self.table.metric_tags(user, client_id)
        sensor = self._sensor(tags)
        sensor.rate.record(value, at)
        bound = self.table.limit(tags)
        if bound is None:
            return 0
        observed = sensor.rate.measure(at)
        if observed <= bound:
            return 0
        if bound <= 0:  # Kafka divides by it: an infinite delay, capped below
            ms = 2**31 - 1
        else:
            ms = throttle_time_ms(observed, bound, sensor.rate.window_size_ms(at))
        if self.quota_type == REQUEST:
            ms = min(ms, self.window_ms)  # ClientRequestQuotaManager: boundedThrottleTime
        return max(0, min(ms, 2**31 - 1))

    def unrecord(self, user: str, client_id: str, value: float, at_ms: int | None = None) -> None:
        """A throttled fetch sends no data: what was recorded for it is taken back (Kafka's
        unrecordQuotaSensor)."""
        if self.table.quotas:
            at = now_ms() if at_ms is None else at_ms
            self._sensor(self.table.metric_tags(user, client_id)).rate.record(-value, at)

    def max_value_in_window(self, user: str, client_id: str) -> float | None:
        """Kafka's getMaxValueInQuotaWindow: the most a fetch may return at once (bound times
        samples - 1 windows), None without a quota."""
        if not self.table.quotas:
            return None
        bound = self.table.limit(self.table.metric_tags(user, client_id))
        if bound is None:
            return None
        return bound * (self.samples - 1) * self.window_ms / 1000

    def throttled(self, user: str, client_id: str, ms: int) -> None:
        """Count a throttle given (Kafka's throttle-time sensor)."""
        if ms > 0:
            s = self._sensor(self.table.metric_tags(user, client_id))
            s.throttle_ms_total += ms
            s.throttled += 1

    def expire(self) -> None:
        cutoff = time.monotonic() - INACTIVE_SENSOR_SECONDS
        for tags in [t for t, s in self.sensors.items() if s.last_used < cutoff]:
            del self.sensors[tags]


@dataclass(slots=True)
class _Bucket:
    """Kafka's TokenBucket (KIP-599): starts full with `burst` tokens, refills at the bound per
    second, each mutation (a partition created or deleted) takes one; below zero is a violation."""

    tokens: float
    last_ms: int
    last_used: float = field(default_factory=time.monotonic)

    def refill(self, bound: float, burst: float, at_ms: int) -> float:
        self.tokens = min(burst, self.tokens + bound * max(0, at_ms - self.last_ms) / 1000)
        self.last_ms = at_ms
        return self.tokens


@dataclass(slots=True)
class ControllerMutationQuotaManager:
    """controller_mutation_rate (Kafka's ControllerMutationQuotaManager): CreateTopics v6+,
    CreatePartitions v3+ and DeleteTopics v5+ are strict (a topic asked for once the bucket is
    empty is refused THROTTLING_QUOTA_EXCEEDED), older versions permissive (done, throttled)."""

    samples: int
    window_ms: int
    table: E.QuotaTable = field(default_factory=lambda: E.QuotaTable({}))
    buckets: dict[tuple[str, str], _Bucket] = field(default_factory=dict)
    throttle_ms_total: dict[tuple[str, str], int] = field(default_factory=dict)
    quota_type: str = CONTROLLER_MUTATION

    @property
    def enabled(self) -> bool:
        return bool(self.table.quotas)

    def _bucket(self, user: str, client_id: str, at: int) -> tuple[_Bucket, float] | None:
        tags = self.table.metric_tags(user, client_id)
        bound = self.table.limit(tags)
        if bound is None:
            return None
        burst = self.samples * self.window_ms / 1000 * bound
        b = self.buckets.get(tags)
        if b is None:
            b = self.buckets[tags] = _Bucket(burst, at)
        b.last_used = time.monotonic()
        b.refill(bound, burst, at)
        return b, bound

    def take(self, user: str, client_id: str, permits: float, *, strict: bool, at_ms: int | None = None) -> int:
        """Take `permits` tokens. Strict: refused (the throttle time returned, nothing taken)
        when the bucket is already below zero; permissive: always taken, the throttle time
        returned if that left it below zero. 0: within the quota."""
        at = now_ms() if at_ms is None else at_ms
        found = self._bucket(user, client_id, at) if self.table.quotas else None
        if found is None:
            return 0
        b, bound = found
        if strict and b.tokens < 0:
            return self._throttle(b, bound, user, client_id)
        b.tokens -= permits
        if not strict and b.tokens < 0:
            return self._throttle(b, bound, user, client_id)
        return 0

    def _throttle(self, b: _Bucket, bound: float, user: str, client_id: str) -> int:
        ms = 2**31 - 1 if bound <= 0 else round_half_up(-b.tokens / bound * 1000)
        tags = self.table.metric_tags(user, client_id)
        self.throttle_ms_total[tags] = self.throttle_ms_total.get(tags, 0) + ms
        return min(ms, 2**31 - 1)

    def expire(self) -> None:
        cutoff = time.monotonic() - INACTIVE_SENSOR_SECONDS
        for tags in [t for t, b in self.buckets.items() if b.last_used < cutoff]:
            del self.buckets[tags]


class ClientQuotas:
    """The four managers of a broker, their bounds taken from the metadata snapshot."""

    def __init__(self, samples: int, window_s: int, controller_samples: int, controller_window_s: int) -> None:
        self.produce = ClientQuotaManager(PRODUCE, samples, window_s * 1000)
        self.fetch = ClientQuotaManager(FETCH, samples, window_s * 1000)
        self.request = ClientQuotaManager(REQUEST, samples, window_s * 1000)
        self.controller_mutation = ControllerMutationQuotaManager(controller_samples, controller_window_s * 1000)
        self._source: tuple[object, object, object] | None = None

    def request_throttle(self, principal: str, client_id: str, cpu_seconds: float) -> int:
        """Charge a request's processing time to the request quota (request_percentage: percent
        of one thread over the window, Kafka's nanosToPercentage); the throttle it gives."""
        return self.request.record(user_of(principal), client_id, cpu_seconds * 100.0)

    def charge_request(self, state: Any, client_id: str) -> int:
        """Charge the request being handled on a connection (its ConnectionState) with the CPU
        time its handler has taken (`state.request_cpu`, its current step's so far included),
        once: `request_cpu` is then None. The throttle it gives, not yet counted
        (`request.throttled`)."""
        cpu_seconds, state.request_cpu = state.request_cpu, None
        if cpu_seconds is None or not self.request.enabled:
            return 0
        if state.request_step is not None:
            cpu_seconds += time.thread_time() - state.request_step
        return self.request_throttle(state.principal, client_id, max(0.0, cpu_seconds))

    @property
    def managers(self) -> tuple[ClientQuotaManager, ...]:
        return (self.produce, self.fetch, self.request)

    def update(
        self,
        user_configs: Mapping[str | None, Mapping[str, str]],
        client_configs: Mapping[str | None, Mapping[str, str]],
        user_client_configs: Mapping[tuple[str | None, str | None], Mapping[str, str]],
    ) -> None:
        """Take the bounds from the snapshot's maps (cheap when they did not change)."""
        s = self._source
        if s is not None and s[0] is user_configs and s[1] is client_configs and s[2] is user_client_configs:
            return  # the snapshot's maps are replaced, never changed in place: same maps, same quotas
        self._source = (user_configs, client_configs, user_client_configs)
        per_key = E.tables(E.all_quotas(user_configs, client_configs, user_client_configs))
        for m in self.managers:
            m.table = per_key[KEY_OF[m.quota_type]]
            m.expire()
        self.controller_mutation.table = per_key[E.CONTROLLER_MUTATION_RATE]
        self.controller_mutation.expire()

    def collect(self) -> Iterator[Metric]:
        rate = GaugeMetricFamily(
            "odradek_quota_rate",
            "Rate measured by each client quota sensor (bytes/s; request: % of a thread; mutations/s)",
            labels=["quota_type", "user", "client_id"],
        )
        throttle = CounterMetricFamily(
            "odradek_quota_throttle_time_ms",
            "Throttle time given to clients by each client quota sensor",
            labels=["quota_type", "user", "client_id"],
        )
        at = now_ms()
        for m in self.managers:
            for (user, client), s in m.sensors.items():
                rate.add_metric([m.quota_type, user, client], s.rate.measure(at))
                throttle.add_metric([m.quota_type, user, client], s.throttle_ms_total)
        cm = self.controller_mutation
        for (user, client), ms in cm.throttle_ms_total.items():
            throttle.add_metric([cm.quota_type, user, client], ms)
        yield rate
        yield throttle


T = TypeVar("T")


@types.coroutine
def charging(handler: Awaitable[T], state: Any) -> Generator[Any, Any, T]:
    """Await `handler` (a request's handler coroutine), adding the thread's CPU time of each of
    its steps on the event loop to `state.request_cpu` (while not None): what other connections'
    requests take while this one waits (a Fetch in the purgatory, a JoinGroup for the rebalance,
    a Produce for its replicas) is not its own, as Kafka's request quota counts only the time of
    its own request handler thread (requestThreadTimeNanos)."""
    steps = handler.__await__()
    sent: Any = None
    thrown: BaseException | None = None
    while True:
        state.request_step = time.thread_time()
        try:
            waiting_on = steps.throw(thrown) if thrown is not None else steps.send(sent)
        except StopIteration as done:
            return done.value
        finally:
            if state.request_cpu is not None:
                state.request_cpu += time.thread_time() - state.request_step
            state.request_step = None
        try:
            sent, thrown = (yield waiting_on), None
        except GeneratorExit:
            steps.close()
            raise
        except BaseException as e:  # noqa: BLE001 - a cancellation or exception into the handler
            sent, thrown = None, e


def user_of(principal: str) -> str:
    """The quota user of a principal: its name (Kafka's KafkaPrincipal.getName), `User:alice` ->
    `alice`, an unauthenticated connection's `ANONYMOUS`."""
    return principal.split(":", 1)[1] if ":" in principal else principal


# Kafka's request quota exempts the inter-broker APIs (ClusterAction): their time is not charged
REQUEST_QUOTA_EXEMPT = frozenset({4, 5, 6, 7, 27, 56, 57, 58, 63, 67})


THROTTLING_QUOTA_EXCEEDED_MESSAGE = "The throttling quota has been exceeded."


class MutationQuota:
    """One CreateTopics / CreatePartitions / DeleteTopics request's controller mutation quota
    (Kafka's Strict- or PermissiveControllerMutationQuota): `take` before each topic's change,
    `finish` after the last (the throttle goes to the response and mutes the connection)."""

    def __init__(self, quotas: ClientQuotas | None, principal: str, client_id: str | None, strict: bool) -> None:
        self.manager = quotas.controller_mutation if quotas is not None and quotas.controller_mutation.enabled else None
        self.user, self.client_id, self.strict = user_of(principal), client_id or "", strict
        self.throttle_ms = 0
        self._at = 0.0

    def take(self, permits: int) -> bool:
        """False: refused (strict, the bucket empty): answer THROTTLING_QUOTA_EXCEEDED."""
        if self.manager is None:
            return True
        ms = self.manager.take(self.user, self.client_id, permits, strict=self.strict)
        if ms:
            self.throttle_ms, self._at = ms, time.monotonic()
            return not self.strict
        return True

    def finish(self, state: Any) -> None:
        """The throttle still due (Kafka deducts the time since it was computed), on the connection."""
        if self.throttle_ms:
            left = self.throttle_ms - int((time.monotonic() - self._at) * 1000)
            if left > 0:
                state.throttle_ms = max(state.throttle_ms, left)
