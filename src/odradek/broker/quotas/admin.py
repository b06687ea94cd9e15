"""DescribeClientQuotas and AlterClientQuotas against the metadata store (Kafka's
ZkAdminManager.describeClientQuotas / alterClientQuotas): each entity's quotas read from and
written to the store's user, client and user/client-id configs (ZooKeeper's /config/users and
/config/clients with a /config/changes notification, or the single node's metadata file), a
user's quotas beside its SCRAM credentials. The handlers (k48, k49) translate the wire.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from odradek.broker.quotas import entities as E
from odradek.cluster.metadata import ClusterSnapshot
from odradek.cluster.store import MetadataStore, MetadataUnavailable

UNKNOWN_SERVER_ERROR = -1


def snapshot_quotas(snapshot: ClusterSnapshot) -> dict[E.QuotaEntity, dict[str, float]]:
    return E.all_quotas(snapshot.user_configs, snapshot.client_configs, snapshot.user_client_configs)


def describe(
    snapshot: ClusterSnapshot, components: Iterable[E.FilterComponent], strict: bool
) -> list[tuple[E.QuotaEntity, dict[str, float]]]:
    """Raises entities.QuotaRequestError as Kafka refuses the filter."""
    return E.describe(snapshot_quotas(snapshot), components, strict)


@dataclass(frozen=True, slots=True)
class Alteration:
    components: tuple[tuple[str, str | None], ...]  # (entity type, name or None) as sent
    ops: tuple[tuple[str, float, bool], ...]  # (key, value, remove)


@dataclass(frozen=True, slots=True)
class AlterResult:
    components: tuple[tuple[str, str | None], ...]
    error: int = 0
    message: str | None = None


def _current(snapshot: ClusterSnapshot, entity: E.QuotaEntity) -> dict[str, str]:
    if entity.has_user and entity.has_client:
        key = (entity.user, entity.client_id)
        return dict(snapshot.user_client_configs.get(key, {}))  # type: ignore[arg-type]
    if entity.has_user:
        return dict(snapshot.user_configs.get(entity.user, {}))  # type: ignore[arg-type]
    return dict(snapshot.client_configs.get(entity.client_id, {}))  # type: ignore[arg-type]


async def _write(store: MetadataStore, entity: E.QuotaEntity, config: dict[str, str]) -> None:
    if entity.has_user and entity.has_client:
        await store.set_user_client_configs(entity.user, entity.client_id, config)  # type: ignore[arg-type]
    elif entity.has_user:
        await store.set_user_configs(entity.user, config)  # type: ignore[arg-type]
    else:
        await store.set_client_configs(entity.client_id, config)  # type: ignore[arg-type]


async def alter(store: MetadataStore, alterations: Sequence[Alteration], validate_only: bool) -> list[AlterResult]:
    """Each entry on its own, as Kafka: an entry refused changes nothing of its entity."""
    results = []
    for a in alterations:
        try:
            entity = E.parse_entity(a.components)
            current = _current(store.snapshot, entity)
            wanted = E.apply_ops(current, a.ops)
            if not validate_only and wanted != current:
                await _write(store, entity, wanted)
            results.append(AlterResult(a.components))
        except E.QuotaRequestError as e:
            results.append(AlterResult(a.components, e.error, str(e)))
        except MetadataUnavailable as e:
            results.append(AlterResult(a.components, UNKNOWN_SERVER_ERROR, str(e)))
    return results
