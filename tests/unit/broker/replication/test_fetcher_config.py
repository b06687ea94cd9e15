"""The replica fetchers' settings come from the broker's (FetcherConfig.from_broker)."""

from __future__ import annotations

import dataclasses

from odradek.broker.config import BrokerConfig
from odradek.broker.replication.fetcher_state import FetcherConfig


def test_every_field_comes_from_its_setting():
    config = BrokerConfig(
        {
            "replica.fetch.max.bytes": "1111",
            "replica.fetch.response.max.bytes": "2222",
            "replica.fetch.wait.max.ms": "333",
            "replica.fetch.min.bytes": "4",
            "replica.fetch.backoff.ms": "555",
            "num.replica.fetchers": "6",
            "request.timeout.ms": "7777",
        }
    )
    assert dataclasses.asdict(FetcherConfig.from_broker(config)) == {
        "fetch_max_bytes": 1111,
        "response_max_bytes": 2222,
        "wait_max_ms": 333,
        "min_bytes": 4,
        "backoff_ms": 555,
        "fetchers_per_leader": 6,
        "request_timeout_ms": 7777,
    }


def test_defaults_match_the_broker_settings_defaults():
    assert FetcherConfig.from_broker(BrokerConfig()) == FetcherConfig()
