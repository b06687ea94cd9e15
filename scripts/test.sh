#!/usr/bin/env bash
# Install everything the tests need (idempotent, cached) and run the whole suite.
#   bash scripts/test.sh [pytest args...]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/install-test-deps.sh
echo "==> import-linter (layering contracts)"
.venv/bin/lint-imports
echo "==> pytest"
exec .venv/bin/python -m pytest "$@"
