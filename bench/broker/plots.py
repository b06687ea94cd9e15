"""Charts of a run (matplotlib, PNG): `ratios` (odradek ÷ each Kafka, per row, with every
repetition's ratio as a dot), `absolute` (records/s, broker CPU-s per million records,
e2e p99 and memory, per broker) and `metadata` (Metadata round trips by partition count).

Run as a script it draws the charts of several result files together (their rows merged; the
brokers are those of the first file, then any others):

    .venv/bin/python bench/broker/plots.py docs/out.png bench/broker/results/a.json bench/broker/results/b.json
    .venv/bin/python bench/broker/plots.py --metadata docs/out.png a.json b.json   # only the Metadata chart, at out.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from report import THROUGHPUT, by_key, cpu_m, label, rate, rep_ratios, row_label

COLORS = {
    "odradek": "#1f77b4",
    "kafka39": "#d62728",
    "kafka4": "#9467bd",
    "tansu": "#ff7f0e",
    "mock": "#2ca02c",
    "baseline": "#7f7f7f",
}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def FuncFormatter(f):  # noqa: N802 - matplotlib's class, imported late (Agg first)
    from matplotlib.ticker import FuncFormatter as F

    return F(f)


def ratios(rows: list[dict], brokers: list[str], path: Path, title: str) -> None:
    peers = [b for b in brokers if b != "odradek"]
    if not peers:
        return
    plt = _plt()
    by, keys = by_key(rows)
    keys = [k for k in keys if k[0] in THROUGHPUT]
    if not keys:
        return
    fig, axes = plt.subplots(1, 2, figsize=(15, 0.42 * len(keys) + 2.2), sharey=True)
    width = 0.8 / len(peers)
    for ax, field, what in (
        (axes[0], "rate_by_rep", "records/s, odradek ÷ peer (right of 1: odradek faster)"),
        (axes[1], "cpu_by_rep", "broker CPU-s per million records, odradek ÷ peer (left of 1: odradek cheaper)"),
    ):
        for i, p in enumerate(peers):
            ys, vals = [], []
            for y, k in enumerate(keys):
                o, r = by.get(("odradek", *k)), by.get((p, *k))
                a, b = (rate(o), rate(r)) if field == "rate_by_rep" else (cpu_m(o), cpu_m(r))
                pos = y + (i - (len(peers) - 1) / 2) * width
                if a and b:
                    ys.append(pos)
                    vals.append(a / b)
                    runs = rep_ratios(o, r, field)
                    ax.plot(runs, [pos] * len(runs), "k.", ms=3, alpha=0.6)
            ax.barh(ys, vals, height=width, color=COLORS.get(p), label=f"÷ {label(p)}", alpha=0.85)
        ax.axvline(1.0, color="black", lw=1)
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
        ax.xaxis.set_minor_formatter(FuncFormatter(lambda x, _: f"{x:g}" if f"{x:g}"[0] in "25" else ""))
        ax.set_title(what, fontsize=10)
        ax.grid(axis="x", alpha=0.3, which="both")
        ax.legend(fontsize=8)
    axes[0].set_yticks(range(len(keys)))
    axes[0].set_yticklabels([row_label(k) for k in keys], fontsize=8)
    axes[0].invert_yaxis()
    fig.suptitle(title + " (bars: ratio of medians; dots: each run)", fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def absolute(rows: list[dict], brokers: list[str], path: Path, title: str) -> None:
    plt = _plt()
    by, keys = by_key(rows)
    tkeys = [k for k in keys if k[0] in THROUGHPUT]
    ekeys = [k for k in keys if k[0] == "e2e"]
    fig = plt.figure(figsize=(16, 0.4 * max(len(tkeys), 8) + 7.5))
    grid = fig.add_gridspec(2, 2, height_ratios=[max(len(tkeys), 8) * 0.4 + 1, 4.5])
    ax_rate, ax_cpu = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
    ax_e2e, ax_mem = fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[1, 1])
    width = 0.8 / max(1, len(brokers))
    for ax, get, what in (
        (ax_rate, rate, "records/s (higher is better)"),
        (ax_cpu, cpu_m, "broker CPU-s per million records (lower is better, log)"),
    ):
        for i, b in enumerate(brokers):
            vals = [get(by.get((b, *k))) or 0 for k in tkeys]
            ax.barh([y + i * width for y in range(len(tkeys))], vals, height=width, label=label(b), color=COLORS.get(b))
        ax.set_yticks([y + width * (len(brokers) - 1) / 2 for y in range(len(tkeys))])
        ax.set_yticklabels([row_label(k) for k in tkeys] if ax is ax_rate else [], fontsize=8)
        ax.invert_yaxis()
        ax.set_title(what, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
        ax.legend(fontsize=8)
    ax_cpu.set_xscale("log")
    for i, b in enumerate(brokers):
        vals = []
        for k in ekeys:
            lat = (by.get((b, *k)) or {}).get("latency_ms") or {}
            vals.append(lat.get("p99") or 0)
        ax_e2e.bar([x + i * width for x in range(len(ekeys))], vals, width=width, label=label(b), color=COLORS.get(b))
    ax_e2e.set_xticks([x + width * (len(brokers) - 1) / 2 for x in range(len(ekeys))])
    ax_e2e.set_xticklabels(
        [f"librdkafka {k[5]:,}/s" if k[5] else "Kafka EndToEndLatency (serial)" for k in ekeys], fontsize=8
    )
    if any(ax_e2e.containers) and ekeys:
        ax_e2e.set_yscale("log")
    ax_e2e.set_title("end-to-end latency p99, ms (log, lower is better)", fontsize=10)
    ax_e2e.legend(fontsize=7)
    idle = {(r["broker"], r.get("idle_conns") or 0): r for r in rows if r["workload"] == "idle"}
    groups = [("idle", lambda b: (idle.get((b, 0)) or {}).get("rss_mb"))]
    conns = sorted({n for _, n in idle if n})
    for n in conns:
        groups.append((f"{n:,} idle conns", lambda b, n=n: (idle.get((b, n)) or {}).get("rss_mb")))
    groups.append(("peak (VmHWM)", lambda b: max((r.get("hwm_mb") or 0 for r in rows if r["broker"] == b), default=0)))
    for i, b in enumerate(brokers):
        vals = [g(b) or 0 for _, g in groups]
        ax_mem.bar([x + i * width for x in range(len(groups))], vals, width=width, label=label(b), color=COLORS.get(b))
    ax_mem.set_xticks([x + width * (len(brokers) - 1) / 2 for x in range(len(groups))])
    ax_mem.set_xticklabels([g for g, _ in groups], fontsize=8)
    ax_mem.set_title("broker resident memory, MiB (lower is better)", fontsize=10)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def metadata(rows: list[dict], brokers: list[str], path: Path, title: str) -> bool:
    """Metadata v12 round trips for one topic by its partition count: p50 bars with the p99 as a
    tick (median of the runs), and the broker's CPU per request. False when there are none."""
    by, keys = by_key(rows)
    mkeys = sorted((k for k in keys if k[0] == "metadata"), key=lambda k: k[2])
    if not mkeys:
        return False
    plt = _plt()
    fig, (ax_lat, ax_cpu) = plt.subplots(1, 2, figsize=(13, 4.8))
    width = 0.8 / max(1, len(brokers))
    for i, b in enumerate(brokers):
        xs = [x + i * width for x in range(len(mkeys))]
        lat = [((by.get((b, *k)) or {}).get("latency_ms") or {}) for k in mkeys]
        ax_lat.bar(xs, [m.get("p50") or 0 for m in lat], width=width, label=label(b), color=COLORS.get(b))
        ax_lat.scatter(xs, [m.get("p99") or float("nan") for m in lat], marker="_", s=120, color="black", zorder=3)
        cpu = [cpu_m(by.get((b, *k))) for k in mkeys]
        ax_cpu.bar(xs, [c / 1000 if c else 0 for c in cpu], width=width, label=label(b), color=COLORS.get(b))
    for ax, what in (
        (ax_lat, "round trip ms, bar p50, tick p99 (log, lower is better)"),
        (ax_cpu, "broker CPU ms per request (log, lower is better)"),
    ):
        ax.set_xticks([x + width * (len(brokers) - 1) / 2 for x in range(len(mkeys))])
        ax.set_xticklabels([f"{k[2]:,} partitions" for k in mkeys], fontsize=9)
        ax.set_yscale("log")
        ax.set_title(what, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def charts(rows: list[dict], brokers: list[str], path: Path, title: str) -> list[Path]:
    """`path` gets the absolute chart, `<stem>-ratios.png` beside it the ratios and
    `<stem>-metadata.png` the Metadata round trips (when the run has them)."""
    out = [path]
    absolute(rows, brokers, path, title)
    rpath = path.with_name(path.stem + "-ratios" + path.suffix)
    if len(brokers) > 1:
        ratios(rows, brokers, rpath, title)
        out.append(rpath)
    mpath = path.with_name(path.stem + "-metadata" + path.suffix)
    if metadata(rows, brokers, mpath, f"Metadata v12 for one topic: {title}"):
        out.append(mpath)
    return out


def main(argv: list[str]) -> int:
    only_metadata = "--metadata" in argv
    argv = [a for a in argv if a != "--metadata"]
    if len(argv) < 2:
        raise SystemExit(__doc__)
    out, files = Path(argv[0]), [Path(f) for f in argv[1:]]
    rows: list[dict] = []
    brokers: list[str] = []
    whens = []
    for f in files:
        d = json.loads(f.read_text())
        rows += d["rows"]
        whens.append(d["meta"]["when"])
        brokers += [b for b in d["meta"].get("versions", {}) if b not in brokers]
    title = f"odradek vs {', '.join(label(b) for b in brokers[1:])}: runs {', '.join(whens)}, one 2-core machine"
    if only_metadata:
        if metadata(rows, brokers, out, f"Metadata v12 for one topic: {title}"):
            print(out)
        return 0
    for p in charts(rows, brokers, out, title):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
