"""Documents derived from code stay in step with it (regenerate: python scripts/gen-docs.py)."""

from pathlib import Path

from odradek.broker.config import reference_markdown
from odradek.broker.registry import api_table_markdown

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_configuration_reference_is_current():
    assert (DOCS / "configuration.md").read_text() == reference_markdown()


def test_compatibility_api_table_is_current():
    assert api_table_markdown() in (DOCS / "compatibility.md").read_text()


def test_readme_quick_start_has_two_commands():
    readme = (DOCS.parent / "README.md").read_text()
    quick = readme.split("## Quick start", 1)[1].split("##", 1)[0]
    block = quick.split("```sh", 1)[1].split("```", 1)[0]
    commands = [line for line in block.splitlines() if line.strip() and not line.strip().startswith("#")]
    assert len(commands) == 2
    for cmd in commands:
        script = cmd.split()[1]
        assert (DOCS.parent / script).exists(), script
