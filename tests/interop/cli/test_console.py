"""`odradek produce` / `odradek consume` against a real broker."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

pytestmark = pytest.mark.interop


def topic(odr, partitions=1) -> str:
    t = f"con-{uuid.uuid4().hex[:8]}"
    odr("topics", "create", t, "-p", str(partitions))
    return t


def test_round_trip_keys_headers_json(odr):
    t = topic(odr)
    odr("produce", t, "--key-separator", ":", "--headers", "src:cli,empty", input="k1:v1\nk2:hello:world\n")
    out = odr("consume", t, "--from-beginning", "--max-messages", "2", "--format", "json").output
    recs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [(r["key"], r["value"]) for r in recs] == [("k1", "v1"), ("k2", "hello:world")]
    assert recs[0]["headers"] == [["src", "cli"], ["empty", None]]
    assert recs[0]["offset"] == 0 and recs[1]["offset"] == 1 and recs[0]["partition"] == 0
    assert recs[0]["timestamp"] > 0 and recs[0]["timestamp_type"] == "CreateTime"


def test_raw_format_with_fields(odr):
    t = topic(odr)
    odr("produce", t, "--parse-headers", "--key-separator", "=", input="a:1,b:2\tkey=value\n")
    out = odr("consume", t, "--from-beginning", "-n", "1", "-K", "-H", "-O", "-P", "-T", "--separator", "|").output
    line = out.splitlines()[0]
    ts, part, off, hs, k, v = line.split("|")
    assert ts.startswith("CreateTime:") and part == "Partition:0" and off == "Offset:0"
    assert hs == "a:1,b:2" and k == "key" and v == "value"


def test_partition_offset_and_max_messages(odr):
    t = topic(odr, 2)
    odr("produce", t, "--partition", "1", input="".join(f"m{i}\n" for i in range(10)))
    odr("produce", t, "--partition", "0", input="zero\n")
    out = odr("consume", t, "--partition", "1", "--offset", "7", "--timeout-ms", "1500").output
    assert out.splitlines()[:3] == ["m7", "m8", "m9"]
    out = odr("consume", t, "--partition", "1", "--offset", "-2", "--timeout-ms", "1500").output
    assert out.splitlines()[:2] == ["m8", "m9"]
    out = odr("consume", t, "--partition", "1", "--offset", "earliest", "-n", "4").output
    assert out.splitlines()[:4] == ["m0", "m1", "m2", "m3"]
    out = odr("consume", t, "--partition", "0", "--offset", "earliest", "-n", "1").output
    assert out.splitlines()[0] == "zero"
    # latest: nothing old is printed
    out = odr("consume", t, "--partition", "1", "--offset", "latest", "--timeout-ms", "800").output
    assert "m9" not in out


def test_group_commits_and_resumes(odr):
    t = topic(odr)
    odr("produce", t, input="a\nb\nc\n")
    g = "g-" + t
    out = odr("consume", t, "--group", g, "--from-beginning", "-n", "2").output
    assert out.splitlines()[:2] == ["a", "b"]
    out = odr("consume", t, "--group", g, "--from-beginning", "-n", "1", "--timeout-ms", "15000").output
    assert out.splitlines()[0] == "c"


def test_compression_and_null_marker(odr):
    t = topic(odr)
    odr("produce", t, "--compression", "lz4", "--key-separator", ":", "--null-marker", "NULL", input="NULL:v\nk:NULL\n")
    out = odr("consume", t, "--from-beginning", "-n", "2", "--format", "json").output
    recs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert recs[0]["key"] is None and recs[0]["value"] == "v"
    assert recs[1]["key"] == "k" and recs[1]["value"] is None


def test_usage_errors(odr):
    t = topic(odr)
    assert odr("consume", t, "--offset", "5", ok=False).exit_code == 2
    assert odr("consume", t, "--group", "g", "--partition", "0", ok=False).exit_code == 2
    res = odr("produce", t, "--key-separator", ":", input="nokey\n", ok=False)
    assert res.exit_code == 1 and "key separator" in res.output


def test_subprocess_pipe(cli_broker, tmp_path):
    """The installed entry point through real pipes, as an operator would use it."""
    t = f"pipe-{uuid.uuid4().hex[:8]}"
    base = [sys.executable, "-m", "odradek"]
    data = "".join(f"line {i}\n" for i in range(100))
    p = subprocess.run(
        base + ["produce", "-b", cli_broker.bootstrap, t], input=data, text=True, capture_output=True, timeout=60
    )
    assert p.returncode == 0, p.stderr
    p = subprocess.run(
        base + ["consume", "-b", cli_broker.bootstrap, t, "--from-beginning", "-n", "100"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout == data
    assert "Processed a total of 100 messages" in p.stderr
