"""`odradek transactions ...`: transactions, like Kafka's kafka-transactions.sh.

    odradek transactions list [--state S ...] [--producer-id N ...] [--duration-filter MS]
    odradek transactions describe --transactional-id ID
    odradek transactions describe-producers --topic T --partition P
    odradek transactions abort --topic T --partition P --start-offset N
    odradek transactions abort --topic T --partition P --producer-id N --producer-epoch E --coordinator-epoch C

All take ``--bootstrap-server/-b host:port`` (default 127.0.0.1:9092, or
$ODRADEK_BOOTSTRAP_SERVER), ``--command-config FILE`` for a secured listener (client settings:
security.protocol, sasl.*, ssl.*; cli/client_config.py), and use `odradek.client.Admin`. `abort`
ends a hanging transaction on one partition by writing an
ABORT marker there (WriteTxnMarkers to the partition's leader): with ``--start-offset`` it
finds, as Kafka's tool does, the producer whose open transaction on that partition starts at
that offset (DescribeProducers) and takes its producer id, epoch and coordinator epoch.
"""

from __future__ import annotations

import time

import click

from .client_config import command_config_option, load_client_config
from .groups import _console, _fail, _run
from .topics import bootstrap_option as _bootstrap_opt


def _admin(bootstrap: str, command_config: str | None = None):
    from odradek.client import Admin

    settings = load_client_config(command_config)
    settings.update({"bootstrap.servers": bootstrap, "client.id": "odradek-cli"})
    try:
        return Admin(config=settings)
    except Exception as e:  # noqa: BLE001
        _fail(f"cannot connect to {bootstrap}: {e}")


@click.group("transactions")
def transactions() -> None:
    """Transactions: list, describe, describe producers, abort a hanging one."""


@transactions.command("list")
@click.option("--state", "states", multiple=True, metavar="STATE", help="Only this state (repeatable), e.g. Ongoing.")
@click.option("--producer-id", "producer_ids", multiple=True, type=int, metavar="N", help="Only this producer id.")
@click.option("--duration-filter", type=int, default=-1, metavar="MS", help="Only transactions open at least MS ms.")
@_bootstrap_opt
@command_config_option
def list_cmd(states, producer_ids, duration_filter: int, bootstrap: str, command_config: str | None) -> None:
    """Every transactional id the brokers coordinate, with its producer id and state."""
    from rich.table import Table

    def go():
        with _admin(bootstrap, command_config) as a:
            rows = a.list_transactions(list(states), list(producer_ids), duration_filter)
        t = Table(title=f"transactions on {bootstrap}")
        for col in ("TRANSACTIONAL ID", "COORDINATOR", "PRODUCER ID", "STATE"):
            t.add_column(col, overflow="fold")
        for r in rows:
            t.add_row(r.transactional_id, str(r.coordinator_id), str(r.producer_id), r.state)
        _console().print(t)

    _run(go)


@transactions.command("describe")
@click.option("--transactional-id", required=True, help="The transactional id to describe.")
@_bootstrap_opt
@command_config_option
def describe_cmd(transactional_id: str, bootstrap: str, command_config: str | None) -> None:
    """The coordinator's view of one transactional id: producer, state, open transaction."""
    from rich.table import Table

    def go():
        with _admin(bootstrap, command_config) as a:
            d = a.describe_transactions([transactional_id])[transactional_id]
        now = int(time.time() * 1000)
        start = d.transaction_start_time_ms
        t = Table(title=f"transactional id {transactional_id}")
        t.add_column("FIELD")
        t.add_column("VALUE", overflow="fold")
        for name, value in (
            ("CoordinatorId", d.coordinator_id),
            ("ProducerId", d.producer_id),
            ("ProducerEpoch", d.producer_epoch),
            ("TransactionState", d.state),
            ("TransactionTimeoutMs", d.transaction_timeout_ms),
            ("CurrentTransactionStartTimeMs", start if start >= 0 else "None"),
            ("TransactionDurationMs", now - start if start >= 0 else "None"),
            ("TopicPartitions", ", ".join(f"{tp.topic}-{tp.partition}" for tp in d.topic_partitions) or "None"),
        ):
            t.add_row(name, str(value))
        _console().print(t)

    _run(go)


@transactions.command("describe-producers")
@click.option("--topic", required=True)
@click.option("--partition", required=True, type=int)
@_bootstrap_opt
@command_config_option
def describe_producers_cmd(topic: str, partition: int, bootstrap: str, command_config: str | None) -> None:
    """The producers a partition's leader keeps state of, with their open transaction's first offset."""
    from rich.table import Table

    def go():
        with _admin(bootstrap, command_config) as a:
            states = next(iter(a.describe_producers([(topic, partition)]).values()))
        t = Table(title=f"producers of {topic}-{partition}")
        for col in (
            "PRODUCER ID",
            "PRODUCER EPOCH",
            "COORDINATOR EPOCH",
            "LAST SEQUENCE",
            "LAST TIMESTAMP",
            "CURRENT TXN START OFFSET",
        ):
            t.add_column(col)
        for s in states:
            start = s.current_transaction_start_offset
            t.add_row(
                str(s.producer_id),
                str(s.producer_epoch),
                str(s.coordinator_epoch),
                str(s.last_sequence),
                str(s.last_timestamp),
                str(start) if start >= 0 else "None",
            )
        _console().print(t)

    _run(go)


@transactions.command("abort")
@click.option("--topic", required=True)
@click.option("--partition", required=True, type=int)
@click.option("--start-offset", type=int, metavar="N", help="The first offset of the transaction to abort.")
@click.option("--producer-id", type=int, metavar="N")
@click.option("--producer-epoch", type=int, metavar="E")
@click.option("--coordinator-epoch", type=int, metavar="C")
@_bootstrap_opt
@command_config_option
def abort_cmd(
    topic, partition, start_offset, producer_id, producer_epoch, coordinator_epoch, bootstrap, command_config
) -> None:
    """Abort a hanging transaction on one partition (writes an ABORT marker there)."""
    explicit = (producer_id, producer_epoch, coordinator_epoch)
    if start_offset is not None and any(v is not None for v in explicit):
        raise click.UsageError("give either --start-offset or --producer-id/--producer-epoch/--coordinator-epoch")
    if start_offset is None and any(v is None for v in explicit):
        raise click.UsageError("give --start-offset, or all of --producer-id, --producer-epoch and --coordinator-epoch")

    def go():
        from odradek.client import TopicPartition
        from odradek.client.aio.admin_txn import AbortTransactionSpec

        tp = TopicPartition(topic, partition)
        with _admin(bootstrap, command_config) as a:
            if start_offset is not None:
                states = a.describe_producers([tp]).get(tp, [])
                found = [s for s in states if s.current_transaction_start_offset == start_offset]
                if not found:
                    _fail(f"no open transaction on {topic}-{partition} starts at offset {start_offset}")
                s = found[0]
                spec = AbortTransactionSpec(tp, s.producer_id, s.producer_epoch, s.coordinator_epoch)
            else:
                spec = AbortTransactionSpec(tp, producer_id, producer_epoch, coordinator_epoch)
            a.abort_transaction(spec)
        _console().print(
            f"Aborted the transaction of producer {spec.producer_id} (epoch {spec.producer_epoch}) "
            f"on {topic}-{partition}."
        )

    _run(go)
