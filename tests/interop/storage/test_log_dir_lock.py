"""A second broker process on the log directories of a running one exits at start, saying which
directory is in use, and the first keeps serving (Kafka's ``.lock``, LogManager.lockLogDirs).
Before, both ran on the same segments and checkpoints and corrupted each other silently. The
lock goes with the process: after a kill -9 of the first, a new broker starts on the
directories (no stale lock to remove by hand)."""

from __future__ import annotations

import pytest
from support.proto import batch, create_topic, fetch, produce_ok
from support.raw import RawConnection

from odradek.protocol.records import decode_any

pytestmark = pytest.mark.interop


def _records(c: RawConnection, topic: str) -> list[bytes | None]:
    part = fetch(c, [(topic, 0, 0, 1 << 20)]).responses[0].partitions[0]
    assert part.error_code == 0, part.error_code
    return [r.value for r in decode_any(part.records or b"")]


def test_a_second_broker_process_on_the_same_log_dirs_exits_and_the_first_keeps_serving(broker_factory, tmp_path):
    a, b = str(tmp_path / "dir-a"), str(tmp_path / "dir-b")
    first = broker_factory(overrides={"log.dirs": f"{a},{b}"}, name="first")
    with RawConnection(first.bootstrap) as c:
        create_topic(c, "t")
        produce_ok(c, "t", [batch((None, b"one"))])

    second = broker_factory(overrides={"log.dirs": f"{tmp_path / 'dir-c'},{b}"}, name="second", start=False)
    second.spawn()
    assert second.proc.wait(timeout=60) == 2
    log = second.log_tail(200)
    assert f"Failed to acquire lock on file .lock in {b}: another broker" in log
    assert "Traceback" not in log
    assert "started" not in log.split("----- start")[-1]  # it never listened

    assert first.running
    with RawConnection(first.bootstrap) as c:
        produce_ok(c, "t", [batch((None, b"two"))])
        assert _records(c, "t") == [b"one", b"two"]

    first.kill()  # kill -9: the kernel releases the locks with the process
    third = broker_factory(overrides={"log.dirs": f"{a},{b}"}, name="third")
    with RawConnection(third.bootstrap) as c:
        assert _records(c, "t") == [b"one", b"two"]
