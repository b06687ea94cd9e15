"""Kafka's ZooKeeper layout: the paths and the JSON of each znode, as Kafka 3.9 writes them.

Checked against a Kafka 3.9.2 cluster in ZooKeeper mode (docs/cluster.md lists the znodes),
so anyone who knows Kafka can read an odradek cluster with a ZooKeeper shell, and the
other way round. Pure functions: bytes in, values out.

    /cluster/id                       {"version":"1","id":"<cluster id>"}
    /controller           (ephemeral) {"version":2,"brokerid":1,"timestamp":"<ms>","kraftControllerEpoch":-1}
    /controller_epoch                 1
    /brokers/ids/<id>     (ephemeral) {"features":{},"listener_security_protocol_map":{...},
                                       "endpoints":["PLAINTEXT://host:port"],"jmx_port":-1,"port":9092,
                                       "host":"host","version":5,"timestamp":"<ms>"[,"rack":..]}
    /brokers/topics/<topic>           {"partitions":{"0":[2,1]},"topic_id":"<base64>",
                                       "adding_replicas":{},"removing_replicas":{},"version":3}
    /brokers/topics/<topic>/partitions/<p>/state
                                      {"controller_epoch":1,"leader":2,"version":1,"leader_epoch":0,"isr":[2,1]
                                       ,"isr_broker_epochs":[4294967312,4294967301]} odradek adds the broker
                                      epoch each ISR member was admitted with (Kafka ignores it; absent: unknown)
    /config/topics/<topic>, /config/brokers/<id|<default>>
                                      {"version":1,"config":{...}}
    /config/users/<user>, /config/clients/<client>, /config/users/<user>/clients/<client>
                                      {"version":1,"config":{"producer_byte_rate":"1024",..}} quotas
                                      (a user's beside its SCRAM credentials); `<default>`, the default
    /config/changes/config_change_<seq>   {"version":2,"entity_path":"topics/<topic>"}
    /admin/delete_topics/<topic>      (Kafka writes no data) odradek: {"version":1,"dropped_by":[1,2]}, the
                                      brokers whose metadata has dropped the topic (Kafka ignores the data)
    /admin/reassign_partitions        {"version":1,"partitions":[{"topic":..,"partition":..,"replicas":[..]}]}
    /latest_producer_id_block         {"version":1,"broker":1,"block_start":"0","block_end":"999"}
"""

from __future__ import annotations

import base64
import json
import time
import urllib.parse
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from odradek.cluster.metadata import BrokerInfo

CLUSTER_ID = "/cluster/id"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
SEQID = "/brokers/seqid"
CONFIG_TOPICS = "/config/topics"
CONFIG_BROKERS = "/config/brokers"
CONFIG_USERS = "/config/users"
CONFIG_CLIENTS = "/config/clients"
DEFAULT_ENTITY = "<default>"  # a default user or client id (quotas), as Kafka names its znode
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = CONFIG_CHANGES + "/config_change_"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
DEFAULT_BROKER = "<default>"

# Created by the first broker, as Kafka does (an empty /admin too).
PERSISTENT_PATHS = (
    "/admin",
    DELETE_TOPICS,
    BROKER_IDS,
    TOPICS,
    SEQID,
    CONFIG_TOPICS,
    CONFIG_BROKERS,
    CONFIG_CHANGES,
    "/config/clients",
    "/config/users",
    "/config/ips",
    ISR_CHANGE_NOTIFICATION,
    "/log_dir_event_notification",
    "/consumers",
)


class LayoutError(ValueError):
    """A znode whose contents are not what Kafka's layout says."""


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{TOPICS}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def broker_config_path(broker: int | str) -> str:
    return f"{CONFIG_BROKERS}/{broker}"


def sanitize(name: str) -> str:
    """Kafka's Sanitizer.sanitize: a user or client id as a znode name (URL-encoded, UTF-8)."""
    return urllib.parse.quote(name, safe="").replace("~", "%7E")


def desanitize(name: str) -> str:
    return urllib.parse.unquote(name)


def user_config_path(user: str | None) -> str:
    """/config/users/<user>: `user` as given (None: the default user), its znode name sanitized."""
    return f"{CONFIG_USERS}/{entity_znode(user)}"


def entity_znode(name: str | None) -> str:
    """A user's or client id's znode name, sanitized (Kafka's Sanitizer: a user named `<default>`
    is `%3Cdefault%3E`); the default entity's (None) is `<default>`."""
    return DEFAULT_ENTITY if name is None else sanitize(name)


def entity_of_znode(znode: str) -> str | None:
    """The name a znode holds; None for the default entity."""
    return None if znode == DEFAULT_ENTITY else desanitize(znode)


def client_config_path(client_id: str | None) -> str:
    """/config/clients/<client id>: its quotas."""
    return f"{CONFIG_CLIENTS}/{entity_znode(client_id)}"


def user_client_config_path(user: str | None, client_id: str | None) -> str:
    """/config/users/<user>/clients/<client id>: the quotas of one user's client id."""
    return f"{user_config_path(user)}/clients/{entity_znode(client_id)}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def _dump(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def _load(data: bytes | None, what: str) -> dict[str, Any]:
    if not data:
        raise LayoutError(f"{what}: empty znode")
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise LayoutError(f"{what}: not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise LayoutError(f"{what}: not a JSON object")
    return doc


def _now_ms() -> str:
    return str(int(time.time() * 1000))


# ------------------------------------------------------------------ topic ids
def topic_id_to_str(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def topic_id_from_str(text: str) -> uuid.UUID:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        return uuid.UUID(bytes=raw)
    except (ValueError, TypeError) as e:
        raise LayoutError(f"bad topic id {text!r}: {e}") from None


# ------------------------------------------------------------------- cluster
def encode_cluster_id(cluster_id: str) -> bytes:
    return _dump({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes | None) -> str:
    doc = _load(data, CLUSTER_ID)
    cid = doc.get("id")
    if not isinstance(cid, str) or not cid:
        raise LayoutError(f"{CLUSTER_ID}: no id")
    return cid


def encode_controller(broker_id: int) -> bytes:
    return _dump({"version": 2, "brokerid": broker_id, "timestamp": _now_ms(), "kraftControllerEpoch": -1})


def decode_controller(data: bytes | None) -> int:
    doc = _load(data, CONTROLLER)
    bid = doc.get("brokerid")
    if not isinstance(bid, int):
        raise LayoutError(f"{CONTROLLER}: no brokerid")
    return bid


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(data: bytes | None) -> int:
    try:
        return int((data or b"").decode().strip())
    except ValueError:
        raise LayoutError(f"{CONTROLLER_EPOCH}: not a number: {data!r}") from None


# ------------------------------------------------------------------- brokers
def encode_broker(info: BrokerInfo, listener: str = "PLAINTEXT", protocols: Mapping[str, str] | None = None) -> bytes:
    """The registration as Kafka 3.9 writes it (version 5). `listener`: the listener of
    `info.host`/`port` (the inter-broker one), the only endpoint when `info.endpoints` is empty;
    every endpoint is listed with its security protocol from `protocols` (the broker's
    listener.security.protocol.map; a listener it does not name is PLAINTEXT). As Kafka's
    BrokerIdZNode, "host" and "port" are those of the first listener whose protocol is PLAINTEXT,
    null and -1 when there is none (readers take the endpoints)."""
    endpoints = list(info.endpoints) or [(listener, info.host, info.port)]
    protocol = {n: (protocols or {}).get(n, "PLAINTEXT") for n, _h, _p in endpoints}
    plain = next(((h, p) for n, h, p in endpoints if protocol[n] == "PLAINTEXT"), (None, -1))
    doc: dict[str, Any] = {
        "features": {},
        "listener_security_protocol_map": protocol,
        "endpoints": [f"{n}://{h}:{p}" for n, h, p in endpoints],
        "jmx_port": -1,
        "port": plain[1],
        "host": plain[0],
        "version": 5,
        "timestamp": _now_ms(),
    }
    if info.rack:
        doc["rack"] = info.rack
    if info.directory_ids:  # odradek's (metadata.BrokerInfo); Kafka's decoder ignores them
        doc["directory_ids"] = list(info.directory_ids)
    if info.may_lack_unflushed:
        doc["may_lack_unflushed"] = True
    return _dump(doc)


def decode_broker(broker_id: int, data: bytes | None, listener: str = "PLAINTEXT") -> BrokerInfo:
    """A registration's endpoint on `listener` (the first endpoint if it has none by that name)."""
    doc = _load(data, broker_path(broker_id))
    parsed = []
    for e in doc.get("endpoints") or []:
        name, _, rest = str(e).partition("://")
        e_host, _, e_port = rest.rpartition(":")
        try:
            parsed.append((name, e_host.strip("[]"), int(e_port)))
        except ValueError:
            raise LayoutError(f"{broker_path(broker_id)}: bad endpoint {e!r}") from None
    chosen = next((x for x in parsed if x[0] == listener), parsed[0] if parsed else None)
    host: str | None
    port: int | str | None  # the registration's "port" may be anything JSON holds: int() checks it
    if chosen is not None:
        host, port = chosen[1], chosen[2]
    else:
        host, port = doc.get("host"), doc.get("port")
    if not host or port is None or port == "":
        raise LayoutError(f"{broker_path(broker_id)}: no endpoint")
    rack = doc.get("rack")
    dirs = doc.get("directory_ids")
    return BrokerInfo(
        broker_id,
        str(host),
        int(port),
        rack if isinstance(rack, str) else None,
        tuple(parsed),
        directory_ids=tuple(str(d) for d in dirs) if isinstance(dirs, list) else (),
        may_lack_unflushed=doc.get("may_lack_unflushed") is True,
    )


# -------------------------------------------------------------------- topics
@dataclass(frozen=True, slots=True)
class TopicAssignment:
    topic_id: uuid.UUID
    partitions: dict[int, tuple[int, ...]]  # partition -> replicas, the first preferred
    adding: dict[int, tuple[int, ...]]
    removing: dict[int, tuple[int, ...]]


def encode_topic(assignment: TopicAssignment) -> bytes:
    def m(d: dict[int, tuple[int, ...]]) -> dict[str, list[int]]:
        return {str(p): list(r) for p, r in sorted(d.items())}

    return _dump(
        {
            "partitions": m(assignment.partitions),
            "topic_id": topic_id_to_str(assignment.topic_id),
            "adding_replicas": m(assignment.adding),
            "removing_replicas": m(assignment.removing),
            "version": 3,
        }
    )


def decode_topic(topic: str, data: bytes | None) -> TopicAssignment:
    doc = _load(data, topic_path(topic))

    def m(key: str) -> dict[int, tuple[int, ...]]:
        raw = doc.get(key) or {}
        try:
            return {int(p): tuple(int(b) for b in r) for p, r in raw.items()}
        except (TypeError, ValueError, AttributeError):
            raise LayoutError(f"{topic_path(topic)}: bad {key}") from None

    tid = doc.get("topic_id")
    if not isinstance(tid, str):
        raise LayoutError(f"{topic_path(topic)}: no topic id (written by a Kafka older than 2.8?)")
    return TopicAssignment(topic_id_from_str(tid), m("partitions"), m("adding_replicas"), m("removing_replicas"))


@dataclass(frozen=True, slots=True)
class PartitionState:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    # odradek's (Kafka's ZooKeeper mode has no such field, and ignores it): the broker epoch
    # (registration czxid) each ISR member was admitted with, in `isr`'s order; -1 for a
    # member whose epoch is unknown; None when the state records none (written by Kafka).
    isr_epochs: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.isr_epochs is not None and len(self.isr_epochs) != len(self.isr):
            raise ValueError(f"isr {self.isr} and its broker epochs {self.isr_epochs} differ in length")

    def admitted_epoch(self, broker: int) -> int:
        """The broker epoch `broker` was admitted to the ISR with; -1 when unknown (or not a member)."""
        if self.isr_epochs is None or broker not in self.isr:
            return -1
        return self.isr_epochs[self.isr.index(broker)]


def encode_partition_state(state: PartitionState) -> bytes:
    doc: dict[str, Any] = {
        "controller_epoch": state.controller_epoch,
        "leader": state.leader,
        "version": 1,
        "leader_epoch": state.leader_epoch,
        "isr": list(state.isr),
    }
    if state.isr_epochs is not None:
        doc["isr_broker_epochs"] = list(state.isr_epochs)
    return _dump(doc)


def decode_partition_state(topic: str, partition: int, data: bytes | None) -> PartitionState:
    doc = _load(data, partition_state_path(topic, partition))
    try:
        isr = tuple(int(b) for b in doc["isr"])
        raw = doc.get("isr_broker_epochs")
        epochs = tuple(int(e) for e in raw) if isinstance(raw, list) and len(raw) == len(isr) else None
        return PartitionState(int(doc["leader"]), int(doc["leader_epoch"]), isr, int(doc["controller_epoch"]), epochs)
    except (KeyError, TypeError, ValueError):
        raise LayoutError(f"{partition_state_path(topic, partition)}: bad partition state") from None


# ------------------------------------------------------------------- configs
def encode_config(config: dict[str, str]) -> bytes:
    return _dump({"version": 1, "config": dict(sorted(config.items()))})


def decode_config(path: str, data: bytes | None) -> dict[str, str]:
    if not data:
        return {}
    doc = _load(data, path)
    config = doc.get("config") or {}
    if not isinstance(config, dict):
        raise LayoutError(f"{path}: bad config")
    return {str(k): str(v) for k, v in config.items()}


def encode_config_change(entity_path: str) -> bytes:
    """entity_path: "topics/<topic>" or "brokers/<id|<default>>"."""
    return _dump({"version": 2, "entity_path": entity_path})


# ---------------------------------------------------------- topic deletions
def encode_deletion(dropped_by: frozenset[int]) -> bytes:
    """A deletion request's data: the brokers that have dropped the topic from their metadata
    (and stopped its replicas), so the controller knows when every broker has."""
    return _dump({"version": 1, "dropped_by": sorted(dropped_by)})


def decode_deletion(topic: str, data: bytes | None) -> frozenset[int]:
    """The brokers that have dropped `topic`; none for Kafka's own empty request."""
    if not data:
        return frozenset()
    doc = _load(data, delete_topic_path(topic))
    try:
        return frozenset(int(b) for b in doc.get("dropped_by") or ())
    except (TypeError, ValueError):
        raise LayoutError(f"{delete_topic_path(topic)}: bad dropped_by") from None


# ------------------------------------------------------------ producer ids
def encode_producer_id_block(broker_id: int, start: int, end: int) -> bytes:
    return _dump({"version": 1, "broker": broker_id, "block_start": str(start), "block_end": str(end)})


def decode_producer_id_block(data: bytes | None) -> tuple[int, int] | None:
    """(block start, block end inclusive) of the newest block handed out, None before the first."""
    if not data:
        return None
    doc = _load(data, PRODUCER_ID_BLOCK)
    try:
        return int(doc["block_start"]), int(doc["block_end"])
    except (KeyError, TypeError, ValueError):
        raise LayoutError(f"{PRODUCER_ID_BLOCK}: bad block") from None


# ------------------------------------------------------------ reassignments
def decode_reassignment(data: bytes | None) -> dict[tuple[str, int], tuple[int, ...]]:
    if not data:
        return {}
    doc = _load(data, REASSIGN_PARTITIONS)
    out = {}
    try:
        for e in doc.get("partitions") or []:
            out[(str(e["topic"]), int(e["partition"]))] = tuple(int(b) for b in e["replicas"])
    except (KeyError, TypeError, ValueError):
        raise LayoutError(f"{REASSIGN_PARTITIONS}: bad entry") from None
    return out
