"""The simulator's event loop: one asyncio loop, a virtual clock, nodes that pause and die.

`SimLoop` is an asyncio event loop whose `time()` is virtual: when no callback is ready it
jumps to the next timer instead of sleeping, so a simulated minute takes milliseconds.

Every task and callback belongs to a node (a broker incarnation, a client, ZooKeeper): the
node is a context variable (`NODE`), which asyncio copies into every task and handle created
under it. When a handle comes up to run, the loop looks at its node: a paused node's handles
are parked until it resumes (SIGSTOP: timers fire late, all at once); a dead node's are
dropped (kill -9: that incarnation never runs again).

`run_in_executor`, and so `asyncio.to_thread`, runs the function inline on the loop after the
node's simulated I/O delay (slow disks); nothing real sleeps and there are no threads. A
function that would block (a ZooKeeper call while the node is cut from ZooKeeper) raises
`WouldBlock`, and runs again, whole, once what it waits for is back: it ran in one instant of
virtual time, so "blocked at its first call, then went on" and "ran later" are the same.
Each round trip it makes (`charge`) delays its result, one after the other as a thread's
blocking calls would: when the links change while the result is on its way (`costs_changed`:
a slow link set or healed), the round trips not yet made take the new time, the one under way
keeps its own (simulator seed 11860: 40 ZooKeeper reads at a start, charged 1.6 s each at a
slow link's rate, kept a broker from registering for a minute after the link was healed).

Sockets: `add_reader(fd, ...)` works for the simulated network's virtual descriptors
(net.py), level-triggered, as a selector would: a registered reader runs while its fd is
readable and its node can run.

While a simulation runs (`simulated_world`), `time.time`/`time_ns`/`monotonic`/`perf_counter`
read the virtual clock (the wall clock as the calling node sees it: its offset and drift, for
clock steps and skew), `time.sleep` raises, `uuid.uuid4` and `random` are seeded from the
run's seed, and function defaults that captured the real clock (`clock=time.time`) are
pointed at the virtual one for the run.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import random
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = ["NODE", "MONO_BASE", "WALL_EPOCH", "Node", "SimDeadlock", "SimLoop", "WouldBlock", "simulated_world"]

MONO_BASE = 1_000_000.0  # the virtual monotonic clock at the start of a run (not 0: code treats 0 as "never")
WALL_EPOCH = 1_767_225_600.0  # 2026-01-01T00:00:00Z: the wall clock at the start of a run

NODE: contextvars.ContextVar[Node | None] = contextvars.ContextVar("odradek_sim_node", default=None)


class SimDeadlock(RuntimeError):
    """Nothing is ready and nothing is scheduled: the simulation can never go on."""


class WouldBlock(Exception):  # noqa: N818 - a signal, not an error
    """Raised by simulated I/O that a real thread would block on. `wait(resume)` arranges for
    `resume()` to be called once it could go on."""

    def __init__(self, wait: Callable[[Callable[[], None]], None], what: str = "") -> None:
        super().__init__(what)
        self.wait = wait


@dataclass(eq=False)
class Node:
    """One process of the simulated cluster: a broker incarnation, a client, ZooKeeper."""

    name: str
    incarnation: int = 0
    paused: bool = False
    dead: bool = False
    wall_offset: float = 0.0  # seconds added to this node's wall clock
    drift: float = 0.0  # extra wall-clock seconds per second
    io_delay: tuple[float, float] = (0.00005, 0.0005)  # to_thread: uniform delay (s), before the function runs
    slow_io: float = 1.0  # multiplies io_delay (a slow disk)
    parked: list[asyncio.Handle] = field(default_factory=list, repr=False)
    # its tasks in the order they were made; finished ones are dropped as the list doubles
    # (`add_task`: a weak mapping cost a callback at every task's end, ~2% of a seed's CPU)
    tasks: list[asyncio.Task[Any]] = field(default_factory=list, repr=False)
    _prune_at: int = field(default=64, repr=False)

    def add_task(self, task: asyncio.Task[Any]) -> None:
        tasks = self.tasks
        tasks.append(task)
        if len(tasks) >= self._prune_at:
            tasks[:] = [t for t in tasks if not t.done()]
            self._prune_at = max(64, 2 * len(tasks))

    def __str__(self) -> str:
        return self.name if not self.incarnation else f"{self.name}#{self.incarnation}"

    def wall(self, elapsed: float) -> float:
        return WALL_EPOCH + elapsed * (1.0 + self.drift) + self.wall_offset


@dataclass(eq=False)
class _Delivery:
    """A result on its way to the task that ran a function inline: its round trips one after
    the other from `start`, each `planned` as long as the links were when it was last asked."""

    start: float
    planned: list[float]
    again: list[Callable[[], float] | None]
    node: Node | None
    deliver: Callable[[], None]
    context: contextvars.Context
    handle: asyncio.TimerHandle | None = None

    def replan(self, loop: SimLoop) -> None:
        """The round trips not yet begun at what the links make them now; the one under way, and
        those made, as they were."""
        if self.handle is None or self.handle.cancelled():
            return
        now, at, i = loop.time(), self.start, 0
        while i < len(self.planned) and at + self.planned[i] <= now:
            at += self.planned[i]
            i += 1
        for j in range(i + 1, len(self.planned)):
            again = self.again[j]
            if again is not None:
                self.planned[j] = again()
        end = self.start + sum(self.planned)
        if abs(end - self.handle.when()) > 1e-9:
            self.handle.cancel()
            self.handle = loop.call_at(max(end, now), self.deliver, context=self.context)


_NO_HANDLES: list[asyncio.Handle] = []  # _poll_readers with no descriptor to look at (never appended to)


class _Handle(asyncio.Handle):
    """asyncio's Handle without its debug check at creation (the loop is never in debug mode
    when it makes these: `SimLoop.call_soon`); a callback per message and per task step."""

    __slots__ = ()

    def __init__(
        self, callback: Callable[..., Any], args: tuple[Any, ...], loop: Any, context: contextvars.Context | None
    ) -> None:
        _fill(self, callback, args, loop, context)


def _fill(
    h: asyncio.Handle,
    callback: Callable[..., Any],
    args: tuple[Any, ...],
    loop: Any,
    context: contextvars.Context | None,
) -> None:
    """What asyncio.Handle.__init__ sets, without its debug checks."""
    h._context = context if context is not None else contextvars.copy_context()
    h._loop = loop
    h._callback = callback
    h._args = args
    h._cancelled = False
    h._repr = None
    h._source_traceback = None


class _TimerHandle(asyncio.TimerHandle):
    """asyncio's TimerHandle, made as `_Handle` is."""

    __slots__ = ()

    def __init__(
        self,
        when: float,
        callback: Callable[..., Any],
        args: tuple[Any, ...],
        loop: Any,
        context: contextvars.Context | None,
    ) -> None:
        _fill(self, callback, args, loop, context)
        self._when = when
        self._scheduled = False


class SimLoop(asyncio.BaseEventLoop):
    """An asyncio loop on virtual time; see the module docstring."""

    def __init__(self, rng: random.Random | None = None) -> None:
        super().__init__()
        self._now = MONO_BASE
        self._timer_seq = 0
        self._timers: list[tuple[float, int, asyncio.TimerHandle]] = []
        self.rng = rng or random.Random(0)  # I/O delays
        self._readers: dict[int, asyncio.Handle] = {}
        self._maybe_readable: dict[int, None] = {}  # fds that may be readable (ordered set)
        self.readable: Callable[[int], bool] = lambda fd: False  # set by the network
        # the round trips of the function running inline: (seconds now, seconds as the links are then)
        self._legs: list[tuple[float, Callable[[], float] | None]] = []
        self._deliveries: dict[asyncio.Future[Any], _Delivery] = {}  # results on their way, in order
        # Virtual time each callback takes: time moves while code runs, as it does for real (a
        # loop that waits "until the deadline has passed" with a timeout of 0 ends)
        self.cpu_per_handle = 5e-6
        self.handles_run = 0
        self.errors: list[str] = []  # unhandled exceptions reported to the loop
        # Tasks of dead nodes, kept: were they collected, closing their coroutines would run
        # their `finally:` blocks (I/O, new tasks) at whatever moment the garbage collector
        # chose. `bury()` closes them when the run is over.
        self.graveyard: list[asyncio.Task[Any]] = []
        self.set_exception_handler(self._on_error)
        self.set_task_factory(self._make_task)

    def _make_task(self, loop: Any, coro: Any, context: contextvars.Context | None = None) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=self, context=context)
        node = context.get(NODE) if context is not None else NODE.get()
        if node is not None:
            node.add_task(task)
        return task

    # ------------------------------------------------------------------ clock
    def time(self) -> float:
        return self._now

    @property
    def elapsed(self) -> float:
        """Virtual seconds since the start of the run."""
        return self._now - MONO_BASE

    def wall(self) -> float:
        """The wall clock as the calling node sees it."""
        node = NODE.get()
        t = self._now - MONO_BASE
        return WALL_EPOCH + t if node is None else node.wall(t)

    def step_clock(self, node: Node, seconds: float) -> None:
        node.wall_offset += seconds

    def set_drift(self, node: Node, drift: float) -> None:
        """Change `node`'s wall-clock rate from now on, without a jump."""
        node.wall_offset += self.elapsed * (node.drift - drift)
        node.drift = drift

    def charge(self, seconds: float, again: Callable[[], float] | None = None) -> None:
        """Inside a function run by `run_in_executor`: its caller sees the result `seconds` later
        (a ZooKeeper round trip), after the round trips charged before this one. `again` answers
        what this round trip takes as the links are at the moment it is asked: called by
        `costs_changed` while the result is on its way and this round trip not yet begun."""
        self._legs.append((seconds, again))

    def costs_changed(self) -> None:
        """A link's latency (or ZooKeeper's commit time) changed: every result on its way takes
        its round trips not yet begun at their new cost."""
        for fut, d in list(self._deliveries.items()):
            if fut.done() or d.node is not None and d.node.dead:
                del self._deliveries[fut]
                continue
            d.replan(self)

    # ------------------------------------------------------------- nodes
    def pause(self, node: Node) -> None:
        node.paused = True

    def resume(self, node: Node) -> None:
        if not node.paused:
            return
        node.paused = False
        parked, node.parked = node.parked, []
        self._ready.extend(parked)

    def kill(self, node: Node) -> None:
        node.dead = True
        node.paused = False
        node.parked.clear()
        self.graveyard.extend(t for t in node.tasks if not t.done())
        node.tasks = []

    def bury(self) -> None:
        """After the run (the loop stopped, no loop running): close the coroutines of every task
        still pending, so that none is finalized later, during another run."""
        pending = [t for t in asyncio.all_tasks(self) if not t.done()]
        tasks, self.graveyard = self.graveyard + pending, []
        seen: set[int] = set()
        for task in tasks:
            if id(task) in seen:
                continue
            seen.add(id(task))
            coro = task.get_coro()
            try:
                coro.close()
            except BaseException:  # noqa: BLE001 - a finally block that wanted a running loop
                pass

    def call_soon_as(self, node: Node | None, callback: Callable[..., Any], *args: Any) -> asyncio.Handle:
        """`call_soon` with `callback` running as `node`."""
        ctx = contextvars.Context()
        ctx.run(NODE.set, node)
        return self.call_soon(callback, *args, context=ctx)

    def call_later_as(
        self, node: Node | None, delay: float, callback: Callable[..., Any], *args: Any
    ) -> asyncio.TimerHandle:
        ctx = contextvars.Context()
        ctx.run(NODE.set, node)
        return self.call_later(delay, callback, *args, context=ctx)

    # ------------------------------------------------------------ running
    def call_soon(
        self, callback: Callable[..., Any], *args: Any, context: contextvars.Context | None = None
    ) -> asyncio.Handle:
        if self._debug:
            return super().call_soon(callback, *args, context=context)
        if self._closed:
            raise RuntimeError("Event loop is closed")
        handle = _Handle(callback, args, self, context)
        self._ready.append(handle)
        return handle

    def call_later(
        self, delay: float, callback: Callable[..., Any], *args: Any, context: contextvars.Context | None = None
    ) -> asyncio.TimerHandle:
        if delay is None:
            raise TypeError("delay must not be None")
        return self.call_at(self._now + delay, callback, *args, context=context)

    def call_at(
        self, when: float, callback: Callable[..., Any], *args: Any, context: contextvars.Context | None = None
    ) -> asyncio.TimerHandle:
        if self._closed:
            raise RuntimeError("Event loop is closed")
        self._timer_seq += 1
        timer: asyncio.TimerHandle = (
            asyncio.TimerHandle(when, callback, args, self, context)
            if self._debug
            else _TimerHandle(when, callback, args, self, context)
        )
        # (time, creation): timers due at one instant run in the order they were set, whatever
        # else the heap went through; and tuples compare in C
        heapq.heappush(self._timers, (when, self._timer_seq, timer))
        timer._scheduled = True
        return timer

    def _write_to_self(self) -> None:  # call_soon_threadsafe: there are no other threads
        pass

    def _process_events(self, event_list: Any) -> None:  # pragma: no cover - no selector
        pass

    def _run_once(self) -> None:
        timers = self._timers
        if len(timers) > 100 and self._timer_cancelled_count * 2 > len(timers):
            live = []
            for entry in timers:
                if entry[2]._cancelled:
                    entry[2]._scheduled = False
                else:
                    live.append(entry)
            heapq.heapify(live)
            self._timers = timers = live
            self._timer_cancelled_count = 0
        else:
            while timers and timers[0][2]._cancelled:
                self._timer_cancelled_count -= 1
                heapq.heappop(timers)[2]._scheduled = False
        ready = self._ready
        io = self._poll_readers() if self._maybe_readable else _NO_HANDLES
        if not ready and not io and not self._stopping:
            if not timers:
                raise SimDeadlock(f"nothing ready and nothing scheduled at t={self.elapsed:.6f}")
            when = timers[0][0]
            if when > self._now:
                self._now = when
        now = self._now
        while timers and timers[0][0] <= now:
            h = heapq.heappop(timers)[2]
            h._scheduled = False
            ready.append(h)
        if io:
            ready.extend(io)
        for _ in range(len(ready)):
            h = ready.popleft()
            if h._cancelled:
                continue
            ctx = h._context
            node = ctx.get(NODE) if ctx is not None else None
            if node is not None:
                if node.dead:
                    continue
                if node.paused:
                    node.parked.append(h)
                    continue
            self.handles_run += 1
            h._run()
            self._now += self.cpu_per_handle

    def _poll_readers(self) -> list[asyncio.Handle]:
        out: list[asyncio.Handle] = []
        maybe = self._maybe_readable
        if not maybe:
            return out
        readable = self.readable
        for fd in list(maybe):
            if not readable(fd):
                del maybe[fd]
                continue
            h = self._readers.get(fd)
            if h is None or h._cancelled:
                continue  # nobody reading now (backpressure); add_reader looks again
            node = h._context.get(NODE)
            if node is not None and (node.dead or node.paused):
                continue  # resume() runs parked handles; a reader is polled again then
            out.append(h)
        return out

    def notify_readable(self, fd: int) -> None:
        """The network: bytes (or an end of stream) arrived for `fd`."""
        self._maybe_readable[fd] = None

    # ------------------------------------------------------------ readers
    def add_reader(self, fd: Any, callback: Callable[..., Any], *args: Any) -> None:
        old = self._readers.get(fd)
        if old is not None:
            old.cancel()
        self._readers[fd] = asyncio.Handle(callback, args, self, None)
        self._maybe_readable[fd] = None

    def remove_reader(self, fd: Any) -> bool:
        h = self._readers.pop(fd, None)
        if h is None:
            return False
        h.cancel()
        return True

    def add_writer(self, fd: Any, callback: Callable[..., Any], *args: Any) -> None:
        raise NotImplementedError("simulated sockets are always writable: nothing waits for writability")

    def remove_writer(self, fd: Any) -> bool:
        return False

    def resume_readers(self) -> None:
        """After a node resumes: look at every registered reader again."""
        for fd in self._readers:
            self._maybe_readable[fd] = None

    # ------------------------------------------------------------ network
    network: Any = None  # net.Network, once one is attached

    async def create_connection(
        self, protocol_factory: Callable[[], Any], host: str | None = None, port: int | None = None, **kwargs: Any
    ) -> tuple[Any, Any]:
        if kwargs.get("ssl") or kwargs.get("sock") is not None:
            raise NotImplementedError("the simulated network has plain connections to (host, port) only")
        if self.network is None or host is None or port is None:
            raise OSError("no simulated network, or no address")
        return await self.network.create_connection(protocol_factory, host, port)

    # ------------------------------------------------------------ executor
    def run_in_executor(self, executor: Any, func: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        fut = self.create_future()
        node = NODE.get()
        delay = 0.0
        if node is not None:
            lo, hi = node.io_delay
            delay = self.rng.uniform(lo, hi) * node.slow_io
        self.call_later(delay, self._run_inline, fut, func, args)
        return fut

    def _run_inline(self, fut: asyncio.Future[Any], func: Callable[..., Any], args: tuple[Any, ...]) -> None:
        if fut.cancelled():
            return  # never started (a running thread could not have been cancelled)
        self._legs = []
        try:
            result = func(*args)
        except WouldBlock as blocked:
            ctx = contextvars.copy_context()

            def resume() -> None:
                self.call_soon(self._run_inline, fut, func, args, context=ctx)

            blocked.wait(resume)
            return
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting task
            legs, self._legs = self._legs, []
            self._settle(fut, legs, None, e)
            return
        legs, self._legs = self._legs, []
        self._settle(fut, legs, result, None)

    def _settle(
        self,
        fut: asyncio.Future[Any],
        legs: list[tuple[float, Callable[[], float] | None]],
        result: Any,
        exc: BaseException | None,
    ) -> None:
        def done() -> None:
            if fut.cancelled():
                return
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(result)

        after = sum(seconds for seconds, _again in legs)
        if after <= 0:
            done()
            return

        def deliver() -> None:
            self._deliveries.pop(fut, None)
            done()

        planned, again = [seconds for seconds, _a in legs], [a for _s, a in legs]
        d = _Delivery(self._now, planned, again, NODE.get(), deliver, contextvars.copy_context())
        self._deliveries[fut] = d
        d.handle = self.call_later(after, deliver, context=d.context)

    # ------------------------------------------------------------ errors
    def _on_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = context.get("message", "")
        if "was destroyed but it is pending" in message:
            return  # a killed incarnation's tasks, collected
        exc = context.get("exception")
        node = NODE.get()
        self.errors.append(f"{self.elapsed:.3f} {node}: {message}{f': {exc!r}' if exc is not None else ''}")


# ----------------------------------------------------------------- the world
_CLOCKS = ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns", "sleep")


def _virtual_clocks(loop: SimLoop) -> dict[str, Callable[..., Any]]:
    def wall() -> float:
        node = NODE.get()
        t = loop._now - MONO_BASE
        return WALL_EPOCH + t if node is None else node.wall(t)

    def wall_ns() -> int:
        return int(wall() * 1e9)

    def mono() -> float:
        return loop._now

    def mono_ns() -> int:
        return int(loop._now * 1e9)

    def sleep(seconds: float) -> None:
        raise RuntimeError(f"time.sleep({seconds}) in the simulation: code on the loop must not block")

    return {
        "time": wall,
        "time_ns": wall_ns,
        "monotonic": mono,
        "monotonic_ns": mono_ns,
        "perf_counter": mono,
        "perf_counter_ns": mono_ns,
        "sleep": sleep,
    }


def _rebind_defaults(swap: dict[Any, Any]) -> list[tuple[Any, str, Any]]:
    """Point function defaults that captured a real clock (`clock=time.time`) in odradek's
    modules at the virtual one; returns what to restore."""
    changed: list[tuple[Any, str, Any]] = []

    def swapped(v: Any) -> Any:
        for real, virtual in swap.items():
            if v is real:
                return virtual
        return v

    def fix(fn: Any) -> None:
        fn = getattr(fn, "__func__", fn)
        d = getattr(fn, "__defaults__", None)
        if d and any(swapped(v) is not v for v in d):
            changed.append((fn, "__defaults__", d))
            fn.__defaults__ = tuple(swapped(v) for v in d)
        kd = getattr(fn, "__kwdefaults__", None)
        if kd and any(swapped(v) is not v for v in kd.values()):
            changed.append((fn, "__kwdefaults__", kd))
            fn.__kwdefaults__ = {k: swapped(v) for k, v in kd.items()}

    global _clock_users
    modules = len(sys.modules)
    if _clock_users is not None and _clock_users[0] == modules and _clock_users[1] == list(swap):
        for fn in _clock_users[2]:
            fix(fn)
        return changed
    for name, mod in list(sys.modules.items()):
        if not name.startswith("odradek.") or mod is None:
            continue
        for obj in list(vars(mod).values()):
            if getattr(obj, "__module__", None) != name:
                continue
            if isinstance(obj, type):
                for attr in vars(obj).values():
                    fix(attr)
            elif callable(obj):
                fix(obj)
    # the next run, with no module imported since, looks at these only (the scan is ~1% of a seed)
    _clock_users = (modules, list(swap), list(dict.fromkeys(fn for fn, _attr, _value in changed)))
    return changed


# (modules loaded, the real clocks, the functions whose defaults held one) of the last full scan
_clock_users: tuple[int, list[Any], list[Any]] | None = None


@contextmanager
def simulated_world(loop: SimLoop, seed: int) -> Iterator[None]:
    """Virtual clocks, seeded uuid4 and random, for the length of one run."""
    originals = {name: getattr(time, name) for name in _CLOCKS}
    virtual = _virtual_clocks(loop)
    uuid_rng = random.Random(f"uuid-{seed}")
    real_uuid4 = uuid.uuid4
    random_state = random.getstate()
    for name, fn in virtual.items():
        setattr(time, name, fn)
    rebound = _rebind_defaults({originals[n]: virtual[n] for n in _CLOCKS})
    uuid.uuid4 = lambda: uuid.UUID(int=uuid_rng.getrandbits(128), version=4)
    random.seed(seed)
    try:
        yield
    finally:
        for name, fn in originals.items():
            setattr(time, name, fn)
        for fn, attr, value in rebound:
            setattr(fn, attr, value)
        uuid.uuid4 = real_uuid4
        random.setstate(random_state)
