"""The run's trace: every message the network delivers and every event of the run, digested.

Two runs of one seed must give the same digest, byte for byte: that is what "deterministic"
means here (tests/sim/test_determinism.py). Lines are kept only when asked (`keep=True`,
`--trace FILE`), to find where two runs part.
"""

from __future__ import annotations

import hashlib


class Trace:
    def __init__(self, keep: bool = False) -> None:
        self._h = hashlib.sha256()
        self.lines: list[str] | None = [] if keep else None
        self.count = 0

    def close(self) -> None:
        """The run is over: what happens while tearing it down is not part of it."""
        self.add = lambda line: None  # type: ignore[method-assign]

    def add(self, line: str) -> None:
        self.count += 1
        self._h.update(line.encode())
        self._h.update(b"\n")
        if self.lines is not None:
            self.lines.append(line)

    def digest(self) -> str:
        return self._h.hexdigest()
