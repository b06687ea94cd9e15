"""The purgatory: delayed operations completed by events or timeouts, and DelayedProduce."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from odradek.broker.purgatory import DelayedProduce, ProduceWait, Purgatory
from odradek.protocol.errors import ErrorCode


def test_an_operation_completes_when_enough_bytes_arrive():
    async def main():
        p = Purgatory("fetch")
        op = p.watch([("t", 0), ("t", 1)], 5.0, target=100)
        assert len(p) == 1
        assert p.notify(("t", 0), 60) == 0 and not op.done
        assert p.notify(("other", 0), 60) == 0
        assert p.notify(("t", 1), 40) == 1
        assert await op.wait() is True
        assert len(p) == 0 and not p._watchers

    asyncio.run(main())


def test_an_operation_times_out_and_leaves_the_purgatory():
    async def main():
        p = Purgatory("fetch")
        op = p.watch([("t", 0)], 0.02, target=1)
        started = asyncio.get_running_loop().time()
        assert await op.wait() is False
        assert asyncio.get_running_loop().time() - started >= 0.015
        assert len(p) == 0 and not p._watchers
        assert p.notify(("t", 0), 10) == 0  # nothing watches any more

    asyncio.run(main())


def test_cancel_all_answers_every_waiter_and_a_cancelled_waiter_leaves():
    async def main():
        p = Purgatory("fetch")
        ops = [p.watch([("t", i)], 10.0) for i in range(3)]
        p.cancel_all()
        assert [await op.wait() for op in ops] == [False, False, False]
        op = p.watch([("t", 0)], 10.0)
        task = asyncio.ensure_future(op.wait())
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert len(p) == 0

    asyncio.run(main())


@dataclass
class FakePartition:
    """An AcksTarget: the high watermark and the answer a real Partition would give."""

    key: tuple
    high_watermark: int = 0
    error: ErrorCode | None = None

    def acks_satisfied(self, required_offset: int) -> ErrorCode | None:
        if self.error is not None:
            return self.error
        return ErrorCode.none if self.high_watermark >= required_offset else None


def test_delayed_produce_satisfied_at_once_creates_no_operation():
    async def main():
        p = Purgatory("produce")
        waits = [ProduceWait(FakePartition(("t", 0), 10), 10), ProduceWait(FakePartition(("t", 1), 5), 3)]
        await DelayedProduce(p, waits).complete(5.0)
        assert [(w.pending, w.error_code) for w in waits] == [(False, 0), (False, 0)]
        assert len(p) == 0

    asyncio.run(main())


def test_delayed_produce_waits_for_every_partition_then_answers():
    async def main():
        p = Purgatory("produce")
        a, b = FakePartition(("t", 0)), FakePartition(("t", 1))
        waits = [ProduceWait(a, 5), ProduceWait(b, 7)]
        task = asyncio.ensure_future(DelayedProduce(p, waits).complete(5.0))
        await asyncio.sleep(0.01)
        assert not task.done() and len(p) == 1
        a.high_watermark = 5
        p.notify(a.key)
        await asyncio.sleep(0.01)
        assert not task.done() and not waits[0].pending and waits[1].pending
        b.error = ErrorCode.not_leader_or_follower  # leadership lost while waiting
        p.notify(b.key)
        await task
        assert [w.error_code for w in waits] == [0, ErrorCode.not_leader_or_follower]

    asyncio.run(main())


def test_delayed_produce_over_many_partitions_checks_only_the_partition_notified():
    """A Produce spread over 1,000 partitions, their high watermarks advancing one by one, each
    notifying its own key: about one check per partition, not one per partition per notification
    (1,000,000 before: seconds of a leader's CPU per request)."""

    class Counted(FakePartition):
        checks = 0

        def acks_satisfied(self, required_offset):
            Counted.checks += 1
            return super().acks_satisfied(required_offset)

    async def main():
        p = Purgatory("produce")
        parts = [Counted(("t", i)) for i in range(1000)]
        waits = [ProduceWait(part, 1) for part in parts]
        task = asyncio.ensure_future(DelayedProduce(p, waits).complete(5.0))
        await asyncio.sleep(0)
        Counted.checks = 0
        for part in parts[:-1]:
            part.high_watermark = 1
            p.notify(part.key)
        p.notify(parts[0].key)  # notified again: nothing left to check there
        await asyncio.sleep(0)
        assert not task.done() and waits[-1].pending
        parts[-1].high_watermark = 1
        p.notify(parts[-1].key)
        await task
        assert Counted.checks == 1000, Counted.checks
        assert all(not w.pending and w.error_code == 0 for w in waits) and len(p) == 0

    asyncio.run(main())


def test_delayed_produce_times_out_only_what_still_waits():
    async def main():
        p = Purgatory("produce")
        done, stuck = FakePartition(("t", 0), 9), FakePartition(("t", 1), 0)
        waits = [ProduceWait(done, 9), ProduceWait(stuck, 4)]
        await DelayedProduce(p, waits).complete(0.02)
        assert [w.error_code for w in waits] == [0, ErrorCode.request_timed_out]
        assert len(p) == 0

    asyncio.run(main())


def test_one_loop_timer_for_every_deadline_and_timeouts_in_deadline_order():
    """Operations do not arm a loop timer each: the purgatory's one timer follows the earliest
    deadline still waiting; operations completed early are dropped from the deadlines without
    the timer firing for each; those whose deadline comes time out in deadline order."""

    async def main():
        loop = asyncio.get_running_loop()
        p = Purgatory("fetch")
        armed = []
        real_call_at = loop.call_at

        def counting_call_at(when, cb, *args, **kw):
            armed.append(when)
            return real_call_at(when, cb, *args, **kw)

        loop.call_at = counting_call_at  # type: ignore[method-assign]
        try:
            for _ in range(1000):  # long polls answered at once: the deadlines stay bounded
                op = p.watch([("t", 0)], 30.0)
                assert p.notify(("t", 0), 1) == 1
                assert await op.wait() is True
            assert len(armed) == 1 and len(p) == 0 and len(p._deadlines) <= 64 + 2
            late = p.watch([("t", 1)], 0.06)  # earlier than the armed timer (30 s): armed again
            early = p.watch([("t", 2)], 0.02)  # and again
            middle = p.watch([("t", 3)], 0.04)  # later than the armed one: not
            assert len(armed) == 3
            order = []
            for name, op in (("late", late), ("early", early), ("middle", middle)):
                op._future.add_done_callback(lambda _f, n=name: order.append(n))
            started = loop.time()
            assert await late.wait() is False and await early.wait() is False and await middle.wait() is False
            assert order == ["early", "middle", "late"]
            assert loop.time() - started >= 0.055
            assert len(p) == 0 and not p._watchers and not p._deadlines and p._timer is None
        finally:
            del loop.call_at

    asyncio.run(main())


def test_an_operation_with_a_callback_is_called_once_after_it_left():
    """The followers' fast path (broker/follower_fetch.py) waits with a callback, not a future:
    called once, with whether events satisfied it, by notify, the timer or cancel_all, after the
    operation left the purgatory (the callback may watch again at once)."""

    async def main():
        p = Purgatory("follower fetch")
        calls: list[tuple[str, bool, int]] = []
        by_event = p.watch([("t", 0)], 5.0, target=10, callback=lambda ok: calls.append(("event", ok, len(p))))
        by_timer = p.watch([("t", 1)], 0.02, target=1, callback=lambda ok: calls.append(("timer", ok, len(p))))
        by_cancel = p.watch([("t", 2)], 5.0, target=1, callback=lambda ok: calls.append(("cancel", ok, len(p))))
        assert len(p) == 3 and not by_event.done
        assert p.notify(("t", 0), 4) == 0 and not calls
        assert p.notify(("t", 0), 6) == 1 and by_event.done
        assert calls == [("event", True, 2)]
        assert p.notify(("t", 0), 100) == 0  # it left: not called again
        await asyncio.sleep(0.05)
        assert calls[1:] == [("timer", False, 1)] and by_timer.done
        p.cancel_all()
        assert calls[2:] == [("cancel", False, 0)] and by_cancel.done
        by_event.complete(False)  # completing again calls nothing
        assert len(calls) == 3 and len(p) == 0 and not p._watchers

    asyncio.run(main())
