"""Options of the `odradek` data source: the names and rules of Spark's built-in Kafka source.

Everything is checked at planning time, on the driver, so a typo or a conflicting pair fails
the query before any task runs, with a message naming the options involved.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from odradek.client import sasl
from odradek.client.config import CONSUMER, PRODUCER
from odradek.client.tls import ssl_context

EARLIEST, LATEST = -2, -1
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")

# Kafka (de)serializer and group keys Spark refuses, with its reasons.
REJECTED_KAFKA_KEYS = {
    "group.id": "the source picks its own group id (set option groupIdPrefix, or kafka.group.id is rejected)",
    "auto.offset.reset": "use startingOffsets / endingOffsets instead",
    "key.deserializer": "keys are always read as binary; cast or use DataFrame operations",
    "value.deserializer": "values are always read as binary; cast or use DataFrame operations",
    "key.serializer": "keys are always written as binary or string",
    "value.serializer": "values are always written as binary or string",
    "enable.auto.commit": "the source commits no offsets to Kafka",
    "interceptor.classes": "interceptors are not supported",
}

SOURCE_OPTIONS = {
    "kafka.bootstrap.servers",
    "subscribe",
    "subscribepattern",
    "assign",
    "startingoffsets",
    "endingoffsets",
    "startingtimestamp",
    "startingoffsetsbytimestamp",
    "endingtimestamp",
    "endingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy",
    "maxoffsetspertrigger",
    "minoffsetspertrigger",
    "maxtriggerdelay",
    "minpartitions",
    "failondataloss",
    "includeheaders",
    "kafkaconsumer.polltimeoutms",
    "fetchoffset.numretries",
    "fetchoffset.retryintervalms",
    "groupidprefix",
    "maxrecordsperpartition",
    "path",
}
SINK_OPTIONS = {
    "kafka.bootstrap.servers",
    "topic",
    "includeheaders",
    "kafka.partitioner.class",
    "path",
    "checkpointlocation",
    "exactlyonce",
}
BATCH_ONLY = {"endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"}
STREAM_ONLY = {"maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay"}


class OptionError(ValueError):
    """A bad, unknown or conflicting option (raised at planning time)."""


def _bool(name: str, v: str | None, default: bool) -> bool:
    if v is None:
        return default
    s = str(v).strip().lower()
    if s in ("true", "1", "yes"):
        return True
    if s in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name} must be true or false, got {v!r}")


def _int(name: str, v: str | None, minimum: int | None = None) -> int | None:
    if v is None:
        return None
    try:
        n = int(str(v).strip())
    except ValueError:
        raise OptionError(f"option {name} must be an integer, got {v!r}") from None
    if minimum is not None and n < minimum:
        raise OptionError(f"option {name} must be at least {minimum}, got {n}")
    return n


_DUR = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d)?\s*$", re.I)
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, None: 0.001}


def parse_duration(name: str, v: str) -> float:
    """Seconds from '15m', '30s', '500ms', '1h' or a bare number of milliseconds."""
    m = _DUR.match(str(v))
    if not m:
        raise OptionError(f"option {name} must be a duration like 15m, 30s or 500ms, got {v!r}")
    unit = m.group(2).lower() if m.group(2) else None
    return float(m.group(1)) * _UNITS[unit]


def _json(name: str, v: str) -> Any:
    try:
        return json.loads(v)
    except ValueError as e:
        raise OptionError(f"option {name} is not valid JSON ({e}): {v!r}") from None


def parse_partition_offsets(name: str, v: str) -> dict[tuple[str, int], int]:
    """'{"t":{"0":23,"1":-2}}' -> {("t", 0): 23, ("t", 1): -2}."""
    d = _json(name, v)
    if not isinstance(d, dict):
        raise OptionError(f"option {name} must be a JSON object of topic -> {{partition: offset}}, got {v!r}")
    out = {}
    for t, parts in d.items():
        if not isinstance(parts, dict):
            raise OptionError(f"option {name}: topic {t!r} must map to {{partition: offset}}, got {parts!r}")
        for p, off in parts.items():
            try:
                out[(str(t), int(p))] = int(off)
            except (TypeError, ValueError):
                raise OptionError(f"option {name}: bad partition/offset {p!r}: {off!r} for topic {t!r}") from None
    return out


def client_config(options: dict[str, str], defaults: dict[str, Any]) -> dict[str, Any]:
    """The `kafka.*` options as an odradek client config (bootstrap included), checked."""
    cfg: dict[str, Any] = {}
    bad = []
    unknown = []
    for k, v in options.items():
        if not k.startswith("kafka."):
            continue
        key = k[len("kafka.") :]
        if key in REJECTED_KAFKA_KEYS:
            bad.append(f"kafka.{key} ({REJECTED_KAFKA_KEYS[key]})")
            continue
        if key == "partitioner.class":
            continue
        if key not in defaults:
            unknown.append(k)
            continue
        cfg[key] = _coerce(v, defaults[key])
    if bad:
        raise OptionError("Kafka option(s) not supported by the odradek source/sink: " + "; ".join(bad))
    if unknown:
        raise OptionError(
            "unknown Kafka client option(s) "
            + ", ".join(sorted(unknown))
            + " (the odradek client accepts: "
            + ", ".join(sorted("kafka." + k for k in defaults))
            + ")"
        )
    check_security(cfg)
    return cfg


def check_security(cfg: dict[str, Any]) -> None:
    """`kafka.security.protocol`, `kafka.sasl.*` and `kafka.ssl.*` as the client will use them,
    checked on the driver at planning time: an unsupported protocol or mechanism (GSSAPI,
    OAUTHBEARER), missing credentials or unreadable stores fail the query before any task runs."""
    protocol = str(cfg.get("security.protocol", "PLAINTEXT")).upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise OptionError(f"option kafka.security.protocol={protocol}: one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL")
    try:
        sasl.authenticator({**CONSUMER, **cfg})
        if protocol in ("SSL", "SASL_SSL"):
            ssl_context({**CONSUMER, **cfg}, server=False)
    except ValueError as e:
        raise OptionError(f"Kafka security option(s): {e}") from None


def _coerce(v: str, default: Any) -> Any:
    if isinstance(default, bool):
        return str(v).lower() == "true"
    if isinstance(default, int):
        try:
            return int(v)
        except ValueError:
            return v
    return v


@dataclass
class SourceOptions:
    """Parsed source options; plain data, so the reader that holds it pickles."""

    consumer_config: dict[str, Any]
    subscribe: list[str] | None = None
    subscribe_pattern: str | None = None
    assign: dict[str, list[int]] | None = None
    starting: str | dict = "latest"  # "earliest" | "latest" | {(t,p): off}
    starting_by_ts: dict | None = None
    starting_ts: int | None = None
    starting_ts_strategy: str = "error"
    ending: str | dict = "latest"
    ending_by_ts: dict | None = None
    ending_ts: int | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_s: float = 900.0
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_s: float = 120.0
    max_records_per_partition: int | None = None
    extra: dict = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        return ",".join(self.consumer_config["bootstrap.servers"])


def _lower(options) -> dict[str, str]:
    return {str(k).lower(): ("" if v is None else str(v)) for k, v in dict(options).items()}


def _check_known(opts: dict[str, str], known: set[str], what: str) -> None:
    unknown = sorted(k for k in opts if k not in known and not k.startswith("kafka."))
    if unknown:
        raise OptionError(f"unknown option(s) for the odradek {what}: {', '.join(unknown)}")


def parse_source_options(options, streaming: bool) -> SourceOptions:
    opts = _lower(options)
    _check_known(opts, SOURCE_OPTIONS, "source")
    if not opts.get("kafka.bootstrap.servers"):
        raise OptionError("option kafka.bootstrap.servers is required")
    if streaming:
        wrong = sorted(k for k in opts if k in BATCH_ONLY)
        if wrong:
            raise OptionError(f"option(s) {', '.join(wrong)} apply only to batch queries")
    else:
        wrong = sorted(k for k in opts if k in STREAM_ONLY)
        if wrong:
            raise OptionError(f"option(s) {', '.join(wrong)} apply only to streaming queries")

    strategies = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k, "") != ""]
    names = {"subscribe": "subscribe", "subscribepattern": "subscribePattern", "assign": "assign"}
    if len(strategies) != 1:
        given = ", ".join(names[k] for k in strategies) or "none"
        raise OptionError(
            f"exactly one of the options subscribe, subscribePattern, assign is required (given: {given})"
        )
    cc = client_config(opts, CONSUMER)
    cc["bootstrap.servers"] = opts["kafka.bootstrap.servers"]
    if "isolation.level" in cc:
        level = str(cc["isolation.level"]).strip().lower()
        if level not in ISOLATION_LEVELS:
            raise OptionError(f"option kafka.isolation.level must be read_uncommitted or read_committed, got {level!r}")
        cc["isolation.level"] = level
    so = SourceOptions(consumer_config=cc)
    so.consumer_config = _normalize_servers(cc)
    kind = strategies[0]
    if kind == "subscribe":
        topics = [t.strip() for t in opts["subscribe"].split(",") if t.strip()]
        if not topics:
            raise OptionError("option subscribe names no topic")
        so.subscribe = topics
    elif kind == "subscribepattern":
        try:
            re.compile(opts["subscribepattern"])
        except re.error as e:
            raise OptionError(f"option subscribePattern is not a valid regex ({e})") from None
        so.subscribe_pattern = opts["subscribepattern"]
    else:
        d = _json("assign", opts["assign"])
        if not isinstance(d, dict) or not all(isinstance(v, list) for v in d.values()):
            raise OptionError(
                f'option assign must be JSON like {{"topicA":[0,1],"topicB":[2,4]}}, got {opts["assign"]!r}'
            )
        so.assign = {str(t): sorted({int(p) for p in ps}) for t, ps in d.items()}

    so.starting = "latest" if streaming else "earliest"
    if "startingoffsets" in opts:
        so.starting = _offsets_spec("startingOffsets", opts["startingoffsets"])
        if not streaming and so.starting == "latest":
            raise OptionError("startingOffsets=latest is not allowed for batch queries")
        if not streaming and isinstance(so.starting, dict):
            latest = [f"{t}-{p}" for (t, p), o in so.starting.items() if o == LATEST]
            if latest:
                raise OptionError(
                    f"startingOffsets: latest (-1) is not allowed for batch queries ({', '.join(latest)})"
                )
    if "startingoffsetsbytimestamp" in opts:
        so.starting_by_ts = parse_partition_offsets("startingOffsetsByTimestamp", opts["startingoffsetsbytimestamp"])
    so.starting_ts = _int("startingTimestamp", opts.get("startingtimestamp"), 0)
    strat = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strat not in ("error", "latest"):
        raise OptionError(f"option startingOffsetsByTimestampStrategy must be error or latest, got {strat!r}")
    so.starting_ts_strategy = strat
    if not streaming:
        if "endingoffsets" in opts:
            so.ending = _offsets_spec("endingOffsets", opts["endingoffsets"])
            if so.ending == "earliest":
                raise OptionError("endingOffsets=earliest is not allowed")
            if isinstance(so.ending, dict):
                early = [f"{t}-{p}" for (t, p), o in so.ending.items() if o == EARLIEST]
                if early:
                    raise OptionError(f"endingOffsets: earliest (-2) is not allowed ({', '.join(early)})")
        if "endingoffsetsbytimestamp" in opts:
            so.ending_by_ts = parse_partition_offsets("endingOffsetsByTimestamp", opts["endingoffsetsbytimestamp"])
        so.ending_ts = _int("endingTimestamp", opts.get("endingtimestamp"), 0)
    so.max_offsets_per_trigger = _int("maxOffsetsPerTrigger", opts.get("maxoffsetspertrigger"), 1)
    so.min_offsets_per_trigger = _int("minOffsetsPerTrigger", opts.get("minoffsetspertrigger"), 0)
    if "maxtriggerdelay" in opts:
        if so.min_offsets_per_trigger is None:
            raise OptionError("option maxTriggerDelay needs minOffsetsPerTrigger")
        so.max_trigger_delay_s = parse_duration("maxTriggerDelay", opts["maxtriggerdelay"])
    if (
        so.max_offsets_per_trigger is not None
        and so.min_offsets_per_trigger is not None
        and so.min_offsets_per_trigger > so.max_offsets_per_trigger
    ):
        raise OptionError(
            "option minOffsetsPerTrigger must not exceed maxOffsetsPerTrigger "
            f"({so.min_offsets_per_trigger} > {so.max_offsets_per_trigger})"
        )
    so.min_partitions = _int("minPartitions", opts.get("minpartitions"), 1)
    so.max_records_per_partition = _int("maxRecordsPerPartition", opts.get("maxrecordsperpartition"), 1)
    so.fail_on_data_loss = _bool("failOnDataLoss", opts.get("failondataloss"), True)
    so.include_headers = _bool("includeHeaders", opts.get("includeheaders"), False)
    pt = _int("kafkaConsumer.pollTimeoutMs", opts.get("kafkaconsumer.polltimeoutms"), 1)
    if pt is not None:
        so.poll_timeout_s = pt / 1000
    return so


def _normalize_servers(cc: dict) -> dict:
    s = cc["bootstrap.servers"]
    if isinstance(s, str):
        cc["bootstrap.servers"] = [x.strip() for x in s.split(",") if x.strip()]
    return cc


def _offsets_spec(name: str, v: str) -> str | dict:
    s = v.strip()
    if s.lower() in ("earliest", "latest"):
        return s.lower()
    return parse_partition_offsets(name, s)


@dataclass
class SinkOptions:
    producer_config: dict[str, Any]
    topic: str | None = None
    include_headers: bool = False
    exactly_once: bool = False


def parse_sink_options(options) -> SinkOptions:
    opts = _lower(options)
    _check_known(opts, SINK_OPTIONS, "sink")
    if not opts.get("kafka.bootstrap.servers"):
        raise OptionError("option kafka.bootstrap.servers is required")
    if "kafka.transactional.id" in opts:
        raise OptionError(
            "option kafka.transactional.id is not supported: with exactlyOnce=true the sink derives one "
            "transactional id per query and Spark partition itself (docs/spark.md)"
        )
    pc = client_config(opts, PRODUCER)
    pc["bootstrap.servers"] = opts["kafka.bootstrap.servers"]
    pclass = opts.get("kafka.partitioner.class")
    if pclass:
        pc["partitioner"] = _partitioner(pclass)
    return SinkOptions(
        _normalize_servers(pc),
        opts.get("topic") or None,
        _bool("includeHeaders", opts.get("includeheaders"), False),
        _bool("exactlyOnce", opts.get("exactlyonce"), False),
    )


def _partitioner(name: str) -> str:
    low = name.rsplit(".", 1)[-1].lower()
    if low in ("roundrobinpartitioner", "roundrobin"):
        return "round_robin"
    if low in ("defaultpartitioner", "default", "murmur2"):
        return "default"
    raise OptionError(
        f"option kafka.partitioner.class={name!r}: supported are DefaultPartitioner, RoundRobinPartitioner"
    )
