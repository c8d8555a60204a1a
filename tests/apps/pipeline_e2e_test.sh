#!/usr/bin/env bash
# End-to-end pipeline parallelism: `dtrain train --strategy pipeline` with 2 stages and 4
# micro-batches follows one worker with train.accumulate_steps = 4 (both schedules, bitwise), its
# summary reports the bubble beside (p-1)/(m+p-1), a resume continues the run, the same run under
# mpirun (2 processes, one stage each), PipeDream (threads and mpirun alike), and bad settings fail
# with one line, exit 2.
# Usage: bash pipeline_e2e_test.sh /path/to/dtrain   (run by ctest as apps.pipeline_e2e_test)
set -euo pipefail
DTRAIN=$(realpath "$1")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$ROOT"

source "$ROOT/tests/apps/e2e_helpers.sh"  # fail, expect_error
CONFIG=examples/synthetic_quick.toml      # MLP: flatten fc1 act1 fc2 -> 2 stages of 2 layers
QUICK=(--set data.synthetic_samples=1024 --quiet)

"$DTRAIN" train --config $CONFIG "${QUICK[@]}" --epochs 2 --set train.accumulate_steps=4 \
  --out "$TMP/single"
for schedule in gpipe 1f1b; do
  "$DTRAIN" train --config $CONFIG "${QUICK[@]}" --epochs 2 --strategy pipeline --workers 2 \
    --micro-batches 4 --schedule $schedule --out "$TMP/$schedule"
done
python3 - "$TMP/single" "$TMP/gpipe" "$TMP/1f1b" <<'PY' || fail "pipeline runs do not follow one worker"
import json, sys
single, *pipes = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
for pipe in pipes:
    assert pipe["final_train_loss"] == single["final_train_loss"], (pipe["final_train_loss"], single["final_train_loss"])
    assert pipe["final_test_accuracy"] == single["final_test_accuracy"], (pipe, single)
    p = pipe["parallel"]
    assert p["strategy"] == "pipeline" and p["stages"] == 2 and p["micro_batches"] == 4, p
    assert abs(p["bubble_predicted"] - 1 / 5) < 1e-12, p
    assert 0 < p["bubble_measured"] < 1, p
    peaks = [s["peak_micro_batches_in_flight"] for s in p["per_stage"]]
    assert peaks == ([4, 4] if p["schedule"] == "gpipe" else [2, 1]), peaks
PY
echo "ok: 2 stages x 4 micro-batches (gpipe, 1f1b) equal one worker accumulating 4, bitwise"

"$DTRAIN" train --config $CONFIG "${QUICK[@]}" --epochs 1 --strategy pipeline --workers 2 \
  --micro-batches 4 --out "$TMP/part"
"$DTRAIN" train --resume "$TMP/part" --epochs 2 --quiet
python3 - "$TMP/1f1b" "$TMP/part" <<'PY' || fail "the resumed pipeline run differs"
import json, sys
a, b = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
assert a["final_train_loss"] == b["final_train_loss"] and a["final_test_accuracy"] == b["final_test_accuracy"], (a, b)
PY
echo "ok: a resumed pipeline run ends bitwise where the uninterrupted one does"

# PipeDream: no flush, an update per micro-batch (8 per step here), weight stashing; drained at the
# epoch's end, so the run ends with a consistent model that evaluates and a summary that says so.
"$DTRAIN" train --config $CONFIG "${QUICK[@]}" --epochs 1 --strategy pipeline --workers 2 \
  --micro-batches 4 --schedule pipedream --out "$TMP/pipedream"
python3 - "$TMP/pipedream" "$TMP/1f1b" <<'PY' || fail "the pipedream run's summary is wrong"
import json, math, sys
a, b = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
p = a["parallel"]
assert p["schedule"] == "pipedream" and p["bubble_predicted"] == 0 and p["pipedream_drains"] >= 1, p
assert [s["peak_micro_batches_in_flight"] for s in p["per_stage"]] == [2, 1], p["per_stage"]
assert p["per_stage"][0]["peak_stash_bytes"] > 0 and p["per_stage"][1]["peak_stash_bytes"] == 0, p
assert math.isfinite(a["final_train_loss"]) and a["final_test_accuracy"] > 0.5, a
assert a["final_train_loss"] != b["final_train_loss"], "pipedream trained the flush schedule's model"
PY
echo "ok: pipedream (asynchronous, weight stashing) trains, drains, reports no flush bubble"

if command -v mpirun > /dev/null; then
  MPIRUN=(mpirun --oversubscribe)
  [[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
  "${MPIRUN[@]}" -np 2 "$DTRAIN" train --config $CONFIG "${QUICK[@]}" --epochs 2 --workers 1 \
    --strategy pipeline --micro-batches 4 --out "$TMP/mpi" || fail "mpirun -np 2 pipeline failed"
  python3 - "$TMP/1f1b" "$TMP/mpi" <<'PY' || fail "the pipeline under mpirun differs from threads"
import json, sys
a, b = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
assert b["parallel"]["transport"] != a["parallel"]["transport"], (a["parallel"], b["parallel"])
assert a["final_train_loss"] == b["final_train_loss"], (a["final_train_loss"], b["final_train_loss"])
PY
  echo "ok: mpirun -np 2 pipeline (one stage per process) equals the 2-thread run"
  "${MPIRUN[@]}" -np 2 "$DTRAIN" train --config $CONFIG "${QUICK[@]}" --epochs 1 --workers 1 \
    --strategy pipeline --micro-batches 4 --schedule pipedream --out "$TMP/mpi-pipedream" ||
    fail "mpirun -np 2 pipedream failed"
  python3 - "$TMP/pipedream" "$TMP/mpi-pipedream" <<'PY' || fail "pipedream under mpirun differs from threads"
import json, sys
a, b = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
assert a["final_train_loss"] == b["final_train_loss"], (a["final_train_loss"], b["final_train_loss"])
assert a["final_test_accuracy"] == b["final_test_accuracy"], (a, b)
PY
  echo "ok: mpirun -np 2 pipedream (messages across step boundaries) equals the 2-thread run"
fi


expect_error "4 layers and cannot be cut into 5 pipeline stages" train --config $CONFIG \
  --strategy pipeline --workers 5 --out "$TMP/bad1"
expect_error "pipeline.schedule" train --config $CONFIG --strategy pipeline --workers 2 \
  --schedule zero-bubble --out "$TMP/bad2"
expect_error "cannot average hybrid.dp = 2 replicas" train --config $CONFIG --strategy hybrid --dp 2 --pp 2 \
  --schedule pipedream --out "$TMP/bad5"
expect_error "pipeline.micro_batches" train --config $CONFIG --strategy pipeline --workers 2 \
  --micro-batches 65 --out "$TMP/bad3"
expect_error "train.accumulate_steps" train --config $CONFIG --strategy pipeline --workers 2 \
  --set train.accumulate_steps=2 --out "$TMP/bad4"
echo "ok: bad pipeline settings fail with one line, exit 2"
