"""Realistic activity events: page views, searches and clicks, plus a few crawlers."""

from __future__ import annotations

import json
import random
import time
import uuid
from dataclasses import dataclass

PAGES = [
    "/",
    "/products",
    "/products/lamp",
    "/products/chair",
    "/products/desk",
    "/products/shelf",
    "/cart",
    "/checkout",
    "/blog",
    "/blog/odradek",
    "/blog/kafka-in-python",
    "/about",
    "/help",
    "/search",
    "/account",
]
PAGE_WEIGHTS = [30, 15, 8, 7, 6, 5, 6, 3, 6, 4, 3, 2, 2, 8, 3]
REFERRERS = [
    "",
    "https://www.google.com/",
    "https://duckduckgo.com/",
    "https://news.ycombinator.com/",
    "https://twitter.com/",
    "https://www.reddit.com/r/python/",
    "https://example.org/newsletter",
]
REF_WEIGHTS = [35, 30, 8, 6, 6, 8, 7]
QUERIES = ["lamp", "oak chair", "standing desk", "shelf", "kafka", "odradek", "gift", "sale", "blue lamp"]
BROWSERS = [
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 (KHTML, like Gecko) "
    "Version/17.5 Safari/605.1.15",
    "Mozilla/5.0 (X11; Linux x86_64; rv:127.0) Gecko/20100101 Firefox/127.0",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148",
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Mobile Safari/537.36",
]
CRAWLER_AGENTS = [
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "python-requests/2.32.3",
    "Mozilla/5.0 (compatible; AhrefsBot/7.0; +http://ahrefs.com/robot/)",
]


@dataclass
class User:
    user_id: str
    ip: str
    agent: str
    crawler: bool
    session: str = ""
    last_url: str = ""


class EventGenerator:
    """Deterministic for a seed. Crawlers are a few users issuing a large share of requests."""

    def __init__(self, users: int = 2000, crawlers: int = 3, crawler_share: float = 0.08, seed: int = 7) -> None:
        self.rng = random.Random(seed)
        r = self.rng
        self.users = [
            User(
                f"u{i:05d}",
                f"10.{r.randrange(256)}.{r.randrange(256)}.{r.randrange(1, 255)}",
                r.choice(BROWSERS),
                False,
            )
            for i in range(users)
        ]
        self.crawlers = [
            User(f"bot{i}", f"66.249.{r.randrange(256)}.{r.randrange(1, 255)}", CRAWLER_AGENTS[i % 3], True)
            for i in range(crawlers)
        ]
        self.crawler_share = crawler_share

    def next(self, ts_ms: int | None = None) -> tuple[bytes, bytes]:
        """(key, value) of one event: key = user id, value = JSON."""
        r = self.rng
        if self.crawlers and r.random() < self.crawler_share:
            u = r.choice(self.crawlers)
        else:
            u = r.choice(self.users)
        if not u.session or r.random() < 0.05:
            u.session = uuid.UUID(int=r.getrandbits(128)).hex[:16]
            u.last_url = ""
        x = r.random()
        if u.crawler:
            kind, url = "page_view", r.choice(PAGES)
            ref = ""
        elif x < 0.65 or not u.last_url:
            kind, url = "page_view", r.choices(PAGES, PAGE_WEIGHTS)[0]
            ref = u.last_url and ("https://shop.example" + u.last_url) or r.choices(REFERRERS, REF_WEIGHTS)[0]
        elif x < 0.8:
            kind, url = "search", "/search?q=" + r.choice(QUERIES).replace(" ", "+")
            ref = "https://shop.example" + u.last_url
        else:
            kind, url = "click", r.choices(PAGES, PAGE_WEIGHTS)[0]
            ref = "https://shop.example" + u.last_url
        u.last_url = url.split("?")[0]
        ev = {
            "event_type": kind,
            "user_id": u.user_id,
            "session_id": u.session,
            "url": url,
            "referrer": ref,
            "user_agent": u.agent,
            "ip": u.ip,
            "ts": ts_ms if ts_ms is not None else int(time.time() * 1000),
        }
        return u.user_id.encode(), json.dumps(ev, separators=(",", ":")).encode()


EVENT_DDL = (
    "event_type string, user_id string, session_id string, url string, referrer string, "
    "user_agent string, ip string, ts long"
)


def generate(
    bootstrap: str,
    topic: str,
    count: int | None = None,
    rate: float | None = None,
    duration: float | None = None,
    seed: int = 7,
    progress: bool = True,
    partitions: int = 4,
    start_ms: int | None = None,
    spacing_ms: float | None = None,
    settings: dict | None = None,
) -> int:
    """Produce events; `rate` events/s (None: as fast as possible); stops at `count` or `duration` s.
    With `start_ms`/`spacing_ms`, event times are synthetic (start_ms + i * spacing_ms).
    `settings`: client settings for a secured listener (security.protocol, sasl.*, ssl.*)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from odradek.client import Admin, Producer
    from odradek.client import errors as E

    with Admin(settings, bootstrap_servers=bootstrap) as a:
        try:
            a.create_topic(topic, partitions)
        except E.TopicAlreadyExistsError:
            pass
    gen = EventGenerator(seed=seed)
    if count is None and duration is None:
        raise ValueError("give a count or a duration")
    t0 = time.monotonic()
    n = 0
    with (
        Producer(settings, bootstrap_servers=bootstrap, linger_ms=20, batch_size=256 * 1024) as p,
        Progress(
            TextColumn("generate"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            disable=not progress,
        ) as bar,
    ):
        task = bar.add_task("gen", total=count, rate="")
        while (count is None or n < count) and (duration is None or time.monotonic() - t0 < duration):
            if rate:
                ahead = n / rate - (time.monotonic() - t0)
                if ahead > 0:
                    time.sleep(min(ahead, 0.05))
                    continue
            ts = int(start_ms + n * spacing_ms) if start_ms is not None and spacing_ms is not None else None
            k, v = gen.next(ts)
            p.send(topic, v, key=k, timestamp=ts)
            n += 1
            if n % 1000 == 0:
                bar.update(task, completed=n, rate=f"{n / max(time.monotonic() - t0, 1e-6):,.0f}/s")
        p.flush()
        bar.update(task, completed=n)
    return n
