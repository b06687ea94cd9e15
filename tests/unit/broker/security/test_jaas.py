"""`sasl.jaas.config` values parsed as Kafka's JaasConfig (StreamTokenizer) parses them."""

from __future__ import annotations

import pytest

from odradek.broker.security.jaas import JaasError, parse_jaas


def test_plain_login_module_with_users():
    e = parse_jaas(
        "org.apache.kafka.common.security.plain.PlainLoginModule required\n"
        '  username="admin" password="admin-secret"\n'
        '  user_admin="admin-secret" user_alice=\'alice "quoted"\';'
    )
    assert e.login_module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert e.control_flag == "required"
    assert e.options == {
        "username": "admin",
        "password": "admin-secret",
        "user_admin": "admin-secret",
        "user_alice": 'alice "quoted"',
    }
    assert "admin-secret" not in repr(e)


def test_comments_escapes_unquoted_words_and_flag_case():
    e = parse_jaas('/* c */ x.y.Module OPTIONAL // line\n a=b-c_d$e k="tab\\there\\101";')
    assert e.control_flag == "optional"
    assert e.options == {"a": "b-c_d$e", "k": "tab\there\x41"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "Login module not specified"),
        ("x.Module", "control flag not specified"),
        ("x.Module maybe;", "Invalid login module control flag 'maybe'"),
        ("x.Module required a=;", "Value not specified for key 'a'"),
        ("x.Module required a=12;", "Value not specified for key 'a'"),  # a number, as StreamTokenizer reads it
        ('x.Module required a="b"', "not terminated by semi-colon"),
        ("x.Module required; y.Module required;", "contains 2 login modules, should be 1"),
    ],
)
def test_refusals_never_show_values(text, message):
    with pytest.raises(JaasError, match=message):
        parse_jaas(text)
