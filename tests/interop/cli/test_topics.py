"""`odradek topics ...` against a real broker."""

from __future__ import annotations

import json
import uuid

import pytest

pytestmark = pytest.mark.interop


def name() -> str:
    return f"cli-{uuid.uuid4().hex[:8]}"


def test_create_list_describe_alter_delete(odr):
    t = name()
    out = odr("topics", "create", t, "--partitions", "3", "--config", "retention.ms=123456").output
    assert f"Created topic {t}" in out
    assert t in odr("topics", "list").output.split()
    # produce a few records so offsets and sizes show
    odr("produce", t, "--partition", "1", input="a\nb\nc\n")
    d = json.loads(odr("topics", "describe", t, "--json").output)
    assert len(d) == 1 and d[0]["name"] == t
    parts = {p["partition"]: p for p in d[0]["partitions"]}
    assert sorted(parts) == [0, 1, 2]
    assert all(p["leader"] >= 0 and p["replicas"] and p["isr"] for p in parts.values())
    assert parts[1]["log_start_offset"] == 0 and parts[1]["log_end_offset"] == 3
    assert parts[0]["log_end_offset"] == 0
    assert parts[1]["size"] > 0 and parts[0]["size"] == 0
    assert d[0]["configs"]["retention.ms"] == "123456"
    # the table form mentions the same things
    table = odr("topics", "describe", t).output
    assert t in table and "log end" in table and "retention.ms" in table

    odr("topics", "alter", t, "--partitions", "5", "--config", "retention.ms=999", "--config", "cleanup.policy=compact")
    d = json.loads(odr("topics", "describe", t, "--json").output)[0]
    assert len(d["partitions"]) == 5
    assert d["configs"]["retention.ms"] == "999" and d["configs"]["cleanup.policy"] == "compact"
    odr("topics", "alter", t, "--delete-config", "retention.ms")
    d = json.loads(odr("topics", "describe", t, "--json", "--no-offsets").output)[0]
    assert d["configs"]["retention.ms"] != "999"

    assert f"Deleted topic {t}" in odr("topics", "delete", t).output
    assert t not in odr("topics", "list").output.split()


def test_errors_are_reported(odr):
    t = name()
    odr("topics", "create", t)
    res = odr("topics", "create", t, ok=False)
    assert res.exit_code == 1 and "TopicAlreadyExists" in res.output
    assert odr("topics", "create", t, "--if-not-exists").exit_code == 0
    res = odr("topics", "delete", name(), ok=False)
    assert res.exit_code == 1 and "UnknownTopicOrPartition" in res.output
    assert odr("topics", "delete", name(), "--if-exists").exit_code == 0
    res = odr("topics", "alter", t, ok=False)
    assert res.exit_code == 2  # usage: nothing to alter
    res = odr("topics", "create", "bad/name", ok=False)
    assert res.exit_code == 1


def test_list_internal_and_describe_all(odr):
    t = name()
    odr("topics", "create", t, "-p", "2")
    # a group commit creates __consumer_offsets
    odr("consume", t, "--group", "g-" + t, "--from-beginning", "--timeout-ms", "1500")
    assert "__consumer_offsets" not in odr("topics", "list").output.split()
    assert "__consumer_offsets" in odr("topics", "list", "--internal").output.split()
    d = json.loads(odr("topics", "describe", "--json", "--no-offsets").output)
    assert t in {x["name"] for x in d}


def test_unreachable_broker_fails_cleanly(odr):
    from click.testing import CliRunner
    from support.broker import free_port

    from odradek.cli.main import main

    res = CliRunner().invoke(main, ["topics", "list", "--bootstrap-server", f"127.0.0.1:{free_port()}"])
    assert res.exit_code == 1
    assert "Error" in res.output
