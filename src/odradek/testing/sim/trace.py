"""The run's trace: every message the network delivers and every event of the run, digested.

Two runs of one seed must give the same digest, byte for byte: that is what "deterministic"
means here (tests/sim/test_determinism.py). Lines are kept only when asked (`keep=True`,
`--trace FILE`), to find where two runs part.
"""

from __future__ import annotations

import hashlib

_BATCH = 1024  # lines hashed at once: the digest of their concatenation, as line by line


class Trace:
    def __init__(self, keep: bool = False) -> None:
        self._h = hashlib.sha256()
        self._pending: list[str] = []
        self.lines: list[str] | None = [] if keep else None
        self.count = 0

    def close(self) -> None:
        """The run is over: what happens while tearing it down is not part of it."""
        self.add = lambda line: None  # type: ignore[method-assign]

    def add(self, line: str) -> None:
        self.count += 1
        pending = self._pending
        pending.append(line)
        if len(pending) >= _BATCH:
            self._flush()
        if self.lines is not None:
            self.lines.append(line)

    def _flush(self) -> None:
        if self._pending:
            self._pending.append("")
            self._h.update("\n".join(self._pending).encode())
            self._pending.clear()

    def digest(self) -> str:
        self._flush()
        return self._h.hexdigest()
