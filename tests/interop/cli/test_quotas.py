"""`odradek quotas ...` against a real broker: alter (set, delete) and describe users, client ids,
a user's client id and the defaults, printed as kafka-configs prints them; a bad key refused
with the broker's INVALID_REQUEST message."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.interop


def test_alter_and_describe(odr, cli_broker):
    b = ["--bootstrap-server", cli_broker.bootstrap]
    out = odr("quotas", "alter", *b, "--client-id", "app", "--add-config", "producer_byte_rate=1048576",
              bootstrap=False).output  # fmt: skip
    assert "Completed updating quotas of client-id 'app'." in out
    odr("quotas", "alter", *b, "--user-default", "--add-config", "request_percentage=150.5", bootstrap=False)
    odr("quotas", "alter", *b, "--user", "alice", "--client-default",
        "--add-config", "consumer_byte_rate=10,producer_byte_rate=20", bootstrap=False)  # fmt: skip
    out = odr("quotas", "describe", *b, bootstrap=False).output
    assert out.splitlines() == [
        "Quota configs for client-id 'app' are producer_byte_rate=1048576.0",
        "Quota configs for user-principal 'alice', the default client-id are consumer_byte_rate=10.0, "
        "producer_byte_rate=20.0",
        "Quota configs for the default user-principal are request_percentage=150.5",
    ]
    odr("quotas", "alter", *b, "--user", "alice", "--client-default", "--delete-config", "producer_byte_rate",
        bootstrap=False)  # fmt: skip
    out = odr("quotas", "describe", *b, "--user", "alice", "--client-default", bootstrap=False).output
    assert out.strip() == "Quota configs for user-principal 'alice', the default client-id are consumer_byte_rate=10.0"
    bad = odr("quotas", "alter", *b, "--user", "x", "--add-config", "nope=1", bootstrap=False, ok=False)
    assert bad.exit_code == 1 and "Invalid configuration key nope" in bad.output
