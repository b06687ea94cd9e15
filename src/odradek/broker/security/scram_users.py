"""SCRAM users: credentials read from the metadata snapshot, described and altered as Kafka does.

Credentials live in the metadata store under each user (`ClusterSnapshot.user_configs`):
ZooKeeper's `/config/users/<sanitized user>` in cluster mode, `{"version":1,"config":
{"SCRAM-SHA-256":"salt=...,stored_key=...,server_key=...,iterations=4096"}}` plus a
`/config/changes/config_change_*` notification, so Kafka 3.9's tools and brokers read them;
the single node's metadata file otherwise. `describe` and `alter` follow Kafka's
ZkAdminManager (DescribeUserScramCredentials / AlterUserScramCredentials): its checks, error
codes and messages; the handlers (k50, k51) translate the wire entities.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from odradek.cluster.metadata import ClusterSnapshot
from odradek.cluster.store import MetadataStore
from odradek.protocol.errors import ErrorCode
from odradek.protocol.scram import MAX_ITERATIONS, MIN_ITERATIONS, ScramCredential, ScramError, credential_from_salted

# AlterUserScramCredentials' mechanism byte (org.apache.kafka.clients.admin.ScramMechanism)
MECHANISM_TYPES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
TYPE_OF = {name: t for t, name in MECHANISM_TYPES.items()}
EMPTY_USER = "Username must not be empty"


def scram_credential(snapshot: ClusterSnapshot, mechanism: str, user: str) -> ScramCredential | None:
    """The user's credential for the mechanism, or None (no such user, or a malformed entry)."""
    text = snapshot.user_configs.get(user, {}).get(mechanism)
    if text is None:
        return None
    try:
        return ScramCredential.from_string(text)
    except ScramError:
        return None


@dataclass(frozen=True)
class UserResult:
    user: str
    error: int = ErrorCode.none
    message: str | None = None
    credentials: tuple[tuple[int, int], ...] = ()  # (mechanism type, iterations)


def _infos(config: dict[str, str]) -> tuple[tuple[int, int], ...] | None:
    out = []
    for t, name in MECHANISM_TYPES.items():
        if name in config:
            out.append((t, ScramCredential.from_string(config[name]).iterations))
    return tuple(out) or None


def describe(snapshot: ClusterSnapshot, users: Sequence[str] | None) -> list[UserResult]:
    """Every user with a SCRAM credential (sorted), or the ones asked for, in their order."""
    configs = snapshot.user_configs
    if not users:
        out = []
        for user in sorted(u for u in configs if u is not None):  # None: the default user's quotas
            infos = _infos(configs[user])
            if infos:
                out.append(UserResult(user, credentials=infos))
        return out
    counts = Counter(users)
    results: dict[str, UserResult] = {}
    for user in users:
        if user in results:
            continue
        if not user:
            results[user] = UserResult(user, ErrorCode.resource_not_found, EMPTY_USER)
        elif counts[user] > 1:
            results[user] = UserResult(
                user,
                ErrorCode.duplicate_resource,
                f"Cannot describe SCRAM credentials for the same user twice in a single request: {user}",
            )
        else:
            infos = _infos(configs.get(user, {}))
            results[user] = (
                UserResult(user, credentials=infos)
                if infos
                else UserResult(
                    user,
                    ErrorCode.resource_not_found,
                    f"Attempt to describe a user credential that does not exist: {user}",
                )
            )
    return [results[u] for u in dict.fromkeys(users)]


@dataclass(frozen=True)
class Upsertion:
    name: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


@dataclass(frozen=True)
class Deletion:
    name: str
    mechanism: int


async def alter(
    store: MetadataStore, upsertions: Sequence[Upsertion], deletions: Sequence[Deletion]
) -> list[UserResult]:
    """Apply the valid changes, user by user; one result per user named (Kafka's order: the
    refused users first, then the changed ones)."""
    snapshot = store.snapshot
    results: list[UserResult] = []
    failed: set[str] = set()

    def fail(user: str, error: int, message: str) -> None:
        if user not in failed:
            failed.add(user)
            results.append(UserResult(user, error, message))

    for u in upsertions:
        if not u.name:
            fail(u.name, ErrorCode.unacceptable_credential, EMPTY_USER)
        elif u.mechanism not in MECHANISM_TYPES:
            fail(u.name, ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
        elif u.iterations < MIN_ITERATIONS:
            fail(u.name, ErrorCode.unacceptable_credential, "Too few iterations")
        elif u.iterations > MAX_ITERATIONS:
            fail(u.name, ErrorCode.unacceptable_credential, "Too many iterations")
    for d in deletions:
        if not d.name:
            fail(d.name, ErrorCode.unacceptable_credential, EMPTY_USER)
        elif d.mechanism not in MECHANISM_TYPES:
            fail(d.name, ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
    seen = Counter([(u.name, u.mechanism) for u in upsertions] + [(d.name, d.mechanism) for d in deletions])
    for (name, _m), n in seen.items():
        if n > 1:
            fail(name, ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request")
    for d in deletions:
        if d.name not in failed and MECHANISM_TYPES[d.mechanism] not in snapshot.user_configs.get(d.name, {}):
            fail(d.name, ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist")
    changed: dict[str, dict[str, str]] = {}
    for u in upsertions:
        if u.name not in failed:
            mechanism = MECHANISM_TYPES[u.mechanism]
            config = changed.setdefault(u.name, dict(snapshot.user_configs.get(u.name, {})))
            config[mechanism] = credential_from_salted(mechanism, u.salted_password, u.salt, u.iterations).to_string()
    for d in deletions:
        if d.name not in failed:
            config = changed.setdefault(d.name, dict(snapshot.user_configs.get(d.name, {})))
            config.pop(MECHANISM_TYPES[d.mechanism], None)
    for user, config in changed.items():
        await store.set_user_configs(user, config)
        results.append(UserResult(user))
    return results
