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
        tests/cluster/test_faults.py 2>&1 | grep -E "test_faults.py::|acknowledged [0-9]|^ +(lost|duplicated|reordered|phantom|moved|high watermark)|PASSED|FAILED|ERROR|[0-9]+ (passed|failed)" | tee -a "$OUT" \
        || status=1
done
# librdkafka's connection log lines ("Connect to ... failed") are not test failures
grep -qE "^FAILED|[0-9]+ failed" "$OUT" && status=1 || true
echo "done: $OUT"
exit $status
