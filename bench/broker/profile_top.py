"""Summarise a py-spy raw (collapsed-stack) profile: top functions by self and inclusive samples.

.venv/bin/python bench/broker/profile_top.py bench/broker/results/profile-produce.txt [--top 25]
"""

from __future__ import annotations

import argparse
import collections
import re

FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def short(path: str) -> str:
    for marker in ("site-packages/", "src/", "lib/python3.11/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def load(path: str):
    stacks = []
    for line in open(path):
        line = line.rstrip("\n")
        if not line:
            continue
        stack, _, n = line.rpartition(" ")
        stacks.append((stack.split(";"), int(n)))
    return stacks


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("profile")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    stacks = load(a.profile)
    total = sum(n for _, n in stacks)
    self_fn = collections.Counter()
    self_line = collections.Counter()
    incl = collections.Counter()
    for frames, n in stacks:
        leaf = frames[-1]
        m = FRAME.match(leaf)
        fn = f"{m['func']} ({short(m['file'])})" if m else leaf
        self_fn[fn] += n
        self_line[f"{m['func']} ({short(m['file'])}:{m['line']})" if m else leaf] += n
        seen = set()
        for f in frames:
            m = FRAME.match(f)
            key = f"{m['func']} ({short(m['file'])})" if m else f
            if key not in seen:
                seen.add(key)
                incl[key] += n
    print(f"{total} samples (non-idle threads)")
    print("\n## self time by function")
    for k, n in self_fn.most_common(a.top):
        print(f"{100 * n / total:5.1f}%  {k}")
    print("\n## self time by line")
    for k, n in self_line.most_common(a.top):
        print(f"{100 * n / total:5.1f}%  {k}")
    print("\n## inclusive time by function")
    for k, n in incl.most_common(a.top + 10):
        print(f"{100 * n / total:5.1f}%  {k}")


if __name__ == "__main__":
    main()
