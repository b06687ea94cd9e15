"""`odradek groups ...` against a real broker and a real consumer group (confluent-kafka
members, each its own process; see tests/support/group_member.py). The CLI runs as a subprocess."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from support.group_member import OVERRIDES, Member, create_topic, split_ok, wait_until

pytestmark = pytest.mark.interop
pytest.importorskip("confluent_kafka")


def cli(bootstrap: str, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="220", NO_COLOR="1", TERM="dumb")
    p = subprocess.run(
        [sys.executable, "-m", "odradek", "groups", *args, "--bootstrap-server", bootstrap],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    if ok:
        assert p.returncode == 0, f"{args}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def rows(out: str) -> list[list[str]]:
    """The cells of every table row of rich's output."""
    return [
        [c.strip() for c in line.strip().strip("│").split("│")]
        for line in out.splitlines()
        if line.strip().startswith("│")
    ]


def offsets_table(out: str) -> dict[int, tuple[str, str, str, str]]:
    """describe: partition -> (current, log end, lag, client id)."""
    return {int(r[1]): (r[2], r[3], r[4], r[5]) for r in rows(out) if len(r) == 6 and r[1].isdigit()}


def plan_table(out: str) -> dict[int, tuple[str, str]]:
    return {int(r[1]): (r[2], r[3]) for r in rows(out) if len(r) == 4 and r[1].isdigit()}


def produce_at(bootstrap: str, topic: str, values: list[str], partitions: int, ts_ms: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, v in enumerate(values):
        p.produce(topic, v.encode(), partition=i % partitions, timestamp=ts_ms)
    assert p.flush(15) == 0


def test_groups_cli_list_describe_reset_delete(broker_factory, tmp_path):
    b = broker_factory(overrides=OVERRIDES)
    n = 4
    create_topic(b.bootstrap, "cli", n)
    t1 = int(time.time() * 1000) - 60_000  # first 24 records one minute ago, then 16 now
    produce_at(b.bootstrap, "cli", [f"a{i}" for i in range(24)], n, t1)
    produce_at(b.bootstrap, "cli", [f"b{i}" for i in range(16)], n, t1 + 60_000)
    ms = [Member("confluent", b.bootstrap, "cli", "cli-group", f"cli-m{i}", log_dir=tmp_path) for i in range(2)]
    try:
        wait_until(lambda: split_ok(ms, n) and len(ms[0].values) + len(ms[1].values) >= 40, 60, "2-way split", ms)

        out = cli(b.bootstrap, "list").stdout
        assert ["cli-group", "consumer", "Stable"] in rows(out)

        out = cli(b.bootstrap, "describe", "cli-group").stdout
        assert "state Stable" in out and "members 2" in out
        members = {r[2]: r for r in rows(out) if len(r) == 6 and r[2].startswith("cli-m")}
        assert set(members) == {"cli-m0", "cli-m1"}
        for m in ms:
            r = members[m.client_id]
            assert r[0].startswith(m.client_id + "-") and "127.0.0.1" in r[3]  # member id, host
            assert {int(x.rsplit("-", 1)[1]) for x in r[5].split(", ")} == m.assignment
        offs = offsets_table(out)
        assert set(offs) == set(range(n))
        for p, (cur, end, lag, owner) in offs.items():
            assert (cur, end, lag) == ("10", "10", "0")
            assert owner == next(m.client_id for m in ms if p in m.assignment)

        # an active group: refused, dry run or not
        for extra in ((), ("--execute",)):
            p = cli(b.bootstrap, "reset-offsets", "cli-group", "--topic", "cli", "--to-earliest", *extra, ok=False)
            assert p.returncode == 1 and "inactive" in p.stderr and "Stable" in p.stderr
        p = cli(b.bootstrap, "delete", "cli-group", ok=False)
        assert p.returncode == 1 and re.search(r"NonEmpty|not empty", p.stderr, re.I), p.stderr
    finally:
        for m in ms:
            m.stop()

    # Empty now: dry runs change nothing
    assert "state Empty" in cli(b.bootstrap, "describe", "cli-group").stdout
    assert {
        p: v[0]
        for p, v in plan_table(
            cli(b.bootstrap, "reset-offsets", "cli-group", "--topic", "cli", "--to-earliest").stdout
        ).items()
    } == {p: "10" for p in range(n)}
    cases = [
        (("--to-earliest",), "0"),
        (("--to-latest",), "10"),
        (("--to-offset", "3"), "3"),
        (("--to-offset", "99"), "10"),
        (("--shift-by", "-4"), "6"),
        (("--shift-by", "-40"), "0"),
        (("--to-datetime", time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t1 / 1000 + 30))), "6"),
    ]
    with ThreadPoolExecutor(4) as pool:  # independent dry runs, one CLI process each
        outs = list(
            pool.map(lambda c: cli(b.bootstrap, "reset-offsets", "cli-group", "--topic", "cli", *c[0]).stdout, cases)
        )
    for (opt, want), out in zip(cases, outs):
        assert "dry run" in out
        assert plan_table(out) == {p: ("10", want) for p in range(n)}, (opt, out)
    assert {v[0] for v in offsets_table(cli(b.bootstrap, "describe", "cli-group").stdout).values()} == {"10"}
    p = cli(b.bootstrap, "reset-offsets", "cli-group", "--topic", "cli", ok=False)
    assert p.returncode == 2  # no option: usage error

    # --execute, then a new member resumes from the new offsets
    out = cli(b.bootstrap, "reset-offsets", "cli-group", "--topic", "cli", "--shift-by", "-4", "--execute").stdout
    assert "committed" in out and plan_table(out) == {p: ("10", "6") for p in range(n)}
    assert {p: v[:3] for p, v in offsets_table(cli(b.bootstrap, "describe", "cli-group").stdout).items()} == {
        p: ("6", "10", "4") for p in range(n)
    }
    m = Member("confluent", b.bootstrap, "cli", "cli-group", "cli-again", log_dir=tmp_path)
    try:
        wait_until(lambda: len(m.values) >= 16, 30, "the member to re-read 4 records per partition", [m])
        time.sleep(0.5)
        assert sorted(m.values) == sorted(f"b{i}" for i in range(16))
    finally:
        m.stop()

    out = cli(b.bootstrap, "delete", "cli-group").stdout
    assert "succeeded" in out
    assert not [r for r in rows(cli(b.bootstrap, "list").stdout) if r and r[0] == "cli-group"]
    p = cli(b.bootstrap, "describe", "cli-group", ok=False)
    assert p.returncode == 1 and "does not exist" in p.stderr
