"""A checker for exactly-once pipelines: what a consume-transform-produce loop copied, against what
a read_committed reader sees.

The loop (tests/clients/java/TxnCli.java ``ctp``, or tests/support/ctp_odradek.py with odradek's
client) copies each input record to the output partition of the same number, one transaction
per poll, and tags every output record with headers
``txn`` (the transaction's id, ``<process>:<k>``), ``n`` (how many records that transaction
wrote) and ``src`` (``<partition>:<offset>`` of the input record). It reports each transaction's
values before asking for the commit, then ``committed`` or ``aborted`` once answered; a process
killed in between leaves the outcome unknown (fencing by the next process aborts it, and the
history must then show it aborted: either way, all or nothing).

The anomalies, as Jepsen's analysis of Bufstream 0.1 (2024) names them for Kafka's transactions
(write loss, aborted read, torn transactions) and what exactly-once adds:

- lost: an input record with no visible copy in the output (the pipeline drained its input);
- duplicated: an input record with more than one visible copy (processed twice, both committed);
- aborted_visible: a visible output record of a transaction the producer saw aborted
  (``abortTransaction()`` returned) - Jepsen's "aborted read";
- torn: a transaction partly visible: some of its records visible, others not (its size from
  its ``n`` header, and from the process's report when there is one);
- lost_transactions: a transaction the producer saw committed of which nothing is visible;
- reordered: an output partition whose visible copies are not in their input partition's order;
- phantom: a visible output record that copies no input record (or an input record of another
  partition).

``check(inputs, transactions, outputs) -> Report``; ``Report.ok`` and ``str(report)``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Out:
    """One record read (read_committed) from the output topic."""

    partition: int
    offset: int
    value: bytes
    txn: str
    n: int


@dataclass
class Txn:
    """One transaction as the loop reported it: its values, then its outcome
    ("committed" | "aborted" | None for unknown: killed or fenced before an answer)."""

    id: str
    values: list[bytes] = field(default_factory=list)
    outcome: str | None = None


@dataclass
class Report:
    lost: list[bytes] = field(default_factory=list)
    duplicated: dict[bytes, list[tuple[int, int]]] = field(default_factory=dict)
    aborted_visible: dict[str, list[bytes]] = field(default_factory=dict)
    torn: dict[str, tuple[int, int]] = field(default_factory=dict)  # txn -> (visible, size)
    lost_transactions: list[str] = field(default_factory=list)
    reordered: dict[int, list[tuple[bytes, bytes]]] = field(default_factory=dict)
    phantom: list[Out] = field(default_factory=list)
    inputs: int = 0
    visible: int = 0
    transactions: dict[str, int] = field(default_factory=dict)  # outcome -> count

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.duplicated
            or self.aborted_visible
            or self.torn
            or self.lost_transactions
            or self.reordered
            or self.phantom
        )

    def __str__(self) -> str:
        lines = [f"inputs {self.inputs}, visible outputs {self.visible}, transactions {self.transactions}"]
        for name in ("lost", "duplicated", "aborted_visible", "torn", "lost_transactions", "reordered", "phantom"):
            items = getattr(self, name)
            if items:
                shown = list(items.items())[:5] if isinstance(items, dict) else items[:5]
                lines.append(f"  {name}: {len(items)}, e.g. {shown}")
        return "\n".join(lines)


def check(inputs: dict[bytes, tuple[int, int]], transactions: list[Txn], outputs: list[Out]) -> Report:
    """``inputs``: every input record's value -> (partition, offset), values unique;
    ``transactions``: what the loop reported; ``outputs``: everything a read_committed reader of
    the output topic read, to its end."""
    r = Report(inputs=len(inputs), visible=len(outputs))
    for t in transactions:
        key = t.outcome or "unknown"
        r.transactions[key] = r.transactions.get(key, 0) + 1

    copies: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    by_txn: dict[str, list[Out]] = defaultdict(list)
    per_partition: dict[int, list[Out]] = defaultdict(list)
    for o in outputs:
        src = inputs.get(o.value)
        if src is None or src[0] != o.partition:
            r.phantom.append(o)
            continue
        copies[o.value].append((o.partition, o.offset))
        by_txn[o.txn].append(o)
        per_partition[o.partition].append(o)

    r.lost = sorted(v for v in inputs if v not in copies)
    r.duplicated = {v: sorted(at) for v, at in copies.items() if len(at) > 1}

    reported = {t.id: t for t in transactions}
    for tid, outs in by_txn.items():
        t = reported.get(tid)
        if t is not None and t.outcome == "aborted":
            r.aborted_visible[tid] = [o.value for o in outs]
        size = max([o.n for o in outs] + ([len(t.values)] if t is not None and t.values else []))
        if len(outs) != size:
            r.torn[tid] = (len(outs), size)
    for t in transactions:
        if t.outcome == "committed" and t.id not in by_txn and t.values:
            r.lost_transactions.append(t.id)

    for p, outs in per_partition.items():
        outs.sort(key=lambda o: o.offset)
        back = []
        for a, b in zip(outs, outs[1:], strict=False):
            if inputs[b.value][1] < inputs[a.value][1] and b.value not in r.duplicated:
                back.append((a.value, b.value))
        if back:
            r.reordered[p] = back
    return r


def parse_loop_lines(lines, transactions: dict[str, Txn]) -> None:
    """Fold the ctp loop's JSON lines (already decoded to dicts) into ``transactions``."""
    import base64

    for d in lines:
        if "txn" in d:
            transactions[d["txn"]] = Txn(d["txn"], [base64.b64decode(v) for v in d["values"]])
        elif "committed" in d:
            transactions.setdefault(d["committed"], Txn(d["committed"])).outcome = "committed"
        elif "aborted" in d:
            transactions.setdefault(d["aborted"], Txn(d["aborted"])).outcome = "aborted"
