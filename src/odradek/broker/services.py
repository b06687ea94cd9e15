"""The broker's services, typed, as handlers see them (instead of one `Broker` object).

`Broker.start()` (server.py) constructs and wires them once; every request's
`RequestContext` carries the same `BrokerServices`. This is the handlers' view only:
components never take it whole (import-linter lets only the server, the registry, the
connection driver and the handlers import this module); each is given the two or three
parts it uses (who gets what: docs/architecture.md). Later capabilities add a field here
(an authorizer) rather than attributes on a shared object.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from odradek.broker.config import BrokerConfig
    from odradek.broker.config_admin import ConfigAdmin
    from odradek.broker.fetch_session import FetchSessionCache
    from odradek.broker.interbroker.forwarding import ForwardingManager
    from odradek.broker.metrics import BrokerMetrics
    from odradek.broker.producer_ids import ProducerIdAllocator
    from odradek.broker.quotas.manager import ClientQuotas
    from odradek.broker.replica_manager import ReplicaManager
    from odradek.broker.security.acl_store import AclManager
    from odradek.broker.security.sasl import SaslServer
    from odradek.broker.topic_admin import TopicAdmin
    from odradek.broker.txn_verification import TxnVerification
    from odradek.cluster.controller import Controller
    from odradek.cluster.metadata import ClusterSnapshot
    from odradek.cluster.store import MetadataStore
    from odradek.coordinator.group import GroupCoordinator
    from odradek.coordinator.txn import TransactionCoordinator


@dataclass(frozen=True, slots=True)
class BrokerServices:
    config: BrokerConfig
    node_id: int
    cluster_id: str
    metadata: MetadataStore
    topics: TopicAdmin
    config_admin: ConfigAdmin
    replica_manager: ReplicaManager
    group_coordinator: GroupCoordinator
    fetch_sessions: FetchSessionCache
    producer_ids: ProducerIdAllocator
    txn_coordinator: TransactionCoordinator
    txn_verification: TxnVerification  # KIP-890: the produce path asks the transaction coordinator
    metrics: BrokerMetrics | None = None
    controller: Controller | None = None  # cluster mode: this broker's controller (active or not)
    forwarding: ForwardingManager | None = None  # cluster mode: requests passed on to the controller
    acls: AclManager | None = None  # authorizer.class.name set: the ACLs and the authorizer deciding on them
    sasl: SaslServer | None = None  # the SASL listeners' authentication (none without a SASL listener)
    quotas: ClientQuotas | None = None  # client quotas (broker/quotas/), bounds from the snapshot

    def client_quotas(self) -> ClientQuotas | None:
        """The client quota managers, their bounds refreshed from the newest snapshot."""
        q = self.quotas
        if q is not None:
            s = self.metadata.snapshot
            q.update(s.user_configs, s.client_configs, s.user_client_configs)
        return q

    @property
    def snapshot(self) -> ClusterSnapshot:
        """The newest metadata snapshot (a handler reads one snapshot per request)."""
        return self.metadata.snapshot
