#!/usr/bin/env bash
# End-to-end tensor parallelism: `dtrain train --tp 2` splits a small GPT over 2 ranks (attention
# by heads, MLP by hidden units) and follows one worker to rounding; summary.json reports the
# allreduce bytes per step beside 4 L x 2 (P-1)/P x 4 B T d (equal here); a resumed run ends where
# the uninterrupted one does; the same run under mpirun (2 processes); bad splits are one line,
# exit 2.
# Usage: bash tensor_e2e_test.sh /path/to/dtrain   (run by ctest as apps.tensor_e2e_test)
set -euo pipefail
DTRAIN=$(realpath "$1")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$ROOT"

source "$ROOT/tests/apps/e2e_helpers.sh"  # fail, expect_error
[[ -d /usr/share/games/fortunes ]] || fail "no /usr/share/games/fortunes: apt-get install fortunes"
CONFIG=examples/fortunes_gpt.toml
# 2 blocks of width 32 with 4 heads, context 32: 20 steps of 16 windows per epoch.
SMALL=(--set model.gpt_layers=2 --set model.gpt_dim=32 --set model.gpt_heads=4 --set data.block=32
       --set data.text_windows=320 --set data.text_test_windows=32 --set train.batch_size=16
       --set train.eval_every_steps=0 --set parallel.allreduce=\"ring\" --quiet)

"$DTRAIN" train --config $CONFIG "${SMALL[@]}" --epochs 2 --out "$TMP/one"
"$DTRAIN" train --config $CONFIG "${SMALL[@]}" --epochs 2 --tp 2 --out "$TMP/tp"
python3 - "$TMP/one" "$TMP/tp" <<'PY' || fail "tensor-parallel run does not follow one worker"
import json, sys
one, tp = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
assert abs(tp["final_train_loss"] - one["final_train_loss"]) <= 1e-5 * abs(one["final_train_loss"]), (tp["final_train_loss"], one["final_train_loss"])
p = tp["parallel"]
assert p["strategy"] == "tensor_parallel" and p["ranks"] == 2, p
b, t, d, layers, ranks = 16, 32, 32, 2, 2
formula = 4 * layers * 2 * (ranks - 1) / ranks * 4 * b * t * d
assert p["bytes_sent_per_step_per_rank_predicted"] == formula, (p, formula)
assert p["bytes_sent_per_step_per_rank"] == formula, (p, formula)
assert p["collectives_per_step"] == 4 * layers, p
PY
echo "ok: --tp 2 follows one worker to 1e-5; bytes per step equal 4 L x 2 (P-1)/P x 4 B T d"

"$DTRAIN" train --config $CONFIG "${SMALL[@]}" --epochs 1 --tp 2 --out "$TMP/part"
"$DTRAIN" train --resume "$TMP/part" --epochs 2 --quiet
python3 - "$TMP/tp" "$TMP/part" <<'PY' || fail "the resumed tensor-parallel run differs"
import json, sys
a, b = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
assert a["final_train_loss"] == b["final_train_loss"] and a["final_test_accuracy"] == b["final_test_accuracy"], (a, b)
PY
echo "ok: a resumed tensor-parallel run ends bitwise where the uninterrupted one does"

# The MLP in seed 003's all-gather form (tensor_parallel.style = "auto" picks it).
QUICK=(--config examples/synthetic_quick.toml --set data.synthetic_samples=1024
       --set parallel.allreduce=\"ring\" --quiet)
"$DTRAIN" train "${QUICK[@]}" --epochs 2 --out "$TMP/mlp-one"
"$DTRAIN" train "${QUICK[@]}" --epochs 2 --tp 2 --out "$TMP/mlp-tp"
python3 - "$TMP/mlp-one" "$TMP/mlp-tp" <<'PY' || fail "the all-gather MLP does not follow one worker"
import json, sys
one, tp = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
assert abs(tp["final_train_loss"] - one["final_train_loss"]) <= 1e-5 * abs(one["final_train_loss"]), (tp["final_train_loss"], one["final_train_loss"])
p = tp["parallel"]
assert p["style"] == "auto" and p["split"].startswith("allgather"), p
assert p["bytes_sent_per_step_per_rank"] == p["bytes_sent_per_step_per_rank_predicted"] > 0, p
PY
echo "ok: --tp 2 on the MLP (all-gather form) follows one worker; bytes equal seed 003's formula"

if command -v mpirun > /dev/null; then
  MPIRUN=(mpirun --oversubscribe)
  [[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
  "${MPIRUN[@]}" -np 2 "$DTRAIN" train --config $CONFIG "${SMALL[@]}" --epochs 2 --workers 1 \
    --strategy tensor_parallel --out "$TMP/mpi" || fail "mpirun -np 2 tensor_parallel failed"
  python3 - "$TMP/tp" "$TMP/mpi" <<'PY' || fail "tensor_parallel under mpirun differs from threads"
import json, sys
a, b = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
assert b["parallel"]["transport"] != a["parallel"]["transport"], (a["parallel"], b["parallel"])
assert abs(a["final_train_loss"] - b["final_train_loss"]) <= 1e-6 * abs(a["final_train_loss"]), (a["final_train_loss"], b["final_train_loss"])
PY
  echo "ok: mpirun -np 2 tensor_parallel (one rank per process) equals the 2-thread run"
fi

expect_error "model.heads = 4 cannot be split over 3 ranks" train --config $CONFIG "${SMALL[@]}" \
  --tp 3 --out "$TMP/bad1"
expect_error "does not split model.name = \"mlp\"" train --config examples/synthetic_quick.toml \
  --quiet --tp 2 --set tensor_parallel.style=\"megatron\" --out "$TMP/bad2"
expect_error "tensor_parallel.style" train --config $CONFIG "${SMALL[@]}" --tp 2 \
  --set tensor_parallel.style=\"zigzag\" --out "$TMP/bad3"
echo "ok: bad tensor-parallel settings fail with one line, exit 2"
