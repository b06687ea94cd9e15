"""Client quota administration (mixed into AIOAdmin; Admin mirrors it): DescribeClientQuotas
and AlterClientQuotas, as Kafka's Admin.describeClientQuotas / alterClientQuotas.

An entity is a dict of entity type ("user", "client-id") to a name, None meaning the default
entity (`<default>`): {"user": "alice"}, {"client-id": None}, {"user": "alice", "client-id":
"app"}. A describe filter is the same dict, with `...` (Ellipsis) for "any name, not the
default"; `strict=True` leaves out entities with other entity types.
"""

from __future__ import annotations

from typing import Any

from .. import errors as E

DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 48, 49
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

Entity = dict[str, "str | None"]


def _key(entity: Entity) -> tuple[tuple[str, str | None], ...]:
    return tuple(sorted(entity.items()))


class QuotaAdmin:
    """Mixed into AIOAdmin."""

    async def _to_controller(self, api_key: int, data: dict) -> Any: ...  # AIOAdmin's

    async def describe_client_quotas(
        self, filter: dict[str, Any] | None = None, *, strict: bool = False
    ) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
        """{entity as sorted (type, name) pairs: {quota key: value}} for the entities matching."""
        components = []
        for entity_type, match in (filter or {}).items():
            if match is ...:
                components.append({"entity_type": entity_type, "match_type": MATCH_SPECIFIED, "match": None})
            elif match is None:
                components.append({"entity_type": entity_type, "match_type": MATCH_DEFAULT, "match": None})
            else:
                components.append({"entity_type": entity_type, "match_type": MATCH_EXACT, "match": match})
        resp = await self._to_controller(DESCRIBE_CLIENT_QUOTAS, {"components": components, "strict": strict})
        code = int(resp.error_code)
        if code:
            raise E.error_class(code)(resp.error_message or "DescribeClientQuotas")
        return {
            _key({e.entity_type: e.entity_name for e in entry.entity}): {v.key: v.value for v in entry.values}
            for entry in resp.entries or ()
        }

    async def alter_client_quotas(
        self, alterations: list[tuple[Entity, dict[str, float | None]]], *, validate_only: bool = False
    ) -> None:
        """Set (a number) or remove (None) quota keys of each entity; raises the first entity's
        error (each entity is applied or refused on its own, as Kafka does)."""
        entries = [
            {
                "entity": [{"entity_type": t, "entity_name": n} for t, n in entity.items()],
                "ops": [
                    {"key": k, "value": 0.0 if v is None else float(v), "remove": v is None} for k, v in ops.items()
                ],
            }
            for entity, ops in alterations
        ]
        resp = await self._to_controller(ALTER_CLIENT_QUOTAS, {"entries": entries, "validate_only": validate_only})
        for r in resp.entries:
            code = int(r.error_code)
            if code:
                entity = {e.entity_type: e.entity_name for e in r.entity}
                raise E.error_class(code)(r.error_message or f"alter client quotas {entity}")
