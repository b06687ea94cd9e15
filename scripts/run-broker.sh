#!/usr/bin/env bash
# Install odradek with its broker extra into .venv (once) and run a single-node broker.
#   bash scripts/run-broker.sh [--override key=value ...] [--config server.properties]
# Defaults: listeners=PLAINTEXT://127.0.0.1:9092, log.dirs=./data (override as you like).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    echo "==> creating .venv" >&2
    "$PYTHON" -m venv .venv
fi
# The broker extra (uvloop, click, rich, prometheus-client, kazoo) at the versions the tests run with.
STAMP=.venv/.odradek-install.stamp
WANT="$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ] || ! .venv/bin/python -c "import odradek.cli.main" 2>/dev/null; then
    echo "==> pip install -c constraints.txt -e '.[broker]'" >&2
    .venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[broker]'
    echo "$WANT" >"$STAMP"
fi
has_logdirs=0
for a in "$@"; do case "$a" in log.dirs=*|--config|--config=*) has_logdirs=1 ;; esac; done
if [ "$has_logdirs" = 0 ]; then
    set -- --override "log.dirs=$ROOT/data" "$@"
fi
exec .venv/bin/odradek broker "$@"
