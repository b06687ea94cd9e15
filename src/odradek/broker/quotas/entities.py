"""Quota entities, keys and values as Kafka keeps them, and which quota applies to a client.

An entity is a user, a client id, or a user with a client id; either name may be the default
(None here, `<default>` in ZooKeeper's paths). Kafka's four keys, their types (a LONG is
stored as an integer, a DOUBLE as given) and Kafka 3.9's precedence (ClientQuotaManager's
DefaultQuotaCallback), most specific first:

    1. /config/users/<user>/clients/<client-id>    5. /config/users/<default>/clients/<default>
    2. /config/users/<user>/clients/<default>      6. /config/users/<default>
    3. /config/users/<user>                        7. /config/clients/<client-id>
    4. /config/users/<default>/clients/<client-id> 8. /config/clients/<default>

The user is the connection's principal name (`ANONYMOUS` on an unauthenticated listener, to
which user quotas and the default user's apply, as in Kafka). Clients sharing the metric tags
the match gives share one quota: (user, client-id) for 1, 2, 4, 5; (user, "") for 3 and 6;
("", client-id) for 7 and 8.

Where they are kept: the metadata snapshot's `user_configs` (the same map as the SCRAM
credentials, /config/users/<user>: the two coexist in one node's config), `client_configs`
(/config/clients/<client>) and `user_client_configs` (/config/users/<user>/clients/<client>),
with None naming a default entity (`<default>` in ZooKeeper, where a user or client id of that
name is sanitized, `%3Cdefault%3E`, as Kafka keeps the two apart).
"""

from __future__ import annotations

import decimal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
# key -> Kafka's ConfigDef type (QuotaConfig.buildUserClientQuotaConfigDef)
QUOTA_KEYS: dict[str, str] = {
    PRODUCER_BYTE_RATE: "LONG",
    CONSUMER_BYTE_RATE: "LONG",
    REQUEST_PERCENTAGE: "DOUBLE",
    CONTROLLER_MUTATION_RATE: "DOUBLE",
}
USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
LONG_MAX = 2**63 - 1


class QuotaRequestError(Exception):
    """A request Kafka refuses: `error` its code (INVALID_REQUEST unless said), the message Kafka's."""

    def __init__(self, message: str, error: int = 42) -> None:
        super().__init__(message)
        self.error = error


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """`user`/`client_id`: absent (False), the default (None) or a name. A plain str-or-None
    pair cannot tell "no user part" from "the default user", so absence is False."""

    user: str | None | bool = False
    client_id: str | None | bool = False

    @property
    def has_user(self) -> bool:
        return self.user is not False

    @property
    def has_client(self) -> bool:
        return self.client_id is not False

    def components(self) -> list[tuple[str, str | None]]:
        """(entity type, name or None for the default), as the wire's EntityData lists them."""
        out: list[tuple[str, str | None]] = []
        if self.has_user:
            out.append((USER, self.user))  # type: ignore[arg-type]
        if self.has_client:
            out.append((CLIENT_ID, self.client_id))  # type: ignore[arg-type]
        return out

    def __str__(self) -> str:
        return ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in self.components())


def quota_values(config: Mapping[str, str]) -> dict[str, float]:
    """The quota keys of one stored config (a user's also holds SCRAM credentials), as numbers."""
    out: dict[str, float] = {}
    for key in QUOTA_KEYS:
        text = config.get(key)
        if text is not None:
            try:
                out[key] = float(text)
            except ValueError:
                continue  # written by hand: Kafka would not have accepted it; ignored
    return out


def all_quotas(
    user_configs: Mapping[str | None, Mapping[str, str]],
    client_configs: Mapping[str | None, Mapping[str, str]],
    user_client_configs: Mapping[tuple[str | None, str | None], Mapping[str, str]],
) -> dict[QuotaEntity, dict[str, float]]:
    """Every entity with at least one quota, and its quotas."""
    out: dict[QuotaEntity, dict[str, float]] = {}
    for u, config in user_configs.items():
        if values := quota_values(config):
            out[QuotaEntity(user=u)] = values
    for c, config in client_configs.items():
        if values := quota_values(config):
            out[QuotaEntity(client_id=c)] = values
    for (u, c), config in user_client_configs.items():
        if values := quota_values(config):
            out[QuotaEntity(user=u, client_id=c)] = values
    return out


# ------------------------------------------------------------------ precedence
class QuotaTable:
    """The quotas of one key (e.g. producer_byte_rate) by entity, and Kafka's lookups."""

    def __init__(self, quotas: Mapping[QuotaEntity, float]) -> None:
        self.quotas = dict(quotas)

    def metric_tags(self, user: str, client_id: str) -> tuple[str, str]:
        """DefaultQuotaCallback.quotaMetricTags: the (user, client-id) tags whose sensors this
        client shares, from the most specific entity that has a quota."""
        q = self.quotas
        if QuotaEntity(user, client_id) in q or QuotaEntity(user, None) in q:
            return (user, client_id)
        if QuotaEntity(user=user) in q:
            return (user, "")
        if QuotaEntity(None, client_id) in q or QuotaEntity(None, None) in q:
            return (user, client_id)
        if QuotaEntity(user=None) in q:
            return (user, "")
        return ("", client_id)

    def limit(self, tags: tuple[str, str]) -> float | None:
        """DefaultQuotaCallback.quotaLimit: the bound for these metric tags, or None (unlimited)."""
        user, client_id = tags
        q = self.quotas
        if user and client_id:
            order = [QuotaEntity(user, client_id), QuotaEntity(user, None), QuotaEntity(None, client_id)]
            order.append(QuotaEntity(None, None))
        elif user:
            order = [QuotaEntity(user=user), QuotaEntity(user=None)]
        elif client_id:
            order = [QuotaEntity(client_id=client_id), QuotaEntity(client_id=None)]
        else:
            return None
        for entity in order:
            if entity in q:
                return q[entity]
        return None


def tables(quotas: Mapping[QuotaEntity, Mapping[str, float]]) -> dict[str, QuotaTable]:
    """One QuotaTable per quota key."""
    per_key: dict[str, dict[QuotaEntity, float]] = {k: {} for k in QUOTA_KEYS}
    for entity, values in quotas.items():
        for key, value in values.items():
            per_key[key][entity] = value
    return {k: QuotaTable(v) for k, v in per_key.items()}


# ------------------------------------------------------ DescribeClientQuotas
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
_ANY = object()  # a "specified" component: any name, not the default


@dataclass(frozen=True, slots=True)
class FilterComponent:
    entity_type: str
    match_type: int
    match: str | None


def describe(
    quotas: Mapping[QuotaEntity, Mapping[str, float]], components: Iterable[FilterComponent], strict: bool
) -> list[tuple[QuotaEntity, dict[str, float]]]:
    """The entities matching the filter, with their quotas (ZkAdminManager.describeClientQuotas:
    its checks and messages). Raises QuotaRequestError."""
    wanted: dict[str, object] = {}
    for c in components:
        if c.entity_type in (USER, CLIENT_ID, IP):
            if c.entity_type in wanted:
                what = {USER: "user", CLIENT_ID: "client", IP: "ip"}[c.entity_type]
                raise QuotaRequestError(f"Duplicate {what} filter component entity type")
        elif c.entity_type == "":
            raise QuotaRequestError("Unexpected empty filter component entity type")
        else:
            raise QuotaRequestError(f"Custom entity type '{c.entity_type}' not supported", error=35)
        if c.match_type == MATCH_EXACT:
            if c.match is None:  # Kafka's ClientQuotaFilterComponent.ofEntity fails on it: UNKNOWN_SERVER_ERROR
                raise QuotaRequestError("exact match without a name", error=-1)
            wanted[c.entity_type] = c.match
        elif c.match_type == MATCH_DEFAULT:
            wanted[c.entity_type] = None
        elif c.match_type == MATCH_SPECIFIED:
            wanted[c.entity_type] = _ANY
        else:
            raise QuotaRequestError(f"Unexpected match type: {c.match_type}", error=-1)
    if IP in wanted and (USER in wanted or CLIENT_ID in wanted):
        raise QuotaRequestError(
            "Invalid entity filter component combination, IP filter component should not be used with "
            "user or clientId filter component."
        )
    if IP in wanted:
        return []  # odradek keeps no IP quotas (AlterClientQuotas refuses them)

    def matches(entity_type: str, present: bool, name: str | None) -> bool:
        if entity_type not in wanted:
            return not present or not strict
        want = wanted[entity_type]
        if want is _ANY:
            return present
        return present and name == want

    out = []
    for entity, values in quotas.items():
        if matches(USER, entity.has_user, entity.user if entity.has_user else None) and matches(  # type: ignore[arg-type]
            CLIENT_ID,
            entity.has_client,
            entity.client_id if entity.has_client else None,  # type: ignore[arg-type]
        ):
            out.append((entity, dict(values)))
    return out


# --------------------------------------------------------- AlterClientQuotas
def parse_entity(components: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    """An AlterClientQuotas entry's entity (ZkAdminManager.parseAndSanitizeQuotaEntity)."""
    parts = list(components)
    if not parts:
        raise QuotaRequestError("Invalid empty client quota entity")
    user: str | None | bool = False
    client: str | None | bool = False
    ip = False
    for entity_type, name in parts:
        if entity_type == USER:
            user = name
        elif entity_type == CLIENT_ID:
            client = name
        elif entity_type == IP:
            ip = True
        else:
            raise QuotaRequestError(f"Unhandled client quota entity type: {entity_type}")
        if name is not None and name == "":
            raise QuotaRequestError(f"Empty {entity_type} not supported")
    if ip:
        if user is not False or client is not False:
            raise QuotaRequestError(
                "Invalid quota entity combination, IP entity should not be used with user/client ID entity."
            )
        raise QuotaRequestError("IP quotas (connection_creation_rate) are not supported by odradek")
    return QuotaEntity(user, client)


def apply_ops(config: Mapping[str, str], ops: Iterable[tuple[str, float, bool]]) -> dict[str, str]:
    """The entity's config after the ops (key, value, remove), Kafka's checks: an unknown key or
    a LONG key given a fraction is INVALID_REQUEST. Other keys (SCRAM credentials) are kept."""
    out = dict(config)
    for key, value, remove in ops:
        if remove:
            out.pop(key, None)
            continue
        kind = QUOTA_KEYS.get(key)
        if kind is None:
            raise QuotaRequestError(f"Invalid configuration key {key}")
        if kind == "DOUBLE":
            out[key] = java_double_string(value)
        else:
            epsilon = 1e-6
            as_long = int(value + epsilon) if value + epsilon < LONG_MAX else LONG_MAX
            if abs(float(as_long) - value) > epsilon:
                raise QuotaRequestError(f"Configuration {key} must be a {kind} value")
            out[key] = str(as_long)
    return out


def java_double_string(value: float) -> str:
    """Java's Double.toString (how Kafka stores a DOUBLE quota): 200.0, 12.5, 1.0E7, 1.0E-4."""
    if value == 0:
        return "0.0"
    if 1e-3 <= abs(value) < 1e7:
        text = repr(float(value))
        return text if "." in text else text + ".0"
    sign, digits, exp = decimal.Decimal(repr(float(value))).as_tuple()
    numbers = "".join(map(str, digits)).rstrip("0") or "0"
    exponent = len(digits) + int(exp) - 1
    return f"{'-' if sign else ''}{numbers[0]}.{numbers[1:] or '0'}E{exponent}"
