#!/usr/bin/env bash
# A model too large for memory is refused before anything is allocated, with one line naming the
# bytes of each part and the bytes available (train/memory_budget.h), exit 2, within seconds.
# Usage: bash faults_memory_e2e_test.sh /path/to/dtrain   (run by ctest as apps.faults_memory_e2e_test)
set -euo pipefail
DTRAIN=$(realpath "$1")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$ROOT"
source tests/apps/e2e_helpers.sh

start=$(date +%s)
# 4e10 parameters: 149 GiB each for parameters, gradients and the momentum.
expect_error "the model does not fit in memory: 40015200010 parameters x 1 replica .*parameters 149.07 GiB.*gradients 149.07 GiB.*optimizer state 149.07 GiB.*available" \
  train --config examples/synthetic_quick.toml --quiet --out "$TMP/one" \
  --set 'model.hidden=[200000,200000]' --set optim.momentum=0.9
# Two thread ranks: both replicas counted, fewer workers advised.
expect_error "x 2 replicas in this process.*fewer workers in this process (now 2)" \
  train --config examples/synthetic_quick.toml --quiet --out "$TMP/two" --workers 2 \
  --set 'model.hidden=[200000,200000]'
# A layer list (model.name = "layers") is counted the same way, from its layers' declarations.
sed 's/out_features = 256/out_features = 200000/' examples/models/mlp.toml > "$TMP/huge_layers.toml"
expect_error "the model does not fit in memory: 40159200010 parameters x 1 replica" \
  train --config "$TMP/huge_layers.toml" --quiet --out "$TMP/layers" \
  --set data.dataset='"synthetic"' --set 'data.synthetic_shape=[1,28,28]'
elapsed=$(( $(date +%s) - start ))
(( elapsed < 20 )) || fail "the refusals took ${elapsed}s; they should come before any allocation"
[[ ! -e "$TMP/one/metrics.jsonl" ]] || fail "a refused run should not start"
echo "ok: a model too large for memory is refused in ${elapsed}s with each part's bytes, exit 2"

# Hogwild!'s linear model from a libsvm file: the weights and the checkpoint's 2 copies of them
# are counted once the data is read. An index that puts the weights at half the memory available
# (at most 2^31 - 1, 8 GiB) passes the reader's check of the weights alone, and the run is refused:
# 3 x the weights need more than is available. Skipped where 24 GB or more are available (the
# largest index could fit there).
avail_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
for pair in "/sys/fs/cgroup/memory.max /sys/fs/cgroup/memory.current" \
            "/sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/memory/memory.usage_in_bytes"; do
  read -r limit_file usage_file <<< "$pair"
  limit=$(cat "$limit_file" 2> /dev/null || echo max)
  if [[ $limit =~ ^[0-9]+$ ]]; then
    left_kb=$(( (limit - $(cat "$usage_file" 2> /dev/null || echo 0)) / 1024 ))
    (( left_kb < avail_kb )) && avail_kb=$left_kb
    break
  fi
done
index=$(( avail_kb * 1024 / 8 ))
(( index > 2147483647 )) && index=2147483647
if (( avail_kb >= 24000000 )); then
  echo "skipped: the Hogwild! case (24 GB or more available: the largest libsvm index could fit)"
  exit 0
fi
{ for i in $(seq 1 50); do echo "1 $i:1"; echo "-1 $(( i + 50 )):1"; done; echo "1 $index:1"; } \
  > "$TMP/wide.svm"
start=$(date +%s)
set +e
timeout 60 "$DTRAIN" train --config examples/hogwild_sparse.toml --quiet --out "$TMP/wide" \
  --set data.dataset='"libsvm"' --set data.path="\"$TMP/wide.svm\"" --epochs 1 2> "$TMP/err.txt"
rc=$?
set -e
[[ $rc -eq 2 ]] || { cat "$TMP/err.txt" >&2; fail "expected exit 2 from the wide libsvm run, got $rc"; }
grep -q "^error: the model does not fit in memory: $index parameters x 1 replica .*+ checkpoint copies .*(2 x .*: the snapshot and its encoded bytes.*available" "$TMP/err.txt" \
  || { cat "$TMP/err.txt" >&2; fail "expected the refusal naming the checkpoint copies"; }
[[ $(grep -c "^error:" "$TMP/err.txt") -eq 1 && ! -e "$TMP/wide/metrics.jsonl" ]] \
  || fail "expected one error line and no run"
(( $(date +%s) - start < 20 )) || fail "the Hogwild! refusal should come before any allocation"
echo "ok: a Hogwild! model whose checkpoint copies do not fit is refused up front, exit 2"
