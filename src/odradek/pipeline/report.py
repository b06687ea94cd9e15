"""`report`: summary tables (rich) and PNG charts (matplotlib) from the warehouse."""

from __future__ import annotations

import os
from pathlib import Path

from . import ACTIVITY_TOPIC
from .load import read_manifest, read_table, table_dir


def summarize(warehouse: str | os.PathLike, topic: str = ACTIVITY_TOPIC, top: int = 10) -> dict:
    """Plain summaries (lists of rows) computed with pyarrow from the visible loads."""
    import pyarrow.compute as pc

    t = read_table(warehouse, topic)
    manifest = read_manifest(table_dir(warehouse, topic))
    if t is None or t.num_rows == 0:
        return {"rows": 0, "loads": manifest["loads"]}
    views = t.filter(pc.equal(t["event_type"], "page_view"))
    minute = pc.floor_temporal(views["event_time"], unit="minute")
    per_minute = (
        views.append_column("minute", minute).group_by("minute").aggregate([("url", "count")]).sort_by("minute")
    )
    top_urls = views.group_by("url").aggregate([("url", "count")]).sort_by([("url_count", "descending")]).slice(0, top)
    by_type = (
        t.group_by("event_type").aggregate([("event_type", "count")]).sort_by([("event_type_count", "descending")])
    )
    by_user = (
        t.group_by("user_id").aggregate([("user_id", "count")]).sort_by([("user_id_count", "descending")]).slice(0, 5)
    )
    refs = (
        views.filter(pc.not_equal(views["referrer"], ""))
        .group_by("referrer")
        .aggregate([("referrer", "count")])
        .sort_by([("referrer_count", "descending")])
        .slice(0, top)
    )
    return {
        "rows": t.num_rows,
        "loads": manifest["loads"],
        "users": pc.count_distinct(t["user_id"]).as_py(),
        "first": pc.min(t["event_time"]).as_py(),
        "last": pc.max(t["event_time"]).as_py(),
        "per_minute": list(zip(per_minute["minute"].to_pylist(), per_minute["url_count"].to_pylist())),
        "top_urls": list(zip(top_urls["url"].to_pylist(), top_urls["url_count"].to_pylist())),
        "by_type": list(zip(by_type["event_type"].to_pylist(), by_type["event_type_count"].to_pylist())),
        "top_users": list(zip(by_user["user_id"].to_pylist(), by_user["user_id_count"].to_pylist())),
        "top_referrers": list(zip(refs["referrer"].to_pylist(), refs["referrer_count"].to_pylist())),
    }


def render(summary: dict, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    console.print(f"[bold]{summary['rows']:,}[/] events in {len(summary['loads'])} committed load(s)")
    if not summary["rows"]:
        return
    console.print(f"{summary['users']:,} users, {summary['first']} .. {summary['last']}")
    for title, key, cols in (
        ("Events by type", "by_type", ("type", "events")),
        ("Top URLs (page views)", "top_urls", ("url", "views")),
        ("Top referrers", "top_referrers", ("referrer", "views")),
        ("Busiest users (crawlers?)", "top_users", ("user", "events")),
    ):
        tb = Table(title=title)
        tb.add_column(cols[0])
        tb.add_column(cols[1], justify="right")
        for a, b in summary[key]:
            tb.add_row(str(a), f"{b:,}")
        console.print(tb)
    tb = Table(title="Committed loads")
    for c in ("id", "records", "ranges"):
        tb.add_column(c)
    for ld in summary["loads"]:
        rs = ", ".join(f"{t}-{p}:[{s},{e})" for t, ps in ld["ranges"].items() for p, (s, e) in ps.items())
        tb.add_row(ld["id"], f"{ld['records']:,}", rs)
    console.print(tb)


def charts(summary: dict, out_dir: str | os.PathLike) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    if summary.get("per_minute"):
        xs, ys = zip(*summary["per_minute"])
        fig, ax = plt.subplots(figsize=(9, 3.5))
        ax.plot(xs, ys, marker=".")
        ax.set_title("Page views per minute")
        ax.set_ylabel("views")
        fig.autofmt_xdate()
        fig.tight_layout()
        p = out / "views_per_minute.png"
        fig.savefig(p, dpi=100)
        plt.close(fig)
        files.append(p)
    if summary.get("top_urls"):
        urls, n = zip(*summary["top_urls"])
        fig, ax = plt.subplots(figsize=(8, 4))
        ax.barh(list(reversed(urls)), list(reversed(n)))
        ax.set_title("Top URLs by page views")
        fig.tight_layout()
        p = out / "top_urls.png"
        fig.savefig(p, dpi=100)
        plt.close(fig)
        files.append(p)
    return files
