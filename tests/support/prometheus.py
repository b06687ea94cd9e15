"""Reading a broker's Prometheus endpoint in tests."""

from __future__ import annotations

import time
import urllib.request


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted label items): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def val(m: dict, name: str, **labels) -> float:
    return m.get((name, tuple(sorted(labels.items()))), 0.0)


def wait_for(port: int, pred, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        m = scrape(port)
        if pred(m) or time.monotonic() > deadline:
            return m
        time.sleep(0.1)
