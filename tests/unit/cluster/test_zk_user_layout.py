"""SCRAM users' znodes in Kafka 3.9's layout: the user name sanitized as Kafka's Sanitizer does
(URL-encoded UTF-8, `*` as %2A, space as %20), the config document and its change notification."""

from __future__ import annotations

import json

import pytest

from odradek.cluster import zk_layout as L


@pytest.mark.parametrize(
    ("user", "znode"),
    [
        ("alice", "alice"),
        ("a.b-c_d", "a.b-c_d"),
        ("User:x", "User%3Ax"),
        ("a b*c", "a%20b%2Ac"),
        ("~é/", "%7E%C3%A9%2F"),
    ],
)
def test_sanitized_names(user, znode):
    assert L.user_config_path(user) == f"/config/users/{znode}"
    assert L.desanitize(znode) == user


def test_config_document_and_notification():
    doc = json.loads(L.encode_config({"SCRAM-SHA-256": "salt=AA==,stored_key=AA==,server_key=AA==,iterations=4096"}))
    assert doc["version"] == 1 and doc["config"]["SCRAM-SHA-256"].endswith("iterations=4096")
    assert json.loads(L.encode_config_change("users/alice")) == {"version": 2, "entity_path": "users/alice"}
