#!/usr/bin/env bash
# Install everything the tests need (idempotent, cached) and run the whole suite.
#   bash scripts/test.sh [pytest args...]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/install-test-deps.sh
echo "==> ruff (lint and format)"
.venv/bin/ruff check src tests bench scripts
.venv/bin/ruff format --check src tests bench scripts
echo "==> import-linter (layering contracts)"
.venv/bin/lint-imports
echo "==> mypy (the packages [tool.mypy] in pyproject.toml names)"
.venv/bin/mypy --cache-dir .venv/mypy-cache
echo "==> pytest"
exec .venv/bin/python -m pytest "$@"
