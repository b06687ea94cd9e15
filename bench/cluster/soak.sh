#!/usr/bin/env bash
# Long runs of the cluster fault tests: every fault repeated ROUNDS times (CI runs 3), the
# checker's report of each test (acknowledged, lost, duplicated, reordered, phantom records,
# high watermarks going backwards) kept in bench/cluster/results/soak-<time>.txt.
#
#   bash bench/cluster/soak.sh            # 10 rounds of each fault
#   ROUNDS=30 bash bench/cluster/soak.sh  # longer
#   REPEAT=5 bash bench/cluster/soak.sh   # the whole file 5 times over
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
ROUNDS="${ROUNDS:-10}"
REPEAT="${REPEAT:-1}"
mkdir -p bench/cluster/results
OUT="bench/cluster/results/soak-$(date -u +%Y%m%dT%H%M%SZ).txt"
echo "soak: $ROUNDS rounds per fault, $REPEAT pass(es); load $(cut -d' ' -f1-3 /proc/loadavg); report in $OUT"
status=0
for pass in $(seq 1 "$REPEAT"); do
    echo "== pass $pass of $REPEAT ($(date -u +%H:%M:%S))" | tee -a "$OUT"
    ODRADEK_FAULT_ROUNDS="$ROUNDS" .venv/bin/python -m pytest -v -s -p no:cacheprovider \
        tests/cluster/test_faults.py >>"$OUT.log" 2>&1 || status=1
    # the report: test outcomes and the checker's lines (the whole output, librdkafka's
    # connection log included, stays in $OUT.log)
    grep -aE "test_faults.py::|acknowledged [0-9]|^ +(lost|duplicated|reordered|phantom|moved|high watermark)|^(FAILED|ERROR)|^=+ .*(passed|failed)" \
        "$OUT.log" | sed -E 's/%[0-9]+\|[0-9.]+\|.*$//' | tee -a "$OUT"
done
echo "done: $OUT"
exit $status
