#!/usr/bin/env bash
# Long runs of the fault tests, which CI runs at CI size: every fault repeated ROUNDS times (CI
# runs 3), the exactly-once loops over TXN_RECORDS input records (CI: 1200), the checkers' report
# of each test (acknowledged, lost, duplicated, reordered, phantom records, high watermarks going
# backwards; lost or duplicated transactions) kept in bench/cluster/results/soak-<time>.txt.
#
#   bash bench/cluster/soak.sh            # 10 rounds of each fault, 6000 records per loop
#   ROUNDS=30 bash bench/cluster/soak.sh  # longer
#   REPEAT=5 bash bench/cluster/soak.sh   # the whole set 5 times over
#   TESTS=tests/cluster/test_faults.py bash bench/cluster/soak.sh   # some of them
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
ROUNDS="${ROUNDS:-10}"
REPEAT="${REPEAT:-1}"
TXN_RECORDS="${TXN_RECORDS:-6000}"
TESTS="${TESTS:-tests/cluster/test_faults.py tests/cluster/test_transaction_faults.py tests/interop/txn/test_faults.py}"
mkdir -p bench/cluster/results
OUT="bench/cluster/results/soak-$(date -u +%Y%m%dT%H%M%SZ).txt"
echo "soak: $ROUNDS rounds per fault, $REPEAT pass(es); load $(cut -d' ' -f1-3 /proc/loadavg); report in $OUT"
status=0
for pass in $(seq 1 "$REPEAT"); do
    echo "== pass $pass of $REPEAT ($(date -u +%H:%M:%S))" | tee -a "$OUT"
    # shellcheck disable=SC2086  # TESTS is a list of paths
    ODRADEK_FAULT_ROUNDS="$ROUNDS" ODRADEK_TXN_FAULT_RECORDS="$TXN_RECORDS" .venv/bin/python -m pytest -v -s \
        -p no:cacheprovider $TESTS >>"$OUT.log" 2>&1 || status=1
    # the report: test outcomes and the checker's lines (the whole output, librdkafka's
    # connection log included, stays in $OUT.log)
    grep -aE "test_[a-z_]*faults.py::|acknowledged [0-9]|^ +(lost|duplicated|reordered|phantom|moved|high watermark)|^(FAILED|ERROR)|^=+ .*(passed|failed)" \
        "$OUT.log" | sed -E 's/%[0-9]+\|[0-9.]+\|.*$//' | tee -a "$OUT"
done
echo "done: $OUT"
exit $status
