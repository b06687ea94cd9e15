"""The client needs none of the broker extra's packages (uvloop, prometheus-client, rich, click, kazoo)
nor Spark's: every odradek.client module imports, and a produce/consume round trip against a
real broker works, in a process where an import hook refuses those packages.
(scripts/check-client-install.sh does the same from a fresh venv with `pip install .`.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "support" / "client_only.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_client_round_trip_with_the_broker_extra_refused(odradek_broker):
    r = run(odradek_broker.bootstrap, "--block")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "client-only round trip ok" in r.stdout


def test_the_import_hook_refuses_what_the_broker_imports(odradek_broker):
    r = run(odradek_broker.bootstrap, "--block", "--also", "odradek.broker.metrics")
    assert r.returncode != 0 and "prometheus_client is refused" in r.stderr
    r = run(odradek_broker.bootstrap, "--block", "--also", "odradek.cli.main")
    assert r.returncode != 0 and "click is refused" in r.stderr
