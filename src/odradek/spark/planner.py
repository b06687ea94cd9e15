"""Driver-side offset planning: which partitions, which offsets, split into ranges.

The planner owns one odradek `Admin` (topic discovery) and one group-less `Consumer`
(ListOffsets: earliest, latest, by timestamp). Both are created lazily on first use, so a
reader holding a planner still pickles (the clients are dropped by `__getstate__`).
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass

from odradek.client import Admin, Consumer, TopicPartition
from odradek.client.config import ADMIN

from .options import EARLIEST, LATEST, OptionError, SourceOptions

log = logging.getLogger("odradek.spark")

TP = tuple  # (topic, partition)


class DataLossError(RuntimeError):
    """Offsets the query needs are gone (retention, DeleteRecords, topic deletion)."""


@dataclass(frozen=True)
class OffsetRange:
    topic: str
    partition: int
    start: int  # inclusive
    end: int  # exclusive

    @property
    def size(self) -> int:
        return max(self.end - self.start, 0)


def data_loss_message(what: str) -> str:
    return (
        f"{what}. Some data may have been lost because it is no longer available in odradek "
        "(deleted by retention or DeleteRecords, or the topic was deleted). If you want the query "
        "to continue, skipping the lost offsets, set the source option failOnDataLoss to false."
    )


class Planner:
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._admin: Admin | None = None
        self._consumer: Consumer | None = None

    def __getstate__(self):
        d = dict(self.__dict__)
        d["_admin"] = None
        d["_consumer"] = None
        return d

    # ------------------------------------------------------------------ clients
    def _client_cfg(self) -> dict:
        # every setting an admin client takes (connection, timeouts, security.protocol, ssl.*, sasl.*)
        return {k: v for k, v in self.opts.consumer_config.items() if k in ADMIN}

    @property
    def admin(self) -> Admin:
        if self._admin is None:
            self._admin = Admin(self._client_cfg())
        return self._admin

    @property
    def consumer(self) -> Consumer:
        if self._consumer is None:
            cfg = dict(self.opts.consumer_config)
            cfg["allow.auto.create.topics"] = False
            cfg["auto.offset.reset"] = "none"
            cfg.pop("group.id", None)
            self._consumer = Consumer(config=cfg)
        return self._consumer

    def close(self) -> None:
        for c in (self._consumer, self._admin):
            if c is not None:
                try:
                    c.close()
                except Exception:  # noqa: BLE001
                    pass
        self._consumer = self._admin = None

    # ------------------------------------------------------------------ partitions
    def topic_partitions(self) -> set[TP]:
        """The partitions the query reads now (existing ones only)."""
        o = self.opts
        if o.subscribe is not None:
            md = self.admin.describe_topics(None)
            out = set()
            for t in o.subscribe:
                ti = md.get(t)
                if ti is not None and not ti.error:
                    out.update((t, p) for p in ti.partitions)
            return out
        if o.subscribe_pattern is not None:
            rx = re.compile(o.subscribe_pattern)
            md = self.admin.describe_topics(None)
            return {
                (t, p)
                for t, ti in md.items()
                if not ti.is_internal and not ti.error and rx.fullmatch(t)
                for p in ti.partitions
            }
        md = self.admin.describe_topics(None)
        out = set()
        for t, ps in o.assign.items():
            ti = md.get(t)
            if ti is None or ti.error:
                continue
            out.update((t, p) for p in ps if p in ti.partitions)
        return out

    def expected_missing(self, have: set[TP]) -> list[TP]:
        """assign-ed partitions that do not exist."""
        if self.opts.assign is None:
            return []
        return sorted((t, p) for t, ps in self.opts.assign.items() for p in ps if (t, p) not in have)

    # ------------------------------------------------------------------ offsets
    def earliest(self, tps) -> dict[TP, int]:
        tps = list(tps)
        if not tps:
            return {}
        r = self.consumer.beginning_offsets([TopicPartition(*tp) for tp in tps])
        return {(tp.topic, tp.partition): off for tp, off in r.items()}

    def latest(self, tps) -> dict[TP, int]:
        tps = list(tps)
        if not tps:
            return {}
        r = self.consumer.end_offsets([TopicPartition(*tp) for tp in tps])
        return {(tp.topic, tp.partition): off for tp, off in r.items()}

    def for_times(self, ts: dict[TP, int]) -> dict[TP, int | None]:
        if not ts:
            return {}
        r = self.consumer.offsets_for_times({TopicPartition(*tp): t for tp, t in ts.items()})
        return {(tp.topic, tp.partition): (None if v is None else v.offset) for tp, v in r.items()}

    def starting_offsets(self, tps: set[TP], streaming: bool) -> dict[TP, int]:
        """Concrete starting offsets for a new query (precedence: startingTimestamp,
        startingOffsetsByTimestamp, startingOffsets)."""
        o = self.opts
        tps = set(tps)
        if o.starting_ts is not None or o.starting_by_ts is not None:
            if o.starting_ts is not None:
                want = {tp: o.starting_ts for tp in tps}
            else:
                self._check_specified("startingOffsetsByTimestamp", o.starting_by_ts, tps)
                want = dict(o.starting_by_ts)
            found = self.for_times(want)
            missing = [tp for tp, off in found.items() if off is None]
            if missing and o.starting_ts_strategy == "error":
                raise OptionError(
                    "no offset matched the starting timestamp for "
                    + ", ".join(f"{t}-{p}" for t, p in sorted(missing))
                    + " (set startingOffsetsByTimestampStrategy=latest to start at the latest offset instead)"
                )
            latest = self.latest(missing)
            return {tp: (found[tp] if found[tp] is not None else latest[tp]) for tp in want}
        spec = o.starting
        if spec == "earliest":
            return self.earliest(tps)
        if spec == "latest":
            return self.latest(tps)
        self._check_specified("startingOffsets", spec, tps)
        need_e = [tp for tp, off in spec.items() if off == EARLIEST]
        need_l = [tp for tp, off in spec.items() if off == LATEST]
        e, lt = self.earliest(need_e), self.latest(need_l)
        out = {}
        for tp, off in spec.items():
            out[tp] = e[tp] if off == EARLIEST else lt[tp] if off == LATEST else off
        return out

    def ending_offsets(self, tps: set[TP]) -> dict[TP, int]:
        o = self.opts
        tps = set(tps)
        if o.ending_ts is not None or o.ending_by_ts is not None:
            if o.ending_ts is not None:
                want = {tp: o.ending_ts for tp in tps}
            else:
                self._check_specified("endingOffsetsByTimestamp", o.ending_by_ts, tps)
                want = dict(o.ending_by_ts)
            found = self.for_times(want)
            latest = self.latest([tp for tp, off in found.items() if off is None])
            return {tp: (found[tp] if found[tp] is not None else latest[tp]) for tp in want}
        spec = o.ending
        if spec == "latest":
            return self.latest(tps)
        self._check_specified("endingOffsets", spec, tps)
        lt = self.latest([tp for tp, off in spec.items() if off == LATEST])
        return {tp: (lt[tp] if off == LATEST else off) for tp, off in spec.items()}

    def _check_specified(self, name: str, spec: dict, tps: set[TP]) -> None:
        if self.opts.assign is None and self.opts.subscribe is None:
            extra = []  # with a pattern, the spec names the partitions
        else:
            extra = sorted(set(spec) - tps)
        missing = sorted(tps - set(spec))
        if extra:
            raise OptionError(
                f"option {name} names partitions the query does not read or that do not exist: "
                + ", ".join(f"{t}-{p}" for t, p in extra)
            )
        if missing and self.opts.subscribe_pattern is None:
            raise OptionError(f"option {name} does not give an offset for " + ", ".join(f"{t}-{p}" for t, p in missing))

    # ------------------------------------------------------------------ checks
    def check_ranges(self, start: dict[TP, int], end: dict[TP, int], what: str) -> dict[TP, int]:
        """Validate start offsets against the log start; returns adjusted starts.

        Offsets below the log start offset were deleted: fail (failOnDataLoss) or skip them.
        A partition whose end is below its start was truncated or recreated.
        """
        earliest = self.earliest(end.keys())
        out = {}
        for tp, e in end.items():
            s = start.get(tp, earliest[tp])
            lo = earliest[tp]
            if s < lo:
                msg = data_loss_message(
                    f"{what}: offsets {s}..{lo - 1} of {tp[0]}-{tp[1]} are gone (log start offset is now {lo})"
                )
                if self.opts.fail_on_data_loss:
                    raise DataLossError(msg)
                log.warning(msg)
                s = lo
            if e < s:
                msg = data_loss_message(f"{what}: {tp[0]}-{tp[1]} ends at {e} but reading would start at {s}")
                if self.opts.fail_on_data_loss:
                    raise DataLossError(msg)
                log.warning(msg)
                s = e
            out[tp] = s
        return out


def split_ranges(
    ranges: list[OffsetRange], min_partitions: int | None, max_per_range: int | None = None
) -> list[OffsetRange]:
    """Split large ranges so there are at least `min_partitions` of them (sizes proportional to
    the ranges' record counts, like Spark's KafkaOffsetRangeCalculator) and, optionally, none
    over `max_per_range` records."""
    ranges = [r for r in ranges if r.size > 0]
    total = sum(r.size for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        parts = 1
        if min_partitions and len(ranges) < min_partitions and total > 0:
            parts = max(parts, math.ceil(r.size / total * min_partitions))
        if max_per_range:
            parts = max(parts, math.ceil(r.size / max_per_range))
        parts = min(parts, r.size)
        step = r.size / parts
        bounds = [r.start + round(i * step) for i in range(parts)] + [r.end]
        out.extend(OffsetRange(r.topic, r.partition, a, b) for a, b in zip(bounds, bounds[1:]) if b > a)
    return out


def rate_limit(start: dict[TP, int], latest: dict[TP, int], limit: int) -> dict[TP, int]:
    """End offsets taking at most `limit` records in all, split across partitions in proportion
    to what each has available (largest remainder, so the total is exactly min(limit, available))."""
    avail = {tp: max(latest[tp] - start.get(tp, latest[tp]), 0) for tp in latest}
    total = sum(avail.values())
    if total <= limit:
        return dict(latest)
    shares = {tp: limit * a / total for tp, a in avail.items()}
    take = {tp: int(math.floor(s)) for tp, s in shares.items()}
    rest = limit - sum(take.values())
    for tp in sorted(avail, key=lambda tp: (-(shares[tp] - take[tp]), tp))[:rest]:
        take[tp] += 1
    return {tp: start.get(tp, latest[tp]) + min(take[tp], avail[tp]) for tp in latest}
