#!/usr/bin/env bash
# Prove the client installs and works without the broker's dependencies:
#   1. a fresh venv, `pip install -c constraints.txt <a copy of this checkout>` (no extras;
#      dependencies resolved from pyproject.toml as a user's install would);
#   2. none of the broker extra's packages (uvloop, click, rich, prometheus-client, kazoo) is there,
#      and `odradek` (the command) says it needs the broker extra;
#   3. tests/support/client_only.py imports every odradek.client module and runs a
#      produce/consume round trip against a broker started from the project venv.
#
#   bash scripts/check-client-install.sh        (needs .venv: scripts/install-test-deps.sh)
#
# Slower than the test suite wants (a venv, a wheel build): tests/interop/clients/test_client_only.py
# checks the same import graph in-process with those packages refused by an import hook.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/odradek ] || { echo "no .venv/bin/odradek: run bash scripts/install-test-deps.sh first" >&2; exit 1; }

TMP="$(mktemp -d)"
BROKER_PID=""
cleanup() {
    if [ -n "$BROKER_PID" ]; then kill "$BROKER_PID" 2>/dev/null || true; wait "$BROKER_PID" 2>/dev/null || true; fi
    rm -rf "$TMP"
}
trap cleanup EXIT

echo "==> copy of the checkout (tracked and new files) in $TMP/src"
mkdir "$TMP/src"
git ls-files -z --cached --others --exclude-standard | xargs -0 tar -cf - | tar -xf - -C "$TMP/src"

echo "==> fresh venv, pip install -c constraints.txt . (no extras)"
"$PYTHON" -m venv "$TMP/venv"
"$TMP/venv/bin/python" -m pip install -q --disable-pip-version-check -c constraints.txt "$TMP/src"
"$TMP/venv/bin/python" -m pip list --disable-pip-version-check --format=freeze | sed 's/^/    /'

echo "==> the odradek command names the missing extra"
if out="$("$TMP/venv/bin/odradek" --version 2>&1)"; then
    echo "odradek ran without the broker extra: $out" >&2; exit 1
fi
echo "    $out"
case "$out" in *"pip install 'odradek[broker]'"*) ;; *) echo "unexpected message" >&2; exit 1 ;; esac

echo "==> broker (project venv) and the client-only round trip (fresh venv)"
PORT="$(.venv/bin/python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
.venv/bin/odradek broker --log-level WARNING \
    --override "listeners=PLAINTEXT://127.0.0.1:$PORT" --override "log.dirs=$TMP/data" &
BROKER_PID=$!
for _ in $(seq 100); do
    if .venv/bin/python -c "import socket; socket.create_connection(('127.0.0.1', $PORT), 0.2)" 2>/dev/null; then break; fi
    sleep 0.1
done
"$TMP/venv/bin/python" tests/support/client_only.py "127.0.0.1:$PORT"
