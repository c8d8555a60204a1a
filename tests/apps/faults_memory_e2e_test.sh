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
