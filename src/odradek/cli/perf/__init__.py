"""`odradek perf produce|consume|e2e`: load generators in the manner of Kafka's
kafka-producer-perf-test.sh, kafka-consumer-perf-test.sh and EndToEndLatency, usable against
any Kafka-compatible broker.

* ``engine.py``    the measurements (pacing, latency samples, percentiles, the result dicts), over
                   a :class:`~odradek.cli.perf.engine.Driver`; no click;
* ``drivers/``     one module per client: ``odradek`` (default: odradek's own Python client) and
                   ``confluent`` (confluent-kafka, i.e. librdkafka with its native batching, so that
                   the client is not what is being measured);
* ``commands.py``  the click commands: options, the topic, the printed summary.

Every command prints a summary (or one JSON object with ``--json``): records/s, MB/s
(MB = 10^6 bytes of record payload: key + value), and latency percentiles in ms.

Latency: ``produce`` measures send()->acknowledgement for every ``--sample-every``-th record
(default 16: enough for stable percentiles without a Python callback per record); ``e2e``
stamps each record with the sender's monotonic clock and measures send()->consumed.
"""

from odradek.cli.perf.commands import perf
from odradek.cli.perf.engine import percentiles

__all__ = ["perf", "percentiles"]
