#!/usr/bin/env bash
# End-to-end: `dtrain train --workers N` (ranks as threads) trains to the single-worker accuracy,
# writes per-rank figures and a trace that parses, `dtrain sweep` writes its table, and bad
# parallel settings fail with one line and exit code 2.
# Usage: bash data_parallel_e2e_test.sh /path/to/dtrain   (run by ctest as apps.data_parallel_e2e_test)
set -euo pipefail
DTRAIN=$(realpath "$1")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$ROOT"

source "$ROOT/tests/apps/e2e_helpers.sh"  # fail, expect_error

# --- Synthetic: 1 worker and 3 workers follow the same trajectory ---------------------------------
"$DTRAIN" train --config examples/synthetic_quick.toml --quiet --out "$TMP/one"
"$DTRAIN" train --config examples/synthetic_quick.toml --quiet --workers 3 --allreduce tree \
  --out "$TMP/three"
python3 - "$TMP/one" "$TMP/three" <<'PY' || fail "3 workers differ from 1 worker"
import json, sys
one, three = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
assert abs(one["final_test_accuracy"] - three["final_test_accuracy"]) <= 0.002, (one, three)
assert abs(one["final_train_loss"] - three["final_train_loss"]) <= 1e-4 * max(1, one["final_train_loss"])
p = three["parallel"]
assert p["ranks"] == 3 and p["allreduce"] == "tree" and len(p["per_rank"]) == 3, p
for row in p["per_rank"]:
    assert row["bytes_sent"] > 0 and row["samples"] > 0, row
trace = json.load(open(sys.argv[2] + "/trace.json"))
pids = {e["pid"] for e in trace["traceEvents"] if e["ph"] == "X"}
assert pids == {0, 1, 2}, pids
assert any(e["cat"] == "comm" for e in trace["traceEvents"] if e["ph"] == "X")
PY
echo "ok: --workers 3 follows the 1-worker run; per-rank figures and trace.json"

# --- dtrain sweep ----------------------------------------------------------------------------------
"$DTRAIN" sweep --config examples/synthetic_quick.toml --workers 1,2 --allreduce ring,halving-doubling \
  --epochs 1 --out "$TMP/sweep" > "$TMP/sweep.txt" 2> "$TMP/sweep.log" \
  || { cat "$TMP/sweep.log" >&2; fail "sweep failed"; }
grep -q "speedup" "$TMP/sweep.txt" || fail "no table from dtrain sweep"
[[ $(wc -l < "$TMP/sweep/sweep.csv") -eq 5 ]] || fail "sweep.csv should have a header and 4 rows"
python3 -c 'import json,sys; assert len(json.load(open(sys.argv[1]))) == 4' "$TMP/sweep/sweep.json" \
  || fail "sweep.json should have 4 rows"
echo "ok: dtrain sweep"

# --- Bad parallel settings: one line, exit code 2 --------------------------------------------------
expect_error "parallel.allreduce" train --config examples/synthetic_quick.toml --allreduce bogus --out "$TMP/bad1"
expect_error "batch_size" train --config examples/synthetic_quick.toml --workers 4 \
  --set train.batch_size=3 --out "$TMP/bad2"
expect_error "needs at least one axis" sweep --config examples/synthetic_quick.toml
echo "ok: bad parallel settings are named"

# --- Fashion-MNIST: 2 workers reach the accuracy of 1 -----------------------------------------------
if [[ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]]; then
  echo "skipped: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)"
  exit 0
fi
"$DTRAIN" train --config examples/fashion_mlp.toml --workers 2 --set train.epochs=3 \
  --set schedule.decay=cosine --quiet --out "$TMP/fmnist"
python3 - "$TMP/fmnist" <<'PY' || fail "2-worker Fashion-MNIST MLP below 85%"
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
assert s["final_test_accuracy"] >= 0.85, s["final_test_accuracy"]
PY
echo "ok: Fashion-MNIST MLP with 2 workers"
