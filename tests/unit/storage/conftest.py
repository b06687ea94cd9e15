import pytest

from odradek.storage import FaultyFileSystem, LogConfig, LogManager


class Clock:
    """The wall clock (called) and a monotonic one (`monotonic`): `advance` moves both, as time
    passing does; `step` moves the wall clock alone, as an operator or NTP setting it does."""

    def __init__(self, t_ms: int = 1_700_000_000_000):
        self.ms = t_ms
        self.mono_ms = 5_000_000

    def __call__(self) -> float:
        return self.ms / 1000.0

    def monotonic(self) -> float:
        return self.mono_ms / 1000.0

    def advance(self, ms: int) -> None:
        self.ms += ms
        self.mono_ms += ms

    def step(self, ms: int) -> None:
        self.ms += ms


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
        kw.setdefault("monotonic", clock.monotonic)
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
