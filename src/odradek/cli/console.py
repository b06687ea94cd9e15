"""`odradek produce TOPIC` and `odradek consume TOPIC`: console producer and consumer
(kafka-console-producer.sh / kafka-console-consumer.sh) over `odradek.client`.

Producer input, one record a line from stdin:
    [HEADERS<TAB>][KEY<SEP>]VALUE
where HEADERS (with --parse-headers) is ``k1:v1,k2:v2`` and SEP is --key-separator.

For a secured listener, the client settings file (security.protocol, sasl.*, ssl.*) is
`--producer.config` / `--consumer.config` as Kafka's console tools name it, or `--command-config`.
"""

from __future__ import annotations

import base64
import json
import sys
import time

import click

from odradek.cli.client_config import config_file_option, load_client_config
from odradek.cli.topics import bootstrap_option, run  # noqa: F401  (shared option)

COMPRESSIONS = ["none", "gzip", "snappy", "lz4", "zstd"]


def parse_header_list(text: str) -> list[tuple[str, bytes | None]]:
    """``k1:v1,k2:v2`` -> [("k1", b"v1"), ("k2", b"v2")]; ``k`` alone is a null-valued header."""
    out: list[tuple[str, bytes | None]] = []
    for item in text.split(","):
        if not item:
            continue
        k, sep, v = item.partition(":")
        out.append((k, v.encode() if sep else None))
    return out


def parse_line(line: bytes, key_sep: bytes | None, parse_headers: bool, headers_delim: bytes = b"\t"):
    """One input line -> (headers, key, value)."""
    headers: list = []
    if parse_headers:
        h, sep, rest = line.partition(headers_delim)
        if not sep:
            raise ValueError(f"no headers delimiter {headers_delim!r} in line {line[:60]!r}")
        headers = parse_header_list(h.decode())
        line = rest
    key = None
    if key_sep is not None:
        k, sep, v = line.partition(key_sep)
        if not sep:
            raise ValueError(f"no key separator {key_sep.decode()!r} in line {line[:60]!r}")
        key, line = k, v
    return headers, key, line


@click.command("produce")
@bootstrap_option
@config_file_option("--producer.config")
@click.argument("topic")
@click.option("--key-separator", default=None, help="Split each line into KEY<SEP>VALUE at the first SEP.")
@click.option("--headers", "static_headers", default=None, metavar="K:V,K:V", help="Headers added to every record.")
@click.option("--parse-headers", is_flag=True, help="Each line starts with K:V,K:V<TAB> headers.")
@click.option("--compression", "-z", type=click.Choice(COMPRESSIONS), default="none", show_default=True)
@click.option("--acks", type=click.Choice(["0", "1", "all", "-1"]), default="all", show_default=True)
@click.option("--partition", "-p", type=int, default=None, help="Send every record to this partition.")
@click.option("--linger-ms", type=int, default=5, show_default=True)
@click.option("--batch-size", type=int, default=16384, show_default=True)
@click.option("--null-marker", default=None, help="A value (or key) equal to this is sent as null.")
@click.option("--input", "input_file", type=click.File("rb"), default="-", help="Read from a file instead of stdin.")
def produce_cmd(
    bootstrap,
    command_config,
    topic,
    key_separator,
    static_headers,
    parse_headers,
    compression,
    acks,
    partition,
    linger_ms,
    batch_size,
    null_marker,
    input_file,
):
    """Send each line of stdin to TOPIC as one record."""
    from odradek.client import Producer
    from odradek.client import errors as E

    key_sep = key_separator.encode() if key_separator is not None else None
    sh = parse_header_list(static_headers) if static_headers else []
    null = null_marker.encode() if null_marker is not None else None
    failures: list[BaseException] = []

    def on_done(_meta, exc):
        if exc is not None:
            failures.append(exc)

    try:
        p = Producer(
            config=load_client_config(command_config),
            bootstrap_servers=bootstrap,
            acks=-1 if acks == "all" else int(acks),
            compression_type=compression,
            linger_ms=linger_ms,
            batch_size=batch_size,
            enable_idempotence=acks in ("all", "-1"),
        )
    except (E.KafkaError, OSError, ValueError) as e:
        raise click.ClickException(f"cannot connect to {bootstrap}: {e}") from None
    sent = 0
    try:
        for raw in input_file:
            line = raw.rstrip(b"\r\n") if raw.endswith(b"\n") else raw
            try:
                headers, key, value = parse_line(line, key_sep, parse_headers)
            except ValueError as e:
                raise click.ClickException(str(e)) from None
            if null is not None:
                key = None if key == null else key
                value = None if value == null else value
            p.send(topic, value, key=key, headers=(sh + headers) or None, partition=partition, callback=on_done)
            sent += 1
            if failures:
                break
        p.flush()
    except E.KafkaError as e:
        raise click.ClickException(f"{type(e).__name__}: {e}") from None
    finally:
        p.close(10)
    if failures:
        raise click.ClickException(f"{len(failures)} record(s) not delivered: {failures[0]!r}")
    click.echo(f"{sent} record(s) sent to {topic}", err=True)


# ----------------------------------------------------------------------------- consumer
def _text(b: bytes | None) -> str | None:
    if b is None:
        return None
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(b).decode()


def format_record(
    r,
    fmt: str,
    print_key: bool,
    print_headers: bool,
    print_offset: bool,
    print_timestamp: bool,
    print_partition: bool,
    key_sep: str,
    null_literal: str,
) -> bytes:
    if fmt == "json":
        d = {
            "topic": r.topic,
            "partition": r.partition,
            "offset": r.offset,
            "timestamp": r.timestamp,
            "timestamp_type": "LogAppendTime" if r.timestamp_type == 1 else "CreateTime",
            "key": _text(r.key),
            "value": _text(r.value),
            "headers": [[k, _text(v)] for k, v in (r.headers or [])],
        }
        return json.dumps(d, ensure_ascii=False).encode() + b"\n"
    parts: list[bytes] = []
    if print_timestamp:
        parts.append(f"{'LogAppendTime' if r.timestamp_type == 1 else 'CreateTime'}:{r.timestamp}".encode())
    if print_partition:
        parts.append(f"Partition:{r.partition}".encode())
    if print_offset:
        parts.append(f"Offset:{r.offset}".encode())
    if print_headers:
        hs = ",".join(f"{k}:{'' if v is None else v.decode('utf-8', 'backslashreplace')}" for k, v in (r.headers or []))
        parts.append(hs.encode() if hs else b"NO_HEADERS")
    if print_key:
        parts.append(null_literal.encode() if r.key is None else r.key)
    parts.append(null_literal.encode() if r.value is None else r.value)
    return key_sep.encode().join(parts) + b"\n"


@click.command("consume")
@bootstrap_option
@config_file_option("--consumer.config")
@click.argument("topic")
@click.option("--from-beginning", is_flag=True, help="Start at the earliest offset when there is no committed one.")
@click.option("--group", "-g", default=None, help="Consumer group (subscribe; commits offsets).")
@click.option("--partition", "-p", "partitions", type=int, multiple=True, help="Read only this partition (repeatable).")
@click.option("--offset", "-o", default=None, help="With --partition: earliest, latest or a number.")
@click.option("--max-messages", "-n", type=int, default=None, help="Exit after this many records.")
@click.option("--timeout-ms", type=int, default=None, help="Exit when no record arrived for this long.")
@click.option("--format", "fmt", type=click.Choice(["raw", "json"]), default="raw", show_default=True)
@click.option("--print-key", "-K", is_flag=True)
@click.option("--print-headers", "-H", is_flag=True)
@click.option("--print-offset", "-O", is_flag=True)
@click.option("--print-timestamp", "-T", is_flag=True)
@click.option("--print-partition", "-P", is_flag=True)
@click.option("--separator", default="\t", show_default=repr("\t"), help="Between printed fields (raw format).")
@click.option("--null-literal", default="null", show_default=True)
def consume_cmd(
    bootstrap,
    command_config,
    topic,
    from_beginning,
    group,
    partitions,
    offset,
    max_messages,
    timeout_ms,
    fmt,
    print_key,
    print_headers,
    print_offset,
    print_timestamp,
    print_partition,
    separator,
    null_literal,
):
    """Print records of TOPIC to stdout, one a line."""
    from odradek.client import Consumer, TopicPartition
    from odradek.client import errors as E

    if offset is not None and not partitions:
        raise click.UsageError("--offset needs --partition")
    if offset is not None and offset not in ("earliest", "latest") and not offset.lstrip("-").isdigit():
        raise click.BadParameter("earliest, latest or a number", param_hint="--offset")
    if partitions and group:
        raise click.UsageError("--partition and --group are exclusive (a group assigns partitions itself)")
    reset = "earliest" if from_beginning or offset == "earliest" else "latest"
    cfg = dict(bootstrap_servers=bootstrap, auto_offset_reset=reset, fetch_max_wait_ms=200)
    if group:
        cfg["group_id"] = group
    out = sys.stdout.buffer if hasattr(sys.stdout, "buffer") else click.get_binary_stream("stdout")
    n = 0
    try:
        c = Consumer(config=load_client_config(command_config), **cfg)
    except (E.KafkaError, OSError, ValueError) as e:
        raise click.ClickException(f"cannot connect to {bootstrap}: {e}") from None
    try:
        if group:
            c.subscribe([topic])
        else:
            parts = sorted(partitions) if partitions else sorted(c.partitions_for_topic(topic))
            tps = [TopicPartition(topic, p) for p in parts]
            c.assign(tps)
            if offset is not None:
                for tp in tps:
                    if offset == "earliest":
                        c.seek_to_beginning(tp)
                    elif offset == "latest":
                        c.seek_to_end(tp)
                    elif int(offset) >= 0:
                        c.seek(tp, int(offset))
                    else:  # -N: N records before the end
                        end = c.end_offsets([tp])[tp]
                        c.seek(tp, max(0, end + int(offset)))
        last = time.monotonic()
        while max_messages is None or n < max_messages:
            recs = c.poll(0.5, max_records=None if max_messages is None else max_messages - n)
            if not recs:
                if timeout_ms is not None and (time.monotonic() - last) * 1000 >= timeout_ms:
                    break
                continue
            last = time.monotonic()
            for r in recs:
                out.write(
                    format_record(
                        r,
                        fmt,
                        print_key,
                        print_headers,
                        print_offset,
                        print_timestamp,
                        print_partition,
                        separator,
                        null_literal,
                    )
                )
            out.flush()
            n += len(recs)
    except KeyboardInterrupt:
        pass
    except E.KafkaError as e:
        raise click.ClickException(f"{type(e).__name__}: {e}") from None
    except BrokenPipeError:
        pass
    finally:
        try:
            c.close()
        except Exception:  # noqa: BLE001
            pass
    click.echo(f"Processed a total of {n} messages", err=True)
