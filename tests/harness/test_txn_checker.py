"""The exactly-once checker (support/txn_checker.py) on hand-made histories: a clean one passes,
and each anomaly, fed alone, is reported as itself and as nothing else."""

from __future__ import annotations

import base64

from support.txn_checker import Out, Txn, check, parse_loop_lines

# input: partition 0 holds a0..a3 at offsets 0..3, partition 1 holds b0..b3
INPUTS = {f"{p}{i}".encode(): (part, i) for part, p in enumerate("ab") for i in range(4)}


def clean() -> tuple[list[Txn], list[Out]]:
    """Two committed transactions of 4 records each, and an aborted one in between whose records
    (a copy of the second's) are invisible, as a read_committed reader sees them."""
    txns = [
        Txn("p:0", [b"a0", b"a1", b"b0", b"b1"], "committed"),
        Txn("p:1", [b"a2", b"a3", b"b2", b"b3"], "aborted"),
        Txn("p:2", [b"a2", b"a3", b"b2", b"b3"], "committed"),
    ]
    outs = [
        Out(0, 0, b"a0", "p:0", 4),
        Out(0, 1, b"a1", "p:0", 4),
        Out(1, 0, b"b0", "p:0", 4),
        Out(1, 1, b"b1", "p:0", 4),
        # offsets 2, 3 (aborted copies) and 4 (abort marker) are not visible
        Out(0, 6, b"a2", "p:2", 4),
        Out(0, 7, b"a3", "p:2", 4),
        Out(1, 6, b"b2", "p:2", 4),
        Out(1, 7, b"b3", "p:2", 4),
    ]
    return txns, outs


def anomalies(report) -> set[str]:
    names = ("lost", "duplicated", "aborted_visible", "torn", "lost_transactions", "reordered", "phantom")
    return {n for n in names if getattr(report, n)}


def test_clean_history_passes():
    txns, outs = clean()
    r = check(INPUTS, txns, outs)
    assert r.ok, str(r)
    assert r.transactions == {"committed": 2, "aborted": 1}


def test_unknown_outcome_is_fine_when_all_or_nothing():
    txns, outs = clean()
    txns[2].outcome = None  # killed before the commit's answer: it committed, all of it visible
    txns.append(Txn("q:0", [b"a3"], None))  # killed, then aborted by fencing: nothing visible
    assert check(INPUTS, txns, outs).ok


def test_lost_write():
    txns, outs = clean()
    outs = [o for o in outs if o.value != b"b3"]
    txns[2].outcome = None  # not reported committed: only the loss and the tear show
    r = check(INPUTS, txns, outs)
    assert anomalies(r) == {"lost", "torn"}
    assert r.lost == [b"b3"]
    assert r.torn == {"p:2": (3, 4)}


def test_lost_committed_transaction():
    txns, outs = clean()
    outs = [o for o in outs if o.txn != "p:2"]
    r = check(INPUTS, txns, outs)
    assert anomalies(r) == {"lost", "lost_transactions"}
    assert r.lost == [b"a2", b"a3", b"b2", b"b3"]
    assert r.lost_transactions == ["p:2"]


def test_duplicate():
    txns, outs = clean()
    txns.append(Txn("q:0", [b"a3"], "committed"))  # reprocessed after a crash, both committed
    outs.append(Out(0, 9, b"a3", "q:0", 1))
    r = check(INPUTS, txns, outs)
    assert anomalies(r) == {"duplicated"}
    assert r.duplicated == {b"a3": [(0, 7), (0, 9)]}


def test_aborted_read():
    txns, outs = clean()
    outs += [Out(0, 2, b"a2", "p:1", 4), Out(0, 3, b"a3", "p:1", 4), Out(1, 2, b"b2", "p:1", 4)]
    outs.append(Out(1, 3, b"b3", "p:1", 4))
    r = check(INPUTS, txns, outs)
    assert "aborted_visible" in anomalies(r)
    assert anomalies(r) == {"aborted_visible", "duplicated"}  # the aborted copies repeat p:2's
    assert r.aborted_visible == {"p:1": [b"a2", b"a3", b"b2", b"b3"]}


def test_torn_transaction():
    """Half of a transaction visible: its partition-1 part is missing (a marker lost on one
    partition), while the input was reprocessed and copied again in full by a later one."""
    txns, outs = clean()
    txns[2].outcome = None
    txns.append(Txn("q:0", [b"a2", b"a3", b"b2", b"b3"], "committed"))
    outs = [o for o in outs if not (o.txn == "p:2" and o.partition == 1)]
    outs += [Out(0, 9, b"a2", "q:0", 4), Out(0, 10, b"a3", "q:0", 4)]
    outs += [Out(1, 9, b"b2", "q:0", 4), Out(1, 10, b"b3", "q:0", 4)]
    r = check(INPUTS, txns, outs)
    assert anomalies(r) == {"torn", "duplicated"}
    assert r.torn == {"p:2": (2, 4)}


def test_torn_without_the_loop_report():
    """The n header alone shows a tear when the process died before reporting its transaction."""
    txns, outs = clean()
    txns = [t for t in txns if t.id != "p:2"]
    outs = [o for o in outs if o.value != b"b3"]
    r = check(INPUTS, txns, outs)
    assert anomalies(r) == {"torn", "lost"}
    assert r.torn == {"p:2": (3, 4)}


def test_reordered():
    txns, outs = clean()
    outs = [o if o.value not in (b"a0", b"a1") else Out(0, 1 - o.offset, o.value, o.txn, o.n) for o in outs]
    r = check(INPUTS, txns, outs)
    assert anomalies(r) == {"reordered"}
    assert r.reordered == {0: [(b"a1", b"a0")]}


def test_phantom():
    txns, outs = clean()
    outs.append(Out(0, 8, b"zz", "p:2", 4))
    outs.append(Out(0, 9, b"b0", "x:0", 1))  # an input of partition 1 in output partition 0
    r = check(INPUTS, txns, outs)
    assert anomalies(r) == {"phantom"}
    assert len(r.phantom) == 2


def test_report_names_each_anomaly():
    txns, outs = clean()
    r = check(INPUTS, txns, [o for o in outs if o.value != b"a0"])
    assert not r.ok
    assert "lost: 1" in str(r) and "torn: 1" in str(r)


def test_parse_loop_lines():
    b64 = base64.b64encode
    lines = [
        {"txn": "p:0", "values": [b64(b"a0").decode()]},
        {"committed": "p:0"},
        {"txn": "p:1", "values": [b64(b"a1").decode()]},
        {"aborted": "p:1", "why": "--abort-every"},
        {"txn": "p:2", "values": [b64(b"a1").decode()]},
        {"fenced": "p:2", "error": "ProducerFencedException"},
    ]
    txns: dict = {}
    parse_loop_lines(lines, txns)
    assert [(t.id, t.values, t.outcome) for t in txns.values()] == [
        ("p:0", [b"a0"], "committed"),
        ("p:1", [b"a1"], "aborted"),
        ("p:2", [b"a1"], None),
    ]
