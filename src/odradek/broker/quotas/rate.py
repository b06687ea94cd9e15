"""Kafka's windowed rate (metrics.stats.Rate over a SampledStat of sums) and the throttle time
a violation gives (QuotaUtils.throttleTime): the same arithmetic, so a client is throttled for
the milliseconds Kafka would throttle it.

Samples of `window_ms` each, `samples` of them kept (plus the overlapping one Kafka keeps); a
sample expires once nothing was recorded in it for samples * window_ms. The rate is the sum of
the live samples over the elapsed time since the oldest, counted as at least samples - 1 full
windows (so a first burst does not read as an enormous rate). Times are in milliseconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(slots=True)
class _Sample:
    start_ms: int
    last_event_ms: int
    value: float = 0.0
    events: int = 0

    def reset(self, now_ms: int) -> None:
        self.start_ms = self.last_event_ms = now_ms
        self.value = 0.0
        self.events = 0


class Rate:
    """A sum per window, measured as a rate per second (Kafka's `new Rate()` of a quota sensor)."""

    __slots__ = ("samples", "window_ms", "_samples", "_current")

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self._samples: list[_Sample] = []
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.window_ms:
            sample = self._advance(now_ms)
        sample.value += value
        sample.events += 1
        sample.last_event_ms = now_ms

    def measure(self, now_ms: int) -> float:
        """The rate per second now."""
        self._purge(now_ms)
        total = sum(s.value for s in self._samples)
        return total / (self.window_size_ms(now_ms) / 1000.0)

    def window_size_ms(self, now_ms: int) -> int:
        self._purge(now_ms)
        elapsed = now_ms - self._oldest(now_ms).start_ms
        full = elapsed // self.window_ms
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(elapsed, 1)

    # ---------------------------------------------------------------- internals
    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms, now_ms))
        return self._samples[self._current]

    def _advance(self, now_ms: int) -> _Sample:
        self._current = (self._current + 1) % (self.samples + 1)
        if self._current >= len(self._samples):
            sample = _Sample(now_ms, now_ms)
            self._samples.append(sample)
            return sample
        sample = self._samples[self._current]
        sample.reset(now_ms)
        return sample

    def _oldest(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms, now_ms))
        return min(self._samples, key=lambda s: s.start_ms)

    def _purge(self, now_ms: int) -> None:
        expire = self.samples * self.window_ms
        for s in self._samples:
            if now_ms - s.last_event_ms >= expire:
                s.reset(now_ms)


def throttle_time_ms(observed: float, bound: float, window_size_ms: int) -> int:
    """Kafka's QuotaUtils.throttleTime: the delay X that brings the observed rate O back to the
    bound T over the window W, O * W / (W + X) = T, so X = (O - T) / T * W (rounded)."""
    return round_half_up((observed - bound) / bound * window_size_ms)


def round_half_up(x: float) -> int:
    """Java's Math.round."""
    return math.floor(x + 0.5)
