"""The client on its own: import every odradek.client module and run a produce/consume round
trip against a broker, without any package of the `broker` extra.

    python tests/support/client_only.py BOOTSTRAP [--block] [--also MODULE]

In a client-only install (`pip install odradek`, see scripts/check-client-install.sh) those
packages must be absent, and that is checked first. With `--block` (for a venv that has them,
as in tests/interop/clients/test_client_only.py) an import hook refuses them instead; `--also MODULE`
imports MODULE under the hook before anything else, to show the hook bites. Prints
"client-only round trip ok" and exits 0 on success.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import pkgutil
import sys
import time
import uuid

BROKER_ONLY = ("uvloop", "prometheus_client", "rich", "click", "kazoo", "pyspark", "pyarrow")
SERVER_SIDE = ("broker", "storage", "coordinator", "cluster", "cli", "spark", "pipeline")


class RefuseBrokerOnly(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BROKER_ONLY:
            raise ImportError(f"{name} is refused: the client must not need it")
        return None


def main(argv: list[str]) -> None:
    bootstrap = argv[0]
    if "--block" in argv:
        sys.meta_path.insert(0, RefuseBrokerOnly())
    else:
        present = [n for n in BROKER_ONLY if importlib.util.find_spec(n) is not None]
        assert not present, f"not a client-only install: {present} installed"
    if "--also" in argv:
        importlib.import_module(argv[argv.index("--also") + 1])

    import odradek.client

    for info in pkgutil.walk_packages(odradek.client.__path__, "odradek.client."):
        importlib.import_module(info.name)
    server = sorted(n for n in sys.modules if n.startswith("odradek.") and n.split(".")[1] in SERVER_SIDE)
    assert not server, f"the client imported server-side modules: {server}"

    from odradek.client import Admin, Consumer, Producer, TopicPartition

    topic = f"client-only-{uuid.uuid4().hex[:8]}"
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topic(topic, 1, 1)
    with Producer(bootstrap_servers=bootstrap) as p:
        futures = [p.send(topic, b"v%d" % i, key=b"k%d" % i) for i in range(3)]
        p.flush()
        for f in futures:
            f.result(10)
    got: list = []
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100) as c:
        c.assign([TopicPartition(topic, 0)])
        deadline = time.monotonic() + 20
        while len(got) < 3 and time.monotonic() < deadline:
            got.extend(c.poll(0.5))
    assert [(r.key, r.value) for r in got] == [(b"k%d" % i, b"v%d" % i) for i in range(3)], got
    print("client-only round trip ok")


if __name__ == "__main__":
    main(sys.argv[1:])
