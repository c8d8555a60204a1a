#!/usr/bin/env bash
# End-to-end process grid: `dtrain train --dp 2 --pp 2` and `--dp 2 --tp 2` on 4 thread ranks
# follow one worker to 1e-5 and report, for every rank, bytes per step equal to the formula
# (pipeline p2p + 2 (D-1)/D x 4 N_stage); the 3-D grid `--tp 2 --pp 2 --dp 2` on 8 thread ranks
# follows one worker too, and under mpirun -np 8 equals the threads'; bad grids are one line, exit 2.
# Usage: bash hybrid_e2e_test.sh /path/to/dtrain   (run by ctest as apps.hybrid_e2e_test)
set -euo pipefail
DTRAIN=$(realpath "$1")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$ROOT"

source "$ROOT/tests/apps/e2e_helpers.sh"  # fail, expect_error
QUICK=(--config examples/synthetic_quick.toml --set data.synthetic_samples=1024
       --set parallel.allreduce=\"ring\" --epochs 1 --quiet)
"$DTRAIN" train "${QUICK[@]}" --out "$TMP/one"
"$DTRAIN" train "${QUICK[@]}" --dp 2 --pp 2 --out "$TMP/dp-pp"
"$DTRAIN" train "${QUICK[@]}" --dp 2 --tp 2 --out "$TMP/dp-tp"
python3 - "$TMP/one" "$TMP/dp-pp" "$TMP/dp-tp" <<'PY' || fail "a grid does not follow one worker"
import json, sys
one, *grids = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
for g in grids:
    assert abs(g["final_train_loss"] - one["final_train_loss"]) <= 1e-5 * abs(one["final_train_loss"]), (g["final_train_loss"], one["final_train_loss"])
    p = g["parallel"]
    assert p["strategy"] == "hybrid" and p["ranks"] == 4, p
    for row in p["per_grid_rank"]:
        assert row["model_group_bytes_sent_per_step"] == row["model_group_bytes_predicted_per_step"] > 0, row
        assert row["data_group_bytes_sent_per_step"] == row["data_group_bytes_predicted_per_step"] > 0, row
assert grids[0]["parallel"]["grid"]["data_groups"] == [[0, 1], [2, 3]], grids[0]["parallel"]["grid"]
assert grids[1]["parallel"]["grid"]["tensor_groups"] == [[0, 1], [2, 3]], grids[1]["parallel"]["grid"]
PY
echo "ok: --dp 2 --pp 2 and --dp 2 --tp 2 follow one worker; bytes per step equal the formula"

# The 3-D grid: 2 replicas of a 2-stage pipeline of 2-way tensor splits, 8 thread ranks.
"$DTRAIN" train "${QUICK[@]}" --tp 2 --pp 2 --dp 2 --out "$TMP/3d"
python3 - "$TMP/one" "$TMP/3d" <<'PY' || fail "the 3-D grid does not follow one worker"
import json, sys
one, g = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
assert abs(g["final_train_loss"] - one["final_train_loss"]) <= 1e-5 * abs(one["final_train_loss"]), (g["final_train_loss"], one["final_train_loss"])
p = g["parallel"]
assert p["ranks"] == 8, p
for row in p["per_grid_rank"]:
    assert row["model_group_bytes_sent_per_step"] == row["model_group_bytes_predicted_per_step"] > 0, row
    assert row["data_group_bytes_sent_per_step"] == row["data_group_bytes_predicted_per_step"] > 0, row
grid = p["grid"]
assert grid["tensor_groups"] == [[0, 1], [2, 3], [4, 5], [6, 7]], grid
assert grid["data_groups"] == [[0, 2], [1, 3], [4, 6], [5, 7]], grid
assert grid["pipeline_groups"] == [[0, 4], [1, 5], [2, 6], [3, 7]], grid
PY
echo "ok: --tp 2 --pp 2 --dp 2 (8 thread ranks) follows one worker; bytes per step equal the formula"

if command -v mpirun > /dev/null; then
  MPIRUN=(mpirun --oversubscribe)
  [[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
  # One process per rank of the 3-D grid (it covers the dp x pp path too): the same arithmetic
  # as the 8 thread ranks, so the same loss.
  "${MPIRUN[@]}" -np 8 "$DTRAIN" train "${QUICK[@]}" --tp 2 --pp 2 --dp 2 --out "$TMP/mpi" ||
    fail "mpirun -np 8 --tp 2 --pp 2 --dp 2 failed"
  python3 - "$TMP/3d" "$TMP/mpi" <<'PY' || fail "the grid under mpirun differs from threads"
import json, sys
a, b = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
assert b["parallel"]["transport"] != a["parallel"]["transport"], (a["parallel"], b["parallel"])
assert a["final_train_loss"] == b["final_train_loss"], (a["final_train_loss"], b["final_train_loss"])
PY
  echo "ok: mpirun -np 8 --tp 2 --pp 2 --dp 2 equals the 8-thread run"
fi

expect_error "2 x 1 x 2 = 4: the grid sets the number of ranks" train "${QUICK[@]}" --dp 2 --pp 2 \
  --workers 8 --out "$TMP/bad1"
expect_error "layer fc1 has 64 outputs (model.hidden), which cannot be split over 3 ranks" train "${QUICK[@]}" \
  --tp 3 --pp 2 --out "$TMP/bad2"
echo "ok: bad grids are one-line errors"
