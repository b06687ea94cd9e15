"""The report of a run: medians of the repeated runs, odradek's ratio to every peer per row
(with each repetition's ratio: the brokers ran side by side, minutes apart at most), latency,
Metadata, idle and memory tables, as Markdown."""

from __future__ import annotations

import statistics

LABELS = {"kafka39": "Kafka 3.9", "kafka4": "Kafka 4", "tansu": "Tansu", "mock": "mock", "baseline": "baseline"}
THROUGHPUT = ("produce", "consume")


def label(broker: str) -> str:
    return LABELS.get(broker, broker)


def key(r: dict) -> tuple:
    return (
        r["workload"],
        r["driver"],
        r.get("partitions"),
        r.get("acks"),
        r.get("compression"),
        r.get("rate"),
        r.get("idle_conns") or 0,
    )


def rate(r: dict | None) -> float | None:
    if not r or "error" in r:
        return None
    return r.get("records_per_s") if r["workload"] != "e2e" else r.get("achieved_rate")


def cpu_m(r: dict | None) -> float | None:
    if not r or "error" in r:
        return None
    return r.get("broker_cpu_s_per_m")


def aggregate(rows: list[dict]) -> list[dict]:
    """One row per (broker, row key): median records/s, median broker CPU-s/M and median RSS
    of its repeated runs (each median on its own), every run's figures kept beside them; for
    repeated latency rows the median of each percentile over the runs."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["broker"], *key(r)), []).append(r)
    out = []
    for g in groups.values():
        ok = [r for r in g if "error" not in r]
        if not ok:
            out.append(g[0])
            continue
        m = dict(ok[0])
        if m["workload"] in THROUGHPUT:
            m["records_per_s"] = statistics.median(rate(r) for r in ok)
            cpus = [r["broker_cpu_s_per_m"] for r in ok if r.get("broker_cpu_s_per_m") is not None]
            m["broker_cpu_s_per_m"] = statistics.median(cpus) if cpus else None
            m["rate_by_rep"] = {r.get("rep", 0): rate(r) for r in ok}
            m["cpu_by_rep"] = {r.get("rep", 0): r.get("broker_cpu_s_per_m") for r in ok}
        elif len(ok) > 1:  # repeated latency rows (Metadata): each percentile's and the CPU's median over the runs
            lats = [r["latency_ms"] for r in ok if r.get("latency_ms")]
            m["latency_ms"] = {
                q: statistics.median(lat[q] for lat in lats)
                for q in lats[0]
                if all(isinstance(lat.get(q), (int, float)) for lat in lats)
            }
            cpus = [r["broker_cpu_s_per_m"] for r in ok if r.get("broker_cpu_s_per_m") is not None]
            m["broker_cpu_s_per_m"] = statistics.median(cpus) if cpus else None
        rss = [r["rss_mb"] for r in ok if r.get("rss_mb") is not None]
        if rss:
            m["rss_mb"] = statistics.median(rss)
        m["runs"] = len(ok)
        m["failed_runs"] = len(g) - len(ok)
        out.append(m)
    return out


def rep_ratios(o: dict | None, p: dict | None, field: str) -> list[float]:
    """odradek / peer of each repetition."""
    if not o or not p or field not in o or field not in p:
        return []
    a, b = o[field], p[field]
    return [a[k] / b[k] for k in sorted(a) if k in b and a[k] is not None and b[k]]


def fmt(v, spec=",.0f") -> str:
    return "-" if v is None else format(v, spec)


def ratio(a, b) -> float | None:
    return None if not a or not b else a / b


def row_label(k: tuple) -> str:
    workload, driver, parts, acks, comp, rate_, idle = k
    drv = {"confluent-batch": "librdkafka", "confluent": "librdkafka", "kafka-tools": "Kafka tools"}.get(driver, driver)
    s = f"{workload} {drv} {parts}p"
    if workload == "produce":
        s += f" acks={acks}" + (f" {comp}" if comp != "none" else "")
    if idle:
        s += f" +{idle:,} idle conns"
    return s


def by_key(rows: list[dict]) -> tuple[dict, list[tuple]]:
    agg = aggregate(rows)
    by = {(r["broker"], *key(r)): r for r in agg}
    keys: list[tuple] = []
    for r in agg:
        if key(r) not in keys:
            keys.append(key(r))
    return by, keys


def table(head: list[str], body: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(b) + " |" for b in body]


def ratios_table(by: dict, keys: list[tuple], peers: list[str]) -> list[str]:
    """The headline: odradek ÷ each peer, records/s and broker CPU-s per million records."""
    head = ["row"]
    for p in peers:
        head += [f"rec/s ÷ {label(p)}", "each run", f"CPU/M ÷ {label(p)}", "each run"]
    body = []
    for k in keys:
        if k[0] not in THROUGHPUT:
            continue
        o = by.get(("odradek", *k))
        row = [row_label(k)]
        for p in peers:
            r = by.get((p, *k))
            rr, cr = ratio(rate(o), rate(r)), ratio(cpu_m(o), cpu_m(r))
            row += [
                f"**{rr:.2f}x**" if rr is not None else "-",
                " ".join(f"{x:.2f}" for x in rep_ratios(o, r, "rate_by_rep")) or "-",
                f"**{cr:.2f}x**" if cr is not None else "-",
                " ".join(f"{x:.2f}" for x in rep_ratios(o, r, "cpu_by_rep")) or "-",
            ]
        body.append(row)
    return table(head, body)


def absolute_table(by: dict, keys: list[tuple], brokers: list[str]) -> list[str]:
    head = ["row"]
    for b in brokers:
        head += [f"{label(b)} rec/s", f"{label(b)} CPU-s/M", f"{label(b)} RSS MiB"]
    body = []
    for k in keys:
        if k[0] not in THROUGHPUT:
            continue
        row = [row_label(k)]
        for b in brokers:
            r = by.get((b, *k))
            row += [fmt(rate(r)), fmt(cpu_m(r), ".3f"), fmt(r.get("rss_mb") if r else None)]
        body.append(row)
    return table(head, body)


def e2e_table(by: dict, keys: list[tuple], brokers: list[str]) -> list[str]:
    head = ["e2e"] + [f"{label(b)} p50 / p99 / p99.9 ms" for b in brokers]
    head += [f"p99 ÷ {label(b)}" for b in brokers if b != "odradek"]
    head += [f"{label(b)} CPU-s/M" for b in brokers]
    body = []
    for k in keys:
        if k[0] != "e2e":
            continue
        name = f"{k[6] and 'idle ' or ''}librdkafka at {k[5]:,}/s" if k[5] else "Kafka EndToEndLatency (serial)"
        row = [name]
        lats = {}
        for b in brokers:
            r = by.get((b, *k))
            lat = (r or {}).get("latency_ms") or {}
            lats[b] = lat.get("p99") if "error" not in (r or {}) else None
            ok = lat.get("count") and lat.get("p50") is not None
            row.append(f"{lat['p50']:.2f} / {lat['p99']:.2f} / {lat['p999']:.2f}" if ok else "-")
        for b in brokers:
            if b != "odradek":
                rr = ratio(lats.get("odradek"), lats.get(b))
                row.append(f"{rr:.2f}x" if rr is not None else "-")
        for b in brokers:
            row.append(fmt(cpu_m(by.get((b, *k))), ".1f"))
        body.append(row)
    return table(head, body)


def metadata_table(by: dict, keys: list[tuple], brokers: list[str]) -> list[str]:
    head = ["Metadata v12, one topic"] + [f"{label(b)} p50 / p99 ms" for b in brokers]
    head += [f"p50 ÷ {label(b)}" for b in brokers if b != "odradek"]
    head += [f"{label(b)} CPU ms/request" for b in brokers] + ["response bytes"]
    body = []
    for k in keys:
        if k[0] != "metadata":
            continue
        row = [f"{k[2]:,} partitions"]
        p50 = {}
        for b in brokers:
            r = by.get((b, *k))
            lat = (r or {}).get("latency_ms") or {}
            p50[b] = lat.get("p50")
            row.append(f"{lat['p50']:.2f} / {lat['p99']:.2f}" if lat.get("p50") is not None else "-")
        for b in brokers:
            if b != "odradek":
                rr = ratio(p50.get("odradek"), p50.get(b))
                row.append(f"{rr:.2f}x" if rr is not None else "-")
        for b in brokers:
            c = cpu_m(by.get((b, *k)))
            row.append(fmt(c / 1000 if c is not None else None, ".2f"))
        r = by.get(("odradek", *k)) or {}
        row.append(fmt(r.get("response_bytes")))
        body.append(row)
    return table(head, body)


def idle_table(rows: list[dict], brokers: list[str]) -> list[str]:
    idle = {(r["broker"], r["idle_conns"] or 0): r for r in rows if r["workload"] == "idle"}
    if not idle:
        return []
    head = ["broker", "idle CPU % of a core", "RSS idle MiB"]
    conns = sorted({n for _, n in idle if n})
    for n in conns:
        head += [f"{n:,} conns: opened", "CPU-s to open", "idle CPU %", "RSS MiB", "KiB per conn"]
    head.append("peak RSS (VmHWM) at end, MiB")
    body = []
    for b in brokers:
        base = idle.get((b, 0), {})
        row = [label(b), fmt(pct(base.get("idle_cpu_per_s")), ".1f"), fmt(base.get("rss_mb"))]
        for n in conns:
            r = idle.get((b, n), {})
            row += [
                fmt(r.get("opened")),
                fmt(r.get("open_cpu_s"), ".2f"),
                fmt(pct(r.get("idle_cpu_per_s")), ".1f"),
                fmt(r.get("rss_mb")),
                fmt(r.get("rss_per_conn_kib"), ".1f"),
            ]
        peak = [r.get("hwm_mb") for r in rows if r["broker"] == b and r.get("hwm_mb") is not None]
        row.append(fmt(max(peak) if peak else None))
        body.append(row)
    return table(head, body)


def pct(v):
    return None if v is None else v * 100


def losses(by: dict, keys: list[tuple], peers: list[str]) -> list[str]:
    """Every throughput row where odradek is behind a Kafka peer (records/s below, or broker
    CPU per record above)."""
    out = []
    for p in [p for p in peers if p.startswith("kafka")]:
        for k in keys:
            if k[0] not in THROUGHPUT:
                continue
            o, r = by.get(("odradek", *k)), by.get((p, *k))
            rr, cr = ratio(rate(o), rate(r)), ratio(cpu_m(o), cpu_m(r))
            if rr is not None and rr < 1:
                out.append(f"- {row_label(k)}: records/s {rr:.2f}x {label(p)}")
            if cr is not None and cr > 1:
                out.append(f"- {row_label(k)}: broker CPU per record {cr:.2f}x {label(p)}")
    return out


def report(rows: list[dict], brokers: list[str], meta: dict) -> str:
    by, keys = by_key(rows)
    peers = [b for b in brokers if b != "odradek"]
    versions = ", ".join(f"{label(b)} {v}" for b, v in meta.get("versions", {}).items() if b != "odradek")
    out = [
        f"Run {meta['when']} on {meta['host']} ({meta['cpus']} CPUs), load average at start {meta['load']}"
        + (f", at end {meta['load_end']}" if meta.get("load_end") else "")
        + f". Brokers: odradek{', ' + versions if versions else ''}. Records of 100 B; "
        f"{meta['records']:,} per librdkafka row, {meta.get('records_tools', 0):,} per Kafka-tools row; "
        f"throughput rows: median of {meta.get('repeats', 1)} runs per broker, brokers interleaved run by run.",
        "",
    ]
    if peers and any(k[0] in THROUGHPUT for k in keys):
        out += ["**odradek ÷ peer** (records/s: above 1 is odradek faster; CPU/M: below 1 is odradek cheaper):", ""]
        out += ratios_table(by, keys, peers) + [""]
    out += ["Absolute figures (medians; RSS after the run):", ""]
    out += absolute_table(by, keys, brokers) + [""]
    if any(k[0] == "e2e" for k in keys):
        out += e2e_table(by, keys, brokers) + [""]
    if any(k[0] == "metadata" for k in keys):
        out += metadata_table(by, keys, brokers) + [""]
    out += idle_table(rows, brokers)
    lost = losses(by, keys, peers)
    if lost:
        out += ["", "Rows where odradek is behind Kafka in this run:", ""] + lost
    elif any(p.startswith("kafka") for p in peers):
        out += ["", "odradek is at least Kafka's equal in records/s and broker CPU per record in every row."]
    return "\n".join(out)
