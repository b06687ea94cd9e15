"""Every path of this repository that README.md or a page of docs/ names exists, and every link
from one page to another leads to a file.

What the docs write, in backticks or in prose, and how it is read here:

- a path from the top of the repository: ``src/...``, ``tests/...``, ``bench/...``, ``scripts/...``,
  ``docs/...``;
- a path inside the package: ``odradek/...`` (under ``src/``) or one of its subpackages,
  ``broker/...``, ``coordinator/...``, ``storage/...`` and so on (under ``src/odradek/``);
- a shorter ``.py`` path starting with a folder of the repository (``replication/channel.py``,
  ``producer/sequences.py``) is the end of the path of one of its files;
- ``*`` is a glob and ``NN`` two digits (``handlers/kNN_*.py``); ``:42`` (a line) is ignored;
  ``::test_name`` names a test defined in the file; a path cut short by a list
  (``broker/handlers/k08,k09,..._*.py``) names the start of an entry;
- a commit subject quoted in the text (``commit "protocol/framing: ..."``) names an area, not a file,
  and the value of ``--chart`` is what a command writes (charts named after it), not a file it reads.

Paths outside the repository (``.deps/``, ``/proc/...``, ZooKeeper's ``/brokers/ids/<id>``, Python's
``asyncio/runners.py``) are not checked.
"""

from __future__ import annotations

import re
from fnmatch import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "src" / "odradek"
TOP = ("src", "tests", "bench", "scripts", "docs")
SUBPACKAGES = tuple(sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()))
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]

_SEGMENT = r"[\w.*-]+"
# A path of at least two segments (or one ending in "/"), not preceded by what would make it part
# of a longer word or an absolute path.
PATH = re.compile(rf"(?<![\w/.$<>~-])(\"?)((?:{_SEGMENT}/)+(?:{_SEGMENT})?)(::\w+|,(?=\s*\w))?")


def _walk() -> tuple[list[str], set[str]]:
    files, folders = [], set()
    for top in TOP:
        for p in (ROOT / top).rglob("*"):
            if "__pycache__" in p.parts:
                continue
            if p.is_file():
                files.append(p.relative_to(ROOT).as_posix())
            else:
                folders.add(p.name)
    return files, folders


FILES, FOLDERS = _walk()


def _glob(pattern: str) -> str:
    return pattern.replace("NN", "[0-9][0-9]")


def _resolve(path: str) -> Path | None:
    """Where a path the docs write would be, or None when it is not a path of this repository."""
    first = path.split("/", 1)[0]
    if first in TOP:
        return ROOT / path
    if first == "odradek":
        return ROOT / "src" / path
    if first in SUBPACKAGES:
        return PACKAGE / path
    return None


def _exists(target: Path) -> bool:
    if "*" in target.name or "NN" in target.name:
        return any(target.parent.glob(_glob(target.name)))
    return target.exists()


def stale_paths(doc: Path) -> list[str]:
    """The paths `doc` names that this repository does not have, each with its line number."""
    stale = []
    for number, line in enumerate(doc.read_text().splitlines(), 1):
        for m in PATH.finditer(line):
            quote, path, tail = m.groups()
            if quote or line[: m.start()].endswith("--chart "):
                continue
            path = path.rstrip(".")
            target = _resolve(path)
            if target is None:
                if path.endswith(".py") and path.split("/", 1)[0] in FOLDERS:
                    if not any(fnmatch(f, "*/" + _glob(path)) for f in FILES):
                        stale.append(f"{doc.name}:{number}: {path}")
                continue
            if tail and tail.startswith(","):  # the first of a list: the start of an entry's name
                ok = any(target.parent.glob(target.name + "*"))
            else:
                ok = _exists(target)
            if ok and tail and tail.startswith("::"):
                ok = re.search(rf"^\s*(async )?def {tail[2:]}\(", target.read_text(), re.M) is not None
            if not ok:
                stale.append(f"{doc.name}:{number}: {path}{tail or ''}")
    return stale


LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)\s]*)?\)")


def broken_links(doc: Path) -> list[str]:
    """The links to files (``[text](storage.md#anchor)``) in `doc` that lead nowhere."""
    broken = []
    for number, line in enumerate(doc.read_text().splitlines(), 1):
        for m in LINK.finditer(line):
            target = m.group(1)
            if "://" not in target and not target.startswith("mailto:") and not (doc.parent / target).exists():
                broken.append(f"{doc.name}:{number}: {target}")
    return broken


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_the_paths_a_doc_names_exist(doc):
    assert stale_paths(doc) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_the_links_a_doc_makes_lead_to_files(doc):
    assert broken_links(doc) == []


def test_the_rule_finds_what_the_docs_write(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "`src/odradek/broker/config.py` and broker/server.py:12 exist, so do `tests/unit/`,\n"
        "`broker/handlers/k22, k24` and `bench/broker/micro.py --producer plain|idempotent`;\n"
        "`broker/handlers/k08,k09_*.py`, `replication/channel.py`, `tests/reference/test_diff_*.py`,\n"
        "`handlers/kNN_*.py`, `asyncio/runners.py`, `--chart docs/new.png`\n"
        '(commit "protocol/framing: a frame reader") and `/brokers/ids/<id>` are not checked or exist.\n'
        "`tests/unit/docs/test_docs_paths.py::test_the_rule_finds_what_the_docs_write` exists.\n"
        "`storage/txn_indexes.py`, tests/nowhere/, `odradek/broker/gone.py`, `handlers/k99_gone.py`,\n"
        "`tests/unit/docs/test_docs_paths.py::test_gone` and `broker/handlers/k99,k98_*.py` do not.\n"
    )
    assert stale_paths(page) == [
        "page.md:7: storage/txn_indexes.py",
        "page.md:7: tests/nowhere/",
        "page.md:7: odradek/broker/gone.py",
        "page.md:7: handlers/k99_gone.py",
        "page.md:8: tests/unit/docs/test_docs_paths.py::test_gone",
        "page.md:8: broker/handlers/k99,",
    ]


def test_a_link_to_a_missing_page_is_found(tmp_path):
    (tmp_path / "there.md").write_text("")
    page = tmp_path / "page.md"
    page.write_text("[a](there.md#x), [b](https://kafka.apache.org/x), [c](#local)\n[d](gone.md#x)\n")
    assert broken_links(page) == ["page.md:2: gone.md"]
