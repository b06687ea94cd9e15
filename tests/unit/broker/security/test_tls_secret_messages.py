"""A password-type setting's value is never in the message that refuses it."""

from __future__ import annotations

import pytest

from odradek.broker.settings import ConfigError
from odradek.broker.settings.setting import Setting


def test_a_refused_password_value_is_not_shown():
    secret = Setting("x.password", "password", "", "doc", validate=lambda v: "too short")
    with pytest.raises(ConfigError) as e:
        secret.parse("Hunter-2-Secret")
    assert "Hunter-2-Secret" not in str(e.value) and "[hidden]" in str(e.value)
    plain = Setting("x.name", "string", "", "doc", validate=lambda v: "too short")
    with pytest.raises(ConfigError, match="'visible'"):
        plain.parse("visible")
