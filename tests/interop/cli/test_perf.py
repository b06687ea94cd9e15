"""`odradek perf ...` and the benchmark runner's smoke mode, against a real broker (tiny sizes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.interop
ROOT = Path(__file__).resolve().parents[3]


def last_json(out: str) -> dict:
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


@pytest.mark.parametrize("driver", ["odradek", "confluent"])
def test_perf_produce_consume(odr, driver):
    if driver == "confluent":
        pytest.importorskip("confluent_kafka")
    t = f"perf-{uuid.uuid4().hex[:8]}"
    r = last_json(
        odr(
            "perf",
            "produce",
            "-t",
            t,
            "--partitions",
            "2",
            "-n",
            "5000",
            "-s",
            "64",
            "--acks",
            "all",
            "-z",
            "lz4",
            "--driver",
            driver,
            "--json",
        ).output
    )
    assert r["records"] == 5000 and r["errors"] == 0 and r["records_per_s"] > 0
    assert r["mb_per_s"] > 0 and r["latency_ms"]["count"] >= 5000 // 16
    assert r["latency_ms"]["p50"] <= r["latency_ms"]["p99"] <= r["latency_ms"]["max"]
    c = last_json(odr("perf", "consume", "-t", t, "-n", "5000", "--driver", driver, "--json").output)
    assert c["records"] == 5000 and abs(c["mb_per_s"] * c["seconds"] * 1e6 - 5000 * 64) < 1
    # human-readable form
    out = odr("perf", "consume", "-t", t, "-n", "100", "--driver", driver).output
    assert "records_per_s" in out


def test_perf_produce_native_batch(odr):
    """--native-batch hands librdkafka lists through produce_batch: every record lands once, in
    chunks that do not divide N, and every 16th record still reports its latency."""
    pytest.importorskip("confluent_kafka")
    t = f"pb-{uuid.uuid4().hex[:8]}"
    r = last_json(
        odr(
            "perf",
            "produce",
            "-t",
            t,
            "--partitions",
            "3",
            "-n",
            "25000",
            "-s",
            "50",
            "--driver",
            "confluent",
            "--native-batch",
            "4096",
            "--json",
        ).output
    )
    assert r["records"] == 25000 and r["errors"] == 0 and r["native_batch"] == 4096
    assert r["latency_ms"]["count"] == -(-25000 // 16)
    c = last_json(
        odr("perf", "consume", "-t", t, "-n", "25000", "--driver", "confluent", "--timeout", "5", "--json").output
    )
    assert c["records"] == 25000
    late = last_json(
        odr("perf", "consume", "-t", t, "-n", "25001", "--driver", "confluent", "--timeout", "2", "--json").output
    )
    assert late["records"] == 25000  # nothing was sent twice
    bad = odr("perf", "produce", "-t", t, "-n", "10", "--native-batch", "5", ok=False)
    assert bad.exit_code != 0 and "--native-batch needs --driver confluent" in bad.output


@pytest.mark.parametrize("driver", ["odradek", "confluent"])
@pytest.mark.serial  # timed: alone in its tier (tests/README.md)
def test_perf_e2e(odr, driver):
    if driver == "confluent":
        pytest.importorskip("confluent_kafka")
    t = f"e2e-{uuid.uuid4().hex[:8]}"
    r = last_json(
        odr(
            "perf", "e2e", "-t", t, "--rate", "500", "--duration", "2", "--warmup", "0.5", "--driver", driver, "--json"
        ).output
    )
    assert r["sent"] == 1000 and r["received"] == 1000
    assert r["latency_ms"]["count"] >= 600 and 0 < r["latency_ms"]["p50"] < 1000
    assert 400 < r["achieved_rate"] < 600


@pytest.mark.serial  # timed: alone in its tier (tests/README.md)
def test_perf_throughput_limit(odr):
    t = f"thr-{uuid.uuid4().hex[:8]}"
    r = last_json(odr("perf", "produce", "-t", t, "-n", "2000", "--throughput", "2000", "--json").output)
    assert 0.8 < r["seconds"] < 3.0


def test_percentiles():
    from odradek.cli.perf import percentiles

    p = percentiles([i * 1_000_000 for i in range(1, 1001)])  # 1..1000 ms
    assert p["count"] == 1000 and p["p50"] == 500 and p["p99"] == 990 and p["p999"] == 999 and p["max"] == 1000
    assert percentiles([])["p99"] is None


def test_bench_quick_smoke(tmp_path):  # checks what it writes, not how fast: beside others
    """bench/broker/run.py --quick --peers none completes and writes its results (tiny sizes)."""
    pytest.importorskip("confluent_kafka")
    out = tmp_path / "r.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    p = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "broker" / "run.py"),
            "--quick",
            "--peers",
            "none",
            "--records",
            "3000",
            "--e2e-seconds",
            "1",
            "--drivers",
            "confluent",
            "--chart",
            "",
            "--repeats",
            "2",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    data = json.loads(out.read_text())
    rows = data["rows"]
    assert {r["workload"] for r in rows} == {"produce", "consume", "e2e"}
    # every produce and consume row ran twice (repetitions 0 and 1), the C producer by produce_batch
    by_row: dict = {}
    for r in rows:
        if r["workload"] != "e2e":
            by_row.setdefault((r["workload"], r["driver"], r["partitions"], r["acks"], r["compression"]), []).append(
                r["rep"]
            )
    assert by_row and all(sorted(reps) == [0, 1] for reps in by_row.values()), by_row
    assert {k[1] for k in by_row if k[0] == "produce"} == {"confluent-batch"}
    assert not [r for r in rows if "error" in r], [r["error"] for r in rows if "error" in r]
    assert all(r["broker_cpu_s"] >= 0 for r in rows)
    assert "| row |" in p.stdout  # the table of figures
