#!/usr/bin/env bash
# End-to-end local SGD: `dtrain train --strategy local_sgd` with --period 1 follows synchronous
# training, --period 4 sends a quarter of the averaging bytes and still learns, a resume continues
# the run, H = 4 on Fashion-MNIST ends within 1 point of synchronous training, the same runs
# under mpirun (2 processes), and bad settings fail with one line, exit 2.
# Usage: bash local_sgd_e2e_test.sh /path/to/dtrain   (run by ctest as apps.local_sgd_e2e_test)
set -euo pipefail
DTRAIN=$(realpath "$1")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$ROOT"

source "$ROOT/tests/apps/e2e_helpers.sh"  # fail, expect_error
CONFIG=examples/synthetic_quick.toml
QUICK=(--set data.synthetic_samples=2048)   # 32 steps per epoch of 64

"$DTRAIN" train --config $CONFIG "${QUICK[@]}" --epochs 2 --quiet --workers 2 --out "$TMP/sync"
"$DTRAIN" train --config $CONFIG "${QUICK[@]}" --epochs 2 --quiet --workers 2 --strategy local_sgd \
  --period 1 --out "$TMP/h1"
"$DTRAIN" train --config $CONFIG "${QUICK[@]}" --epochs 2 --quiet --workers 2 --strategy local_sgd \
  --period 4 --out "$TMP/h4"
python3 - "$TMP/sync" "$TMP/h1" "$TMP/h4" <<'PY' || fail "local SGD runs do not fit together"
import json, sys
sync, h1, h4 = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
assert abs(sync["final_train_loss"] - h1["final_train_loss"]) <= 1e-4 * max(1, sync["final_train_loss"]), (sync, h1)
assert abs(sync["final_test_accuracy"] - h1["final_test_accuracy"]) <= 0.002, (sync, h1)
p1, p4 = h1["parallel"], h4["parallel"]
assert p1["strategy"] == p4["strategy"] == "local_sgd" and p4["period"] == 4, p4
ratio = p1["averaging_bytes_sent_per_rank_and_step"] / p4["averaging_bytes_sent_per_rank_and_step"]
assert 3.9 <= ratio <= 4.0, ratio   # 32 steps per epoch: 32 averages against 8
for p in (p1, p4):
    m, f = p["averaging_bytes_sent_per_rank_and_step"], p["averaging_bytes_sent_per_rank_and_step_predicted"]
    assert abs(m / f - 1) < 0.02, p   # header round trips add < 2%
assert h4["final_test_accuracy"] > 0.5, h4["final_test_accuracy"]
PY
echo "ok: --period 1 follows synchronous training; --period 4 averages a quarter as often and learns"

# Resume: 1 epoch, then --resume to 2, ends where the uninterrupted H = 4 run ends.
"$DTRAIN" train --config $CONFIG "${QUICK[@]}" --epochs 1 --quiet --workers 2 \
  --strategy local_sgd --period 4 --out "$TMP/part"
"$DTRAIN" train --resume "$TMP/part" --epochs 2 --quiet
python3 - "$TMP/h4" "$TMP/part" <<'PY' || fail "the resumed local SGD run differs"
import json, sys
a, b = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
assert a["final_train_loss"] == b["final_train_loss"] and a["final_test_accuracy"] == b["final_test_accuracy"], (a, b)
PY
echo "ok: a resumed local SGD run ends bitwise where the uninterrupted one does"

# The issue's bar, on real data: Fashion-MNIST, 2 workers, H = 4, 3 epochs within 1 point of
# synchronous training (measured 85.86% against 86.26%, docs/LOCAL_SGD.md).
FMNIST=examples/fashion_mlp_local_sgd.toml
"$DTRAIN" train --config $FMNIST --quiet --strategy allreduce --out "$TMP/fm-sync"
"$DTRAIN" train --config $FMNIST --quiet --strategy local_sgd --period 4 --out "$TMP/fm-h4"
python3 - "$TMP/fm-sync" "$TMP/fm-h4" <<'PY' || fail "local SGD on Fashion-MNIST is more than 1 point below synchronous training"
import json, sys
sync, local = (json.load(open(d + "/summary.json"))["final_test_accuracy"] for d in sys.argv[1:])
print(f"Fashion-MNIST, 3 epochs: synchronous {100 * sync:.2f}%, local SGD H = 4 {100 * local:.2f}%")
assert local >= sync - 0.01 and local > 0.84, (sync, local)
PY
echo "ok: local SGD with H = 4 within 1 point of synchronous training on Fashion-MNIST"

if command -v mpirun > /dev/null; then
  MPIRUN=(mpirun --oversubscribe)
  [[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
  "${MPIRUN[@]}" -np 2 "$DTRAIN" train --config $CONFIG "${QUICK[@]}" --epochs 2 --quiet --workers 1 \
    --strategy local_sgd --period 4 --out "$TMP/mpi" || fail "mpirun -np 2 local SGD failed"
  python3 - "$TMP/h4" "$TMP/mpi" <<'PY' || fail "local SGD under mpirun differs from threads"
import json, sys
a, b = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
assert b["parallel"]["transport"] != a["parallel"]["transport"], (a["parallel"], b["parallel"])
assert abs(a["final_train_loss"] - b["final_train_loss"]) <= 1e-4 * max(1, a["final_train_loss"]), (a, b)
PY
  echo "ok: mpirun -np 2 local SGD follows the 2-thread run"
fi

# Compressed averages: each rank's model delta through top-k 10% with error feedback, at the
# codec's declared bytes (docs/LOCAL_SGD.md, "Compression").
"$DTRAIN" train --config $CONFIG "${QUICK[@]}" --epochs 1 --quiet --workers 2 --strategy local_sgd \
  --period 4 --compression topk:0.1 --out "$TMP/topk"
python3 - "$TMP/topk" <<'PY' || fail "compressed local SGD averages"
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json")); p = s["parallel"]
assert p["compression"] == "topk:0.1" and p["error_feedback"], p
assert p["averaging_bytes_sent_per_rank_and_step"] == p["averaging_bytes_sent_per_rank_and_step_predicted"], p
assert "topk:0.1 allgather" in p["averaging_bytes_formula"], p
assert s["final_test_accuracy"] > 0.5, s["final_test_accuracy"]
PY
expect_error "local_sgd.compression.*PowerSGD" train --config $CONFIG --strategy local_sgd \
  --compression powersgd:2 --out "$TMP/bad_codec"
echo "ok: local SGD averages top-k deltas at the codec's bytes; PowerSGD is refused"

expect_error "local_sgd.period" train --config $CONFIG --strategy local_sgd --set local_sgd.period=0 \
  --out "$TMP/bad1"
expect_error "data_parallel.sync_batch_norm" train --config $CONFIG --strategy local_sgd --workers 2 \
  --sync-bn --out "$TMP/bad2"
expect_error "accepted: allreduce, ps, hogwild, local_sgd\|one of" train --config $CONFIG \
  --strategy gossip --out "$TMP/bad3"
echo "ok: bad local SGD settings are named"
