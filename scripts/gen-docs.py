"""Regenerate the documents derived from code: docs/configuration.md and docs/compatibility.md's API table."""

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from odradek.broker.config import reference_markdown  # noqa: E402
from odradek.broker.registry import api_table_markdown  # noqa: E402

(ROOT / "docs" / "configuration.md").write_text(reference_markdown())
compat = ROOT / "docs" / "compatibility.md"
text = compat.read_text()
start, end = "<!-- api-table:start -->", "<!-- api-table:end -->"
head, _, rest = text.partition(start)
_, _, tail = rest.partition(end)
compat.write_text(head + start + "\n" + api_table_markdown() + end + tail)
print("docs regenerated")
