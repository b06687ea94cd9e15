"""Client quotas: Kafka's precedence of the eight user/client-id entities, its rate and throttle
arithmetic, DescribeClientQuotas' filter and AlterClientQuotas' checks (broker/quotas/)."""

from __future__ import annotations

import asyncio
import time

import pytest

from odradek.broker.connection_state import ConnectionState
from odradek.broker.quotas import entities as E
from odradek.broker.quotas.entities import QuotaEntity as QE
from odradek.broker.quotas.manager import PRODUCE, REQUEST, ClientQuotaManager, ClientQuotas, charging
from odradek.broker.quotas.rate import Rate, throttle_time_ms

# the eight entities, most specific first, each with a distinct bound
LEVELS = [
    (QE("alice", "app"), 1.0, ("alice", "app")),
    (QE("alice", None), 2.0, ("alice", "app")),
    (QE(user="alice"), 3.0, ("alice", "")),
    (QE(None, "app"), 4.0, ("alice", "app")),
    (QE(None, None), 5.0, ("alice", "app")),
    (QE(user=None), 6.0, ("alice", "")),
    (QE(client_id="app"), 7.0, ("", "app")),
    (QE(client_id=None), 8.0, ("", "app")),
]


@pytest.mark.parametrize("level", range(8))
def test_the_most_specific_entity_with_a_quota_applies(level: int) -> None:
    table = E.QuotaTable({e: v for e, v, _ in LEVELS[level:]})
    tags = table.metric_tags("alice", "app")
    assert tags == LEVELS[level][2]
    assert table.limit(tags) == LEVELS[level][1]


def test_other_users_and_clients_fall_to_the_defaults_and_share_nothing_specific() -> None:
    table = E.QuotaTable({e: v for e, v, _ in LEVELS})
    assert table.limit(table.metric_tags("bob", "app")) == 4.0  # <default>/clients/app
    assert table.limit(table.metric_tags("bob", "other")) == 5.0
    only_clients = E.QuotaTable({QE(client_id="app"): 7.0, QE(client_id=None): 8.0})
    assert only_clients.metric_tags("ANONYMOUS", "app") == ("", "app")
    assert only_clients.limit(("", "zzz")) == 8.0
    assert E.QuotaTable({}).limit(E.QuotaTable({}).metric_tags("u", "c")) is None


def test_rate_counts_at_least_samples_minus_one_windows() -> None:
    r = Rate(samples=11, window_ms=1000)
    r.record(10_000, 0)
    # one burst at t=0: 10 windows assumed elapsed, 10,000 B over 10 s
    assert r.window_size_ms(0) == 10_000
    assert r.measure(0) == pytest.approx(1000.0)
    r.record(10_000, 500)
    assert r.measure(500) == pytest.approx(20_000 / 10.5)


def test_rate_forgets_samples_older_than_the_window() -> None:
    r = Rate(samples=2, window_ms=1000)
    r.record(5000, 0)
    r.record(10, 5000)  # the first sample expired (nothing recorded in it for 2 windows)
    assert r.measure(5000) == pytest.approx(10.0)


def test_throttle_time_is_kafkas_formula() -> None:
    # O * W / (W + X) = T: 2000 B/s over 10 s against 1000 B/s needs 10 s more
    assert throttle_time_ms(2000.0, 1000.0, 10_000) == 10_000
    assert throttle_time_ms(1100.0, 1000.0, 10_000) == 1000
    assert throttle_time_ms(1000.5, 1000.0, 1000) == 1  # Math.round: half up


def test_manager_throttles_above_the_bound_only() -> None:
    m = ClientQuotaManager(PRODUCE, samples=11, window_ms=1000)
    m.table = E.QuotaTable({QE(client_id="p"): 1000.0})
    assert m.record("ANONYMOUS", "p", 10_000, at_ms=0) == 0  # exactly 1000 B/s over 10 s
    # another 5,000 B: 15,000 over 10 s = 1500 B/s -> (1500-1000)/1000 * 10 s
    assert m.record("ANONYMOUS", "p", 5000, at_ms=0) == 5000
    assert m.record("ANONYMOUS", "other", 1_000_000, at_ms=0) == 0  # no quota for it
    assert m.max_value_in_window("ANONYMOUS", "p") == 10_000


def test_request_quota_throttle_is_capped_at_one_window() -> None:
    m = ClientQuotaManager(REQUEST, samples=11, window_ms=1000)
    m.table = E.QuotaTable({QE(user=None): 1.0})
    assert m.record("u", "c", 500.0, at_ms=0) == 1000


def test_update_reads_quotas_beside_scram_credentials() -> None:
    q = ClientQuotas(11, 1, 11, 1)
    users = {
        "alice": {"SCRAM-SHA-256": "salt=..", "producer_byte_rate": "1024"},
        None: {"request_percentage": "50.0"},
    }
    q.update(users, {None: {"consumer_byte_rate": "2048"}}, {("alice", "app"): {"producer_byte_rate": "10"}})
    assert q.produce.table.quotas == {QE(user="alice"): 1024.0, QE("alice", "app"): 10.0}
    assert q.fetch.table.quotas == {QE(client_id=None): 2048.0}
    assert q.request.table.quotas == {QE(user=None): 50.0}


QUOTAS = {
    QE(user="alice"): {"producer_byte_rate": 1.0},
    QE(user=None): {"producer_byte_rate": 2.0},
    QE(client_id="app"): {"producer_byte_rate": 3.0},
    QE("alice", "app"): {"producer_byte_rate": 4.0},
    QE(None, None): {"producer_byte_rate": 5.0},
}


def _describe(*components: tuple[str, int, str | None], strict: bool = False) -> set[QE]:
    found = E.describe(QUOTAS, [E.FilterComponent(*c) for c in components], strict)
    return {e for e, _ in found}


def test_describe_match_types_and_strict() -> None:
    assert _describe() == set(QUOTAS)
    assert _describe(strict=True) == set()
    assert _describe(("user", E.MATCH_EXACT, "alice")) == {QE(user="alice"), QE("alice", "app")}
    assert _describe(("user", E.MATCH_EXACT, "alice"), strict=True) == {QE(user="alice")}
    assert _describe(("user", E.MATCH_DEFAULT, None)) == {QE(user=None), QE(None, None)}
    assert _describe(("user", E.MATCH_SPECIFIED, None), strict=True) == {QE(user="alice"), QE(user=None)}
    assert _describe(("user", E.MATCH_SPECIFIED, None), ("client-id", E.MATCH_DEFAULT, None)) == {QE(None, None)}
    assert _describe(("ip", E.MATCH_SPECIFIED, None)) == set()


@pytest.mark.parametrize(
    ("components", "error", "message"),
    [
        ([("user", 0, "a"), ("user", 0, "b")], 42, "Duplicate user filter component entity type"),
        ([("", 0, "a")], 42, "Unexpected empty filter component entity type"),
        ([("group", 0, "a")], 35, "Custom entity type 'group' not supported"),
        ([("ip", 2, None), ("user", 2, None)], 42, "Invalid entity filter component combination"),
        ([("user", 0, None)], -1, "exact match without a name"),  # Kafka 3.9: UNKNOWN_SERVER_ERROR
    ],
)
def test_describe_refuses_what_kafka_refuses(components: list, error: int, message: str) -> None:
    with pytest.raises(E.QuotaRequestError) as e:
        E.describe(QUOTAS, [E.FilterComponent(*c) for c in components], False)
    assert e.value.error == error
    assert str(e.value).startswith(message)


def test_alter_checks_entities_keys_and_types() -> None:
    assert E.parse_entity([("user", None), ("client-id", "x")]) == QE(None, "x")
    for parts, message in [
        ([], "Invalid empty client quota entity"),
        ([("group", "g")], "Unhandled client quota entity type: group"),
        ([("user", "")], "Empty user not supported"),
        ([("ip", "1.2.3.4"), ("user", "u")], "Invalid quota entity combination"),
    ]:
        with pytest.raises(E.QuotaRequestError, match=message):
            E.parse_entity(parts)
    config = {"SCRAM-SHA-256": "keep"}
    out = E.apply_ops(config, [("producer_byte_rate", 1024.0, False), ("request_percentage", 12.5, False)])
    assert out == {"SCRAM-SHA-256": "keep", "producer_byte_rate": "1024", "request_percentage": "12.5"}
    assert E.apply_ops(out, [("producer_byte_rate", 0.0, True)]) == {
        "SCRAM-SHA-256": "keep",
        "request_percentage": "12.5",
    }
    with pytest.raises(E.QuotaRequestError, match="Configuration consumer_byte_rate must be a LONG value"):
        E.apply_ops({}, [("consumer_byte_rate", 1.5, False)])
    with pytest.raises(E.QuotaRequestError, match="Invalid configuration key foo"):
        E.apply_ops({}, [("foo", 1.0, False)])
    assert E.java_double_string(200.0) == "200.0"
    assert E.java_double_string(1e7) == "1.0E7"


def test_controller_mutations_use_kafkas_token_bucket() -> None:
    from odradek.broker.quotas.manager import ControllerMutationQuotaManager

    m = ControllerMutationQuotaManager(samples=11, window_ms=1000)
    m.table = E.QuotaTable({QE(client_id=None): 2.0})  # 2 partitions/s, a burst of 22
    assert m.take("u", "c", 20, strict=True, at_ms=1000) == 0
    assert m.take("u", "c", 10, strict=True, at_ms=1000) == 0  # the bucket was not below zero yet: taken
    assert m.take("u", "c", 1, strict=True, at_ms=1000) == 4000  # -8 tokens at 2/s: 4 s, refused
    assert m.take("u", "c", 1, strict=True, at_ms=4000) == 1000  # refilled 6, still -2
    assert m.take("u", "c", 1, strict=True, at_ms=5000) == 0  # back at 0: taken
    # permissive (older versions): always taken, throttled when that leaves the bucket below zero
    assert m.take("u", "d", 30, strict=False, at_ms=0) == 4000  # client id d: its own bucket


def _greedy(samples: int, request_bytes: int, seconds: int) -> list[tuple[float, int]]:
    """A client sending `request_bytes` again as soon as its throttle time has passed."""
    m = ClientQuotaManager(PRODUCE, samples=samples, window_ms=1000)
    m.table = E.QuotaTable({QE(client_id="l"): 1_000_000.0})
    t, sent = 0.0, []
    while t < seconds * 1000:
        throttle = m.record("u", "l", request_bytes, at_ms=int(t))
        sent.append((t, request_bytes))
        t += max(throttle, 1)
    return sent


def _rates_over_30s(sent: list[tuple[float, int]], starts: range) -> list[float]:
    return [sum(n for t, n in sent if a * 1000 <= t < (a + 30) * 1000) / 30 / 1_000_000 for a in starts]


def test_a_greedy_client_averages_the_quota_with_bursts_of_samples_minus_one_windows() -> None:
    # Kafka's default 11 samples: 10 s of quota at once, then throttled: over 200 s the quota,
    # over 30 s anything between ~0.75 and ~1.1 of it depending on where the 30 s fall
    sent = _greedy(11, 32768, 200)
    assert sum(n for t, n in sent if t >= 20_000) / 180 / 1_000_000 == pytest.approx(1.0, rel=0.03)
    swing = _rates_over_30s(sent, range(5, 150))
    assert min(swing) < 0.8 and max(swing) > 1.05
    # 3 samples (the interop test's setting): every 30 s within 5 % of the quota
    swing = _rates_over_30s(_greedy(3, 32768, 150), range(5, 110))
    assert 0.95 <= min(swing) and max(swing) <= 1.05


def test_a_greedy_consumer_loses_quota_to_empty_throttled_answers_with_large_fetches() -> None:
    """A throttled Fetch is answered empty and its bytes taken back (Kafka's rule): with 3 samples,
    1 MB fetches against 1 MB/s get about two thirds of it, 32 KB fetches nearly all of it."""
    from odradek.broker.quotas.manager import FETCH

    def rate(fetch_bytes: int) -> float:
        m = ClientQuotaManager(FETCH, samples=3, window_ms=1000)
        m.table = E.QuotaTable({QE(client_id="l"): 1_000_000.0})
        t, got = 0.0, 0
        while t < 100_000:
            throttle = m.record("u", "l", fetch_bytes, at_ms=int(t))
            if throttle:
                m.unrecord("u", "l", fetch_bytes, at_ms=int(t))
                t += throttle
            else:
                got += fetch_bytes if t >= 20_000 else 0
                t += 5
        return got / 80 / 1_000_000

    assert 0.6 < rate(1_000_000) < 0.75
    assert rate(32768) > 0.93


def _burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_a_request_is_charged_its_own_steps_not_what_ran_while_it_waited() -> None:
    """quotas.manager.charging: the CPU of the handler's own steps is added up; another task's,
    run while the handler awaits, is not (Kafka's request quota counts only its request's own
    handler thread time). Its result, exceptions and cancellation pass through."""
    state = ConnectionState(1, "127.0.0.1:1")

    async def handler(wake: asyncio.Event) -> str:
        _burn(0.05)
        await wake.wait()
        _burn(0.05)
        return "answer"

    async def main() -> None:
        wake = asyncio.Event()
        state.request_cpu = 0.0
        running = asyncio.ensure_future(charging(handler(wake), state))
        await asyncio.sleep(0)
        _burn(0.3)  # another connection's work while the handler waits
        wake.set()
        assert await running == "answer"
        assert state.request_cpu is not None and 0.09 <= state.request_cpu < 0.2
        assert state.request_step is None

        async def failing() -> None:
            await asyncio.sleep(0)
            raise ValueError("bad request")

        with pytest.raises(ValueError, match="bad request"):
            await charging(failing(), state)
        cancelled = asyncio.ensure_future(charging(asyncio.sleep(10), state))
        await asyncio.sleep(0)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        # exempted (None): nothing added
        state.request_cpu = None
        await charging(handler(wake), state)
        assert state.request_cpu is None

    asyncio.run(main())
