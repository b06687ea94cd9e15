"""The source's and sink's `kafka.security.protocol`, `kafka.sasl.*` and `kafka.ssl.*` options: passed
to every client the data source makes (consumer, producer, the driver's and the sink's admin), and
what the client cannot serve refused at planning time with the option named."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.spark.options import OptionError, parse_sink_options, parse_source_options
from odradek.spark.planner import Planner
from odradek.spark.sink_common import admin_config

CA = Path(__file__).resolve().parents[2] / "support" / "tls_certs" / "ca.pem"
JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="p";'
SECURE = {
    "kafka.bootstrap.servers": "127.0.0.1:1",
    "kafka.security.protocol": "SASL_SSL",
    "kafka.sasl.mechanism": "SCRAM-SHA-512",
    "kafka.sasl.jaas.config": JAAS,
    "kafka.ssl.truststore.type": "PEM",
    "kafka.ssl.truststore.location": str(CA),
    "kafka.ssl.endpoint.identification.algorithm": "",
}
EXPECTED = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.jaas.config": JAAS,
    "ssl.truststore.type": "PEM",
    "ssl.truststore.location": str(CA),
    "ssl.endpoint.identification.algorithm": "",
}


def test_security_options_reach_the_consumer_producer_and_admin_configs():
    src = parse_source_options({**SECURE, "subscribe": "t"}, streaming=False)
    assert EXPECTED.items() <= src.consumer_config.items()
    assert EXPECTED.items() <= Planner(src)._client_cfg().items()
    sink = parse_sink_options({**SECURE, "topic": "t"})
    assert EXPECTED.items() <= sink.producer_config.items()
    assert EXPECTED.items() <= admin_config(sink).items()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"kafka.sasl.mechanism": "GSSAPI"}, "sasl.mechanism=GSSAPI is not supported"),
        ({"kafka.sasl.mechanism": "OAUTHBEARER"}, "sasl.mechanism=OAUTHBEARER is not supported"),
        ({"kafka.sasl.jaas.config": "ScramLoginModule required;"}, "SASL needs sasl.username and sasl.password"),
        ({"kafka.security.protocol": "SASL_TLS"}, "kafka.security.protocol=SASL_TLS"),
        ({"kafka.ssl.truststore.location": "/nonexistent/ca.pem"}, "cannot load the truststore (/nonexistent/ca.pem)"),
        (
            {"kafka.ssl.keymanager.algorithm": "SunX509"},
            "unknown Kafka client option(s) kafka.ssl.keymanager.algorithm",
        ),
        ({"kafka.sasl.kerberos.service.name": "kafka"}, "kafka.sasl.kerberos.service.name"),
    ],
)
def test_what_the_client_cannot_serve_is_refused_at_planning(extra, message):
    for parse in (
        lambda o: parse_source_options({**o, "subscribe": "t"}, streaming=True),
        lambda o: parse_sink_options({**o, "topic": "t"}),
    ):
        with pytest.raises(OptionError) as e:
            parse({**SECURE, **extra})
        assert message in str(e.value)
        assert '"p"' not in str(e.value)  # the password never in the message
