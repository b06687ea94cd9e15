"""The single-node metadata store: persisted topics, deltas published in order."""

from __future__ import annotations

import asyncio
import json

import pytest

from odradek.cluster.local import FILE_NAME, LocalMetadataStore
from odradek.cluster.metadata import BrokerInfo, MetadataDelta
from odradek.cluster.store import MetadataError, TopicExistsError, UnknownTopicError
from odradek.storage import OSFileSystem


class Recorder:
    def __init__(self, fail: bool = False) -> None:
        self.deltas: list[MetadataDelta] = []
        self.fail = fail

    async def on_metadata(self, delta: MetadataDelta) -> None:
        self.deltas.append(delta)
        if self.fail:
            raise OSError("disk offline")


def store(tmp_path) -> LocalMetadataStore:
    return LocalMetadataStore(str(tmp_path), 3, "cid", OSFileSystem().write_file_atomic)


def test_changes_are_published_as_deltas_and_persisted(tmp_path):
    async def main():
        s = store(tmp_path)
        rec = Recorder()
        s.add_listener(rec)
        await s.start()
        await s.register_broker(BrokerInfo(3, "h", 9092))
        info = await s.create_topic("a", [(3,), (3,)], {"retention.ms": "5"})
        await s.create_partitions("a", [(3,)])
        await s.set_topic_configs("a", {})
        await s.delete_topic("a")
        kinds = [
            (
                [t.name for t in d.created_topics()],
                [t.name for t in d.deleted_topics()],
                [(t.name, p.partition) for t, p in d.changed_partitions()],
                [t.name for t in d.changed_configs()],
                d.brokers_changed,
            )
            for d in rec.deltas
        ]
        assert kinds == [
            ([], [], [], [], False),  # start: nothing stored yet
            ([], [], [], [], True),
            (["a"], [], [("a", 0), ("a", 1)], [], False),
            ([], [], [("a", 2)], [], False),
            ([], [], [], ["a"], False),
            ([], ["a"], [], [], False),
        ]
        assert all(p.leader == 3 and p.isr == (3,) for p in rec.deltas[3].after.topics["a"].partitions)
        assert s.snapshot.topic_by_id(info.topic_id) is None

    asyncio.run(main())


def test_a_restarted_store_publishes_what_it_holds(tmp_path):
    async def main():
        s = store(tmp_path)
        info = await s.create_topic("kept", [(3,)] * 4, {"cleanup.policy": "compact"})
        assert json.loads((tmp_path / FILE_NAME).read_text())["topics"][0]["partitions"] == 4
        again = store(tmp_path)
        rec = Recorder()
        again.add_listener(rec)
        await again.start()
        (delta,) = rec.deltas
        assert [t.topic_id for t in delta.created_topics()] == [info.topic_id]
        assert delta.after.topics["kept"].configs == {"cleanup.policy": "compact"}

    asyncio.run(main())


def test_bad_writes_are_refused_before_anything_changes(tmp_path):
    async def main():
        s = store(tmp_path)
        await s.create_topic("a", [(3,)], {})
        with pytest.raises(TopicExistsError):
            await s.create_topic("a", [(3,)], {})
        with pytest.raises(UnknownTopicError):
            await s.delete_topic("b")
        with pytest.raises(MetadataError, match="itself"):
            await s.create_topic("c", [(4,)], {})
        with pytest.raises(MetadataError):
            await s.register_broker(BrokerInfo(4, "h", 1))
        assert list(s.snapshot.topics) == ["a"]

    asyncio.run(main())


def test_every_listener_sees_a_change_even_when_one_fails(tmp_path):
    async def main():
        s = store(tmp_path)
        failing, after = Recorder(fail=True), Recorder()
        s.add_listener(failing)
        s.add_listener(after)
        with pytest.raises(OSError, match="offline"):
            await s.create_topic("a", [(3,)], {})
        assert len(after.deltas) == 1 and "a" in s.snapshot.topics

    asyncio.run(main())
