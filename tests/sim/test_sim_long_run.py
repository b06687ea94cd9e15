"""The long run (`bench/sim/run.py`) goes on where a stopped part left off, and sums its parts.

A 100,000-seed run takes hours: it is run in parts (`--resume`), at idle priority beside other
work (`--idle`), and one summary is made of all of them (`--summarize`), each seed counted once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

RUN = Path(__file__).resolve().parents[2] / "bench" / "sim" / "run.py"


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    return subprocess.run(
        [sys.executable, str(RUN), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def _seed_lines(path: Path) -> list[dict]:
    return [r for r in map(json.loads, path.read_text().splitlines()) if "seed" in r]


def test_a_stopped_long_run_resumes_with_the_seeds_it_has_not_run_and_sums_its_parts(tmp_path):
    out = tmp_path / "results"
    done = _run(
        "--seeds", "3", "--first", "5", "--profile", "ci", "--jobs", "1", "--idle", "--out", str(out), cwd=tmp_path
    )
    assert done.returncode in (0, 1), done.stderr
    (jsonl,) = out.glob("*.jsonl")
    lines = jsonl.read_text().splitlines()
    seeds = _seed_lines(jsonl)
    assert sorted(r["seed"] for r in seeds) == [5, 6, 7]
    assert all(r["cpu"] > 0 for r in seeds)  # each seed's own CPU time, whatever the machine's load

    # as if the part had been killed after its first seed: its run line and one seed line kept,
    # and a half-written last line
    first_seed = next(i for i, line in enumerate(lines) if '"seed"' in line)
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(lines[: first_seed + 1]) + '\n{"seed": 6, "ok": tr')
    resumed = _run("--resume", str(cut), "--jobs", "1", cwd=tmp_path)
    assert resumed.returncode in (0, 1), resumed.stderr
    assert "2 seeds to run (1 done before), profile ci" in resumed.stdout
    again = _seed_lines_tolerant(cut)
    assert sorted(r["seed"] for r in again) == [5, 6, 7]
    # the same seed gives the same run, in the first part and in the resumed one
    digests = {r["seed"]: r["digest"] for r in seeds}
    assert {r["seed"]: r["digest"] for r in again} == digests

    summary = _run("--summarize", str(jsonl), str(cut), cwd=tmp_path)
    assert summary.returncode == 0, summary.stderr
    assert summary.stdout.startswith("3 seeds from 2 file(s): 5-7\n")
    assert summary.stdout.count(" commit ") == 3  # the first run, and the cut file's two parts
    assert "3 seeds (ci profile)" in summary.stdout


def _seed_lines_tolerant(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "seed" in r:
            out.append(r)
    return out


def test_time_the_batch_was_stopped_is_not_counted_against_a_seed():
    """The long run's pauser stops the whole batch (SIGSTOP) while tests run, for half an hour
    at times: a seed in progress must not then be called a hang by its wall-time bound (seeds
    20,656-20,657 were). A wake-up of the batch's loop more than STOPPED_GAP_S after the last
    moves each running seed's start by the gap; an ordinary wake-up moves nothing."""
    from types import SimpleNamespace

    from odradek.testing.sim.batch import STOPPED_GAP_S, discount_stopped

    a, b = SimpleNamespace(since=100.0), SimpleNamespace(since=105.0)
    discount_stopped([a, b], last=110.0, now=111.0)  # the loop's usual second
    assert (a.since, b.since) == (100.0, 105.0)
    gap = STOPPED_GAP_S + 1790.0
    discount_stopped([a, b], last=111.0, now=111.0 + gap)  # stopped for half an hour
    assert (a.since, b.since) == (100.0 + gap, 105.0 + gap)
