"""The brokers' and clients' logs during a run, stamped with virtual time and the node that wrote them.

In a batch only errors are kept (counted in the result: an error logged is a hint, not an
anomaly); replaying a seed with `-v` shows everything from INFO up, as each node would have
logged it.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable

from odradek.testing.sim.loop import NODE

LOGGERS = ("odradek", "kazoo")


class SimLogHandler(logging.Handler):
    def __init__(self, now: Callable[[], float], keep: int = 200, echo: bool = False) -> None:
        super().__init__()
        self.now = now
        self.keep = keep
        self.echo = echo
        self.lines: list[str] = []
        self.count = 0
        # every distinct message, unformatted, with its exception's class: what known bugs match
        self.templates: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        exc = record.exc_info[1] if record.exc_info else None
        self.templates[f"{record.name}: {record.msg}" + (f" [{type(exc).__name__}]" if exc is not None else "")] += 1
        if not self.echo and len(self.lines) >= self.keep:
            return
        node = NODE.get()
        msg = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            msg += f" [{record.exc_info[0].__name__ if record.exc_info[0] else ''}: {record.exc_info[1]}]"
        line = f"{self.now():9.3f} {str(node) if node else '-':>10} {record.levelname[0]} {record.name}: {msg}"
        if self.echo:
            print(line, flush=True)
        if len(self.lines) < self.keep:
            self.lines.append(line)


class captured_logs:  # noqa: N801 - a context manager
    """Route odradek's and kazoo's loggers to a `SimLogHandler` for one run."""

    def __init__(self, now: Callable[[], float], level: int = logging.ERROR, echo: bool = False) -> None:
        self.handler = SimLogHandler(now, echo=echo)
        self.handler.setLevel(level)
        self.level = level
        self._saved: list[tuple[logging.Logger, int, bool]] = []

    def __enter__(self) -> SimLogHandler:
        for name in LOGGERS:
            lg = logging.getLogger(name)
            self._saved.append((lg, lg.level, lg.propagate))
            lg.setLevel(self.level)
            lg.propagate = False
            lg.addHandler(self.handler)
        return self.handler

    def __exit__(self, *exc: object) -> None:
        for lg, level, propagate in self._saved:
            lg.removeHandler(self.handler)
            lg.setLevel(level)
            lg.propagate = propagate
