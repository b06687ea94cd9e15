"""AIOAdmin: topics, configs, groups, records, transactions (admin_txn.py), ACLs and SCRAM
users (admin_security.py) and cluster administration (asyncio).

Every method raises the `odradek.client.errors` class of the first error the broker
reports (e.g. `TopicAlreadyExistsError`), after retrying retriable ones until
``default.api.timeout.ms``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from .. import _wire
from .. import errors as E
from ..cluster import Cluster, TopicInfo, parse_metadata
from ..config import ADMIN, make_config
from ..consumer.subscription import OffsetAndMetadata, TopicPartition
from .admin_quotas import QuotaAdmin
from .admin_security import SecurityAdmin
from .admin_txn import TransactionAdmin

CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS = 19, 20, 21
DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS, CREATE_PARTITIONS = 32, 44, 37
LIST_GROUPS, DESCRIBE_GROUPS, DELETE_GROUPS, OFFSET_FETCH, OFFSET_COMMIT = 16, 15, 42, 9, 8
DESCRIBE_CLUSTER, LIST_OFFSETS = 60, 2

RESOURCE_TYPES = {"topic": 2, "broker": 4, "broker_logger": 8, "group": 32}
OPS = {"set": 0, "delete": 1, "append": 2, "subtract": 3}


@dataclass
class NewTopic:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str] = field(default_factory=dict)
    replica_assignment: dict[int, list[int]] | None = None


@dataclass
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[dict]


class AIOAdmin(TransactionAdmin, SecurityAdmin, QuotaAdmin):
    def __init__(self, config: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self.config = make_config(ADMIN, config, kwargs)
        self.config["allow.auto.create.topics"] = False
        self.cluster = Cluster(self.config)
        self.timeout_ms = int(self.config["request.timeout.ms"])

    async def start(self) -> AIOAdmin:
        await self.cluster.start()
        return self

    async def close(self) -> None:
        await self.cluster.close()

    async def __aenter__(self) -> AIOAdmin:
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # ------------------------------------------------------------------ helpers
    async def _controller(self) -> int:
        md = self.cluster.metadata
        if md.controller_id >= 0 and md.controller_id in md.brokers:
            return md.controller_id
        return next(iter(md.brokers))

    async def _to_controller(self, api_key: int, data: dict):
        async def attempt():
            return await self.cluster.send(await self._controller(), api_key, data)

        return await self.cluster.retrying(attempt, what=f"admin api {api_key}")

    @staticmethod
    def _check(code, message=None, what=""):
        code = int(code)
        if code:
            raise E.error_class(code)(message or what)

    # ------------------------------------------------------------------ topics
    async def create_topics(self, topics: list, *, validate_only: bool = False, timeout_ms: int | None = None) -> None:
        items = []
        for t in topics:
            if isinstance(t, str):
                t = NewTopic(t)
            elif isinstance(t, tuple):
                t = NewTopic(*t)
            items.append(
                {
                    "name": t.name,
                    "num_partitions": t.num_partitions,
                    "replication_factor": t.replication_factor,
                    "assignments": [
                        {"partition_index": p, "broker_ids": b} for p, b in (t.replica_assignment or {}).items()
                    ],
                    "configs": [{"name": k, "value": str(v)} for k, v in t.configs.items()],
                }
            )
        resp = await self._to_controller(
            CREATE_TOPICS, {"topics": items, "timeout": timeout_ms or self.timeout_ms, "validate_only": validate_only}
        )
        for r in resp.topics:
            self._check(r.error_code, getattr(r, "error_message", None), f"create topic {r.name}")
        if not validate_only:
            names = [t["name"] for t in items]
            await self._wait_topics(names, present=True)

    async def create_topic(
        self, name: str, num_partitions: int = -1, replication_factor: int = -1, configs: dict | None = None
    ) -> None:
        await self.create_topics([NewTopic(name, num_partitions, replication_factor, configs or {})])

    async def _wait_topics(self, names, present: bool, timeout: float = 10) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            resp = await self.cluster.metadata_request(list(names), False)
            md = parse_metadata(resp)
            ok = all(
                (
                    (n in md.topics and not md.topics[n].error and md.topics[n].partitions)
                    if present
                    else (n not in md.topics or md.topics[n].error == 3)
                )
                for n in names
            )
            if ok:
                return
            await asyncio.sleep(0.05)

    async def delete_topics(self, names: list[str], *, timeout_ms: int | None = None) -> None:
        resp = await self._to_controller(
            DELETE_TOPICS,
            {
                "topic_names": list(names),
                "topics": [{"name": n, "topic_id": None} for n in names],
                "timeout": timeout_ms or self.timeout_ms,
            },
        )
        for r in resp.responses:
            self._check(r.error_code, getattr(r, "error_message", None), f"delete topic {r.name}")
        await self._wait_topics(names, present=False)

    async def list_topics(self, internal: bool = False) -> set[str]:
        md = parse_metadata(await self.cluster.metadata_request(None, False))
        return {n for n, t in md.topics.items() if internal or not t.is_internal}

    async def describe_topics(self, names: list[str] | None = None) -> dict[str, TopicInfo]:
        md = parse_metadata(await self.cluster.metadata_request(None if names is None else list(names), False))
        for n, t in md.topics.items():
            if names is not None and t.error:
                self._check(t.error, f"describe topic {n}")
        return md.topics

    async def create_partitions(self, new_counts: dict[str, int], *, validate_only: bool = False) -> None:
        resp = await self._to_controller(
            CREATE_PARTITIONS,
            {
                "topics": [{"name": t, "count": n, "assignments": None} for t, n in new_counts.items()],
                "timeout": self.timeout_ms,
                "validate_only": validate_only,
            },
        )
        for r in resp.results:
            self._check(r.error_code, getattr(r, "error_message", None), f"create partitions {r.name}")

    # ------------------------------------------------------------------ configs
    @staticmethod
    def _resource(res) -> tuple[int, str]:
        rtype, name = res
        return (RESOURCE_TYPES[rtype] if isinstance(rtype, str) else int(rtype)), str(name)

    async def _resource_node(self, rtype: int, name: str) -> int:
        if rtype == 4 and name.lstrip("-").isdigit() and int(name) in self.cluster.metadata.brokers:
            return int(name)
        return await self._controller()

    async def describe_configs(self, resources: list, keys: list[str] | None = None) -> dict:
        """{(type, name): {config name: value}} for resources like ("topic", "t") or ("broker", "1")."""
        out = {}
        for res in resources:
            rtype, name = self._resource(res)
            node = await self._resource_node(rtype, name)

            async def attempt(node=node, rtype=rtype, name=name):
                return await self.cluster.send(
                    node,
                    DESCRIBE_CONFIGS,
                    {
                        "resources": [{"resource_type": rtype, "resource_name": name, "configuration_keys": keys}],
                        "include_synonyms": False,
                        "include_documentation": False,
                    },
                )

            resp = await self.cluster.retrying(attempt, what="DescribeConfigs")
            for r in resp.results:
                self._check(r.error_code, getattr(r, "error_message", None), f"describe configs {name}")
                out[tuple(res)] = {c.name: c.value for c in r.configs}
        return out

    async def incremental_alter_configs(self, changes: dict, *, validate_only: bool = False) -> None:
        """`changes`: {(type, name): {key: value | None}} (None deletes) or [(key, op, value)]."""
        for res, ops in changes.items():
            rtype, name = self._resource(res)
            if isinstance(ops, dict):
                ops = [(k, "delete" if v is None else "set", v) for k, v in ops.items()]
            configs = [
                {
                    "name": k,
                    "config_operation": OPS[op] if isinstance(op, str) else int(op),
                    "value": None if v is None else str(v),
                }
                for k, op, v in ops
            ]
            node = await self._resource_node(rtype, name)
            resp = await self.cluster.send(
                node,
                INCREMENTAL_ALTER_CONFIGS,
                {
                    "resources": [{"resource_type": rtype, "resource_name": name, "configs": configs}],
                    "validate_only": validate_only,
                },
            )
            for r in resp.responses:
                self._check(r.error_code, getattr(r, "error_message", None), f"alter configs {name}")

    # ------------------------------------------------------------------ groups
    async def list_groups(self) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) for every group on every broker."""
        out = []
        for node in list(self.cluster.metadata.brokers):
            resp = await self.cluster.send(node, LIST_GROUPS, {"states_filter": []})
            self._check(resp.error_code, None, "ListGroups")
            out.extend((g.group_id, g.protocol_type, getattr(g, "group_state", "")) for g in resp.groups)
        return out

    async def describe_groups(self, group_ids: list[str]) -> dict[str, GroupDescription]:
        out = {}
        for gid in group_ids:
            node = await self.cluster.find_coordinator(gid)
            resp = await self.cluster.send(
                node, DESCRIBE_GROUPS, {"groups": [gid], "include_authorized_operations": False}
            )
            for g in resp.groups:
                self._check(g.error_code, None, f"describe group {gid}")
                members = []
                for m in g.members:
                    assigned = []
                    if m.member_assignment and g.protocol_type == "consumer":
                        try:
                            a = _wire.decode_consumer_protocol("assignment", m.member_assignment)
                            assigned = [
                                TopicPartition(tp.topic, int(p)) for tp in a.assigned_partitions for p in tp.partitions
                            ]
                        except Exception:
                            assigned = []
                    members.append(
                        {
                            "member_id": m.member_id,
                            "client_id": m.client_id,
                            "client_host": m.client_host,
                            "group_instance_id": getattr(m, "group_instance_id", None),
                            "assignment": assigned,
                        }
                    )
                out[gid] = GroupDescription(g.group_id, g.group_state, g.protocol_type, g.protocol_data, members)
        return out

    async def delete_groups(self, group_ids: list[str]) -> None:
        for gid in group_ids:
            node = await self.cluster.find_coordinator(gid)
            resp = await self.cluster.send(node, DELETE_GROUPS, {"groups_names": [gid]})
            for r in resp.results:
                self._check(r.error_code, None, f"delete group {r.group_id}")

    async def list_group_offsets(self, group_id: str, partitions=None) -> dict:
        node = await self.cluster.find_coordinator(group_id)
        if partitions is None:
            # ask for every partition of every topic rather than "all" (null topics): some
            # brokers (Tansu 0.6) answer the null form with a malformed response
            md = parse_metadata(await self.cluster.metadata_request(None, False))
            partitions = [(t, p) for t, ti in md.topics.items() if not ti.is_internal for p in ti.partitions]
        topics = None
        if partitions is not None:
            by: dict[str, list[int]] = {}
            for tp in partitions:
                by.setdefault(tp[0], []).append(tp[1])
            topics = [{"name": t, "partition_indexes": ps} for t, ps in by.items()]
        resp = await self.cluster.send(
            node, OFFSET_FETCH, {"group_id": group_id, "topics": topics, "require_stable": False}
        )
        self._check(getattr(resp, "error_code", 0), None, f"list offsets of group {group_id}")
        out = {}
        for t in resp.topics or ():
            for p in t.partitions:
                self._check(p.error_code, None, f"group offsets {t.name}-{p.partition_index}")
                if int(p.committed_offset) >= 0:
                    out[TopicPartition(t.name, int(p.partition_index))] = OffsetAndMetadata(
                        int(p.committed_offset), p.metadata or ""
                    )
        return out

    async def alter_group_offsets(self, group_id: str, offsets: dict) -> None:
        """Reset a (preferably empty) group's committed offsets with a generation-less OffsetCommit."""
        node = await self.cluster.find_coordinator(group_id)
        by: dict[str, list] = {}
        for tp, off in offsets.items():
            off = off.offset if isinstance(off, OffsetAndMetadata) else int(off)
            by.setdefault(tp[0], []).append(
                {
                    "partition_index": tp[1],
                    "committed_offset": off,
                    "committed_leader_epoch": -1,
                    "committed_metadata": "",
                }
            )
        resp = await self.cluster.send(
            node,
            OFFSET_COMMIT,
            {
                "group_id": group_id,
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "group_instance_id": None,
                "retention_time": -1,
                "topics": [{"name": t, "partitions": ps} for t, ps in by.items()],
            },
        )
        for t in resp.topics:
            for p in t.partitions:
                self._check(p.error_code, None, f"reset offset {t.name}-{p.partition_index}")

    # ------------------------------------------------------------------ records, cluster
    async def delete_records(self, before: dict) -> dict:
        """Delete records before the given offsets: {tp: offset} -> {tp: new low watermark}."""
        by_node: dict[int, dict] = {}
        self.cluster.add_topics({tp[0] for tp in before})
        await self.cluster.refresh()
        for tp, off in before.items():
            leader = self.cluster.leader_for(tp[0], tp[1])
            if leader < 0:
                raise E.LeaderNotAvailableError(f"no leader for {tp[0]}-{tp[1]}")
            by_node.setdefault(leader, {})[TopicPartition(*tp)] = int(off)
        out = {}
        for node, tps in by_node.items():
            by: dict[str, list] = {}
            for tp, off in tps.items():
                by.setdefault(tp.topic, []).append({"partition_index": tp.partition, "offset": off})
            resp = await self.cluster.send(
                node,
                DELETE_RECORDS,
                {"topics": [{"name": t, "partitions": ps} for t, ps in by.items()], "timeout": self.timeout_ms},
            )
            for t in resp.topics:
                for p in t.partitions:
                    self._check(p.error_code, None, f"delete records {t.name}-{p.partition_index}")
                    out[TopicPartition(t.name, int(p.partition_index))] = int(p.low_watermark)
        return out

    async def describe_cluster(self) -> dict:
        conn = await self.cluster.any_connection()
        if conn.supports(DESCRIBE_CLUSTER):
            resp = await conn.request(
                DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": False, "endpoint_type": 1}
            )
            self._check(resp.error_code, getattr(resp, "error_message", None), "DescribeCluster")
            brokers = [(int(b.broker_id), b.host, int(b.port), b.rack) for b in resp.brokers]
            return {"cluster_id": resp.cluster_id, "controller_id": int(resp.controller_id), "brokers": brokers}
        md = await self.cluster.refresh()
        return {
            "cluster_id": md.cluster_id,
            "controller_id": md.controller_id,
            "brokers": [(b.node_id, b.host, b.port, b.rack) for b in md.brokers.values()],
        }
