"""`odradek groups ...`: consumer groups, like Kafka's kafka-consumer-groups.sh.

    odradek groups list
    odradek groups describe GROUP
    odradek groups reset-offsets GROUP --topic T (--to-earliest | --to-latest | --to-datetime ISO
                                       | --to-offset N | --shift-by N) [--execute]
    odradek groups delete GROUP

All take ``--bootstrap-server host:port`` (default 127.0.0.1:9092) and, for a secured listener,
``--command-config FILE`` (client settings as kafka-consumer-groups takes them: security.protocol,
sasl.*, ssl.*; cli/client_config.py). They use the odradek client (`odradek.client.Admin` for
the group APIs, a group-less `Consumer` for ListOffsets).

As in Kafka, reset-offsets prints the plan and changes nothing unless ``--execute`` is given,
and refuses (exit 1) while the group has members; new offsets are clamped to the partition's
[log start, log end] range, and --to-datetime takes the first offset at or after the time
(log end when there is none).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click

from odradek.cli.client_config import command_config_option, load_client_config

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
INACTIVE = ("Empty", "Dead")

_bootstrap_opt = click.option(
    "--bootstrap-server",
    "bootstrap",
    default=DEFAULT_BOOTSTRAP,
    show_default=True,
    metavar="HOST:PORT",
    help="A broker to connect to.",
)


def _console():
    from rich.console import Console

    return Console()


def _fail(msg: str) -> None:
    raise click.ClickException(msg)


class _Session:
    """An admin client and (lazily) a group-less consumer for offsets."""

    def __init__(self, bootstrap: str, command_config: str | None = None):
        self.bootstrap = bootstrap
        self._consumer: Any = None
        settings = load_client_config(command_config)
        settings.update({"bootstrap.servers": bootstrap, "client.id": "odradek-cli"})
        self.settings = settings
        from odradek.client import Admin

        try:
            self.admin = Admin(config=dict(settings))
        except Exception as e:  # noqa: BLE001
            _fail(f"cannot connect to {bootstrap}: {e}")

    @property
    def consumer(self):
        if self._consumer is None:
            from odradek.client import Consumer

            self._consumer = Consumer(config={**self.settings, "enable.auto.commit": False})
        return self._consumer

    def partitions(self, topic: str) -> list[int]:
        info = self.admin.describe_topics([topic]).get(topic)
        if info is None or not info.partitions:
            _fail(f"topic {topic!r} does not exist")
        return sorted(info.partitions)

    def end_offsets(self, tps) -> dict:
        return dict(self.consumer.end_offsets(list(tps))) if tps else {}

    def beginning_offsets(self, tps) -> dict:
        return dict(self.consumer.beginning_offsets(list(tps))) if tps else {}

    def describe(self, group: str):
        d = self.admin.describe_groups([group]).get(group)
        if d is None:
            _fail(f"group {group!r}: no answer")
        return d

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close(autocommit=False)
        self.admin.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _run(fn):
    """Turn client errors into one-line CLI errors."""
    try:
        return fn()
    except click.ClickException:
        raise
    except Exception as e:  # noqa: BLE001
        _fail(f"{type(e).__name__}: {e}")


@click.group("groups")
def groups() -> None:
    """Consumer groups: list, describe, reset offsets, delete."""


@groups.command("list")
@_bootstrap_opt
@command_config_option
def list_cmd(bootstrap: str, command_config: str | None) -> None:
    """List the groups and their state."""
    from rich.table import Table

    def go():
        with _Session(bootstrap, command_config) as s:
            rows = sorted(s.admin.list_groups())
        t = Table(title=f"groups on {bootstrap}")
        for col in ("GROUP", "PROTOCOL TYPE", "STATE"):
            t.add_column(col)
        for gid, ptype, state in rows:
            t.add_row(gid, ptype or "", state or "")
        _console().print(t)

    _run(go)


@groups.command("describe")
@click.argument("group")
@_bootstrap_opt
@command_config_option
def describe_cmd(group: str, bootstrap: str, command_config: str | None) -> None:
    """Members with their partitions; per partition the committed offset, log end offset and lag."""
    from rich.table import Table

    def go():
        with _Session(bootstrap, command_config) as s:
            d = s.describe(group)
            if d.state == "Dead":
                _fail(f"group {group!r} does not exist")
            committed = s.admin.list_group_offsets(group)
            owner = {}
            for m in d.members:
                for tp in m["assignment"]:
                    owner[(tp[0], tp[1])] = m
            tps = sorted(set(owner) | {(tp[0], tp[1]) for tp in committed})
            ends = s.end_offsets(tps)
        con = _console()
        con.print(
            f"group [bold]{group}[/bold]  state {d.state}  protocol {d.protocol_type or '-'}"
            f"/{d.protocol or '-'}  members {len(d.members)}"
        )
        mt = Table(title="members")
        for col in ("MEMBER ID", "INSTANCE ID", "CLIENT ID", "HOST", "#", "ASSIGNMENT"):
            mt.add_column(col, overflow="fold")
        for m in sorted(d.members, key=lambda m: m["client_id"]):
            parts = sorted((tp[0], tp[1]) for tp in m["assignment"])
            mt.add_row(
                m["member_id"],
                m.get("group_instance_id") or "-",
                m["client_id"],
                m["client_host"],
                str(len(parts)),
                ", ".join(f"{t}-{p}" for t, p in parts) or "-",
            )
        con.print(mt)
        ot = Table(title="offsets")
        for col in ("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CLIENT ID"):
            ot.add_column(col, overflow="fold")
        by = {(tp[0], tp[1]): om for tp, om in committed.items()}
        for t, p in tps:
            om = by.get((t, p))
            end = _get(ends, t, p)
            cur = om.offset if om is not None else None
            lag = end - cur if cur is not None and end is not None else None
            m = owner.get((t, p))
            ot.add_row(t, str(p), _s(cur), _s(end), _s(lag), m["client_id"] if m else "-")
        con.print(ot)

    _run(go)


def _get(d: dict, t: str, p: int):
    for tp, v in d.items():
        if tp[0] == t and tp[1] == p:
            return v.offset if hasattr(v, "offset") else v
    return None


def _s(v) -> str:
    return "-" if v is None else str(v)


def _parse_datetime(s: str) -> int:
    """ISO 8601 -> epoch ms; no time zone means local time (as Kafka's tool)."""
    try:
        dt = datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        _fail(f"--to-datetime: not an ISO 8601 date-time: {s!r}")
    return int(dt.timestamp() * 1000)


@groups.command("reset-offsets")
@click.argument("group")
@click.option("--topic", required=True, help="The topic whose partitions to reset.")
@click.option("--to-earliest", is_flag=True, help="To the log start offset.")
@click.option("--to-latest", is_flag=True, help="To the log end offset.")
@click.option("--to-datetime", metavar="ISO", help="To the first offset at or after this time.")
@click.option("--to-offset", type=int, metavar="N", help="To offset N.")
@click.option("--shift-by", type=int, metavar="N", help="Move the committed offsets by N (may be negative).")
@click.option("--execute", is_flag=True, help="Apply the plan (without it: dry run).")
@_bootstrap_opt
@command_config_option
def reset_cmd(
    group, topic, to_earliest, to_latest, to_datetime, to_offset, shift_by, execute, bootstrap, command_config
) -> None:
    """Plan (and with --execute, commit) new offsets for an inactive group."""
    from rich.table import Table

    chosen = [
        n
        for n, v in (
            ("--to-earliest", to_earliest),
            ("--to-latest", to_latest),
            ("--to-datetime", to_datetime),
            ("--to-offset", to_offset),
            ("--shift-by", shift_by),
        )
        if v not in (None, False)
    ]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-datetime, --to-offset, --shift-by")

    def go():
        from odradek.client import TopicPartition

        with _Session(bootstrap, command_config) as s:
            d = s.describe(group)
            if d.state not in INACTIVE:
                _fail(
                    f"assignments can only be reset if group {group!r} is inactive, but it is {d.state} "
                    f"with {len(d.members)} member(s)"
                )
            tps = [TopicPartition(topic, p) for p in s.partitions(topic)]
            committed = {(tp[0], tp[1]): om.offset for tp, om in s.admin.list_group_offsets(group, tps).items()}
            lo, hi = s.beginning_offsets(tps), s.end_offsets(tps)
            times = {}
            if to_datetime is not None:
                ts = _parse_datetime(to_datetime)
                times = dict(s.consumer.offsets_for_times({tp: ts for tp in tps}))
            plan = {}
            for tp in tps:
                start, end = _get(lo, *tp), _get(hi, *tp)
                cur = committed.get((tp.topic, tp.partition))
                if to_earliest:
                    new = start
                elif to_latest:
                    new = end
                elif to_datetime is not None:
                    found = _get(times, *tp)
                    new = end if found is None or found < 0 else found
                elif to_offset is not None:
                    new = to_offset
                else:
                    if cur is None:
                        _fail(f"{topic}-{tp.partition} has no committed offset to shift")
                    new = cur + shift_by
                plan[tp] = (cur, max(start, min(end, new)))
            if execute:
                s.admin.alter_group_offsets(group, {tp: new for tp, (_c, new) in plan.items()})
        t = Table(
            title=f"group {group}: " + ("new offsets committed" if execute else "dry run (add --execute to apply)")
        )
        for col in ("TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"):
            t.add_column(col)
        for tp, (cur, new) in plan.items():
            t.add_row(tp.topic, str(tp.partition), _s(cur), str(new))
        _console().print(t)

    _run(go)


@groups.command("delete")
@click.argument("group")
@_bootstrap_opt
@command_config_option
def delete_cmd(group: str, bootstrap: str, command_config: str | None) -> None:
    """Delete a group (it must have no members) and its committed offsets."""

    def go():
        with _Session(bootstrap, command_config) as s:
            s.admin.delete_groups([group])
        _console().print(f"Deletion of group {group!r} succeeded.")

    _run(go)
