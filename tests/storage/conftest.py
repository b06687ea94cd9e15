import pytest

from odradek.protocol.records import Record, build_batch
from odradek.storage import FaultyFileSystem, LogConfig, LogManager


class Clock:
    def __init__(self, t_ms: int = 1_700_000_000_000):
        self.ms = t_ms

    def __call__(self) -> float:
        return self.ms / 1000.0

    def advance(self, ms: int) -> None:
        self.ms += ms


def batch(n=1, *, ts=None, key=None, value=b"v" * 10, size=None, **kw) -> bytes:
    """A batch of n records; ``size`` pads values so the batch is about that many bytes."""
    if size is not None:
        value = b"x" * max(1, (size - 61) // n - 12)
    recs = [Record(-1, (ts if ts is not None else 1_700_000_000_000) + i,
                   key if key is not None else None, value) for i in range(n)]
    return build_batch(recs, **kw)


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def fs():
    return FaultyFileSystem(real_fsync=False)


@pytest.fixture
def make_mgr(tmp_path, fs, clock):
    made = []

    def make(dirs=("d1",), config=None, **kw):
        paths = [str(tmp_path / d) for d in dirs]
        m = LogManager(paths, config or LogConfig(), fs=kw.pop("fs", fs), clock=clock, **kw)
        m.load()
        made.append(m)
        return m

    yield make
    for m in made:
        for lg in m.all_logs():
            for seg in lg.segments:
                try:
                    seg.close()
                except OSError:
                    pass
