"""What the broker knows about one client connection, for the requests arriving on it.

Created by the connection (broker/connection.py) when it is accepted and handed to every
handler in its RequestContext. The listener name and security protocol say where the
connection came in (Metadata answers with that listener's endpoints); the principal is
who it is (PLAINTEXT: `User:ANONYMOUS`; SASL will set it when authentication completes,
and the authorizer will decide on it); the client software is what ApiVersions v3+ said.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ANONYMOUS = "User:ANONYMOUS"


@dataclass(slots=True)
class ConnectionState:
    id: int
    peer: str  # host:port of the client
    listener_name: str = "PLAINTEXT"
    security_protocol: str = "PLAINTEXT"
    principal: str = ANONYMOUS
    client_software_name: str | None = None
    client_software_version: str | None = None
    # False only on a listener that authenticates (SASL) until authentication completes:
    # then only ApiVersions, SaslHandshake and SaslAuthenticate are served.
    authenticated: bool = True
    # SASL listeners: this connection's authentication (broker/security/sasl.py SaslSession)
    sasl: Any = None
    # Set by a handler whose response must be the last on this connection (a failed
    # authentication): the connection sends it, then closes, saying why.
    close_after_response: str | None = None
    # Set by a handler whose client exceeded a quota (broker/quotas/): the connection sends the
    # response at once, then reads nothing from this client for that many ms (KIP-219's muting).
    throttle_ms: int = 0
    # While a request_percentage quota is set, the CPU seconds the request being handled has
    # taken so far (its handler's steps on the event loop, not what ran while it waited: see
    # quotas.manager.charging), else None; `request_step`: the thread's CPU clock when its
    # current step began. The connection charges it to the request quota after the handler,
    # unless the handler charged it itself (Fetch, as Kafka's KafkaApis) or exempted it (a
    # follower's Fetch), leaving None.
    request_cpu: float | None = None
    request_step: float | None = None

    @property
    def client_host(self) -> str:
        """Kafka's client host form: "/" + the peer address (DescribeGroups, ListGroups...)."""
        host = self.peer.rsplit(":", 1)[0] if ":" in self.peer else self.peer
        return "/" + host.strip("[]")
