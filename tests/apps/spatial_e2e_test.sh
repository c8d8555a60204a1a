#!/usr/bin/env bash
# End-to-end spatial parallelism: `dtrain train --strategy spatial --workers 2` splits the rows of
# 64 x 64 synthetic images over 2 ranks through examples/synthetic_spatial.toml's convolutions,
# batch norm and pools and follows one worker to rounding; summary.json's bytes per step equal the
# formula's; a resumed run ends where the uninterrupted one does; the same run under mpirun (2
# processes); the ResNet split through its residual blocks likewise, threads and mpirun, and on the
# grid (--dp 2 --sp 2, threads and mpirun -np 4); splits that cannot be done are one line, exit 2;
# `dtrain bench spatial` prints its rows (no timing asserted).
# Usage: bash spatial_e2e_test.sh /path/to/dtrain   (run by ctest as apps.spatial_e2e_test)
set -euo pipefail
DTRAIN=$(realpath "$1")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$ROOT"

source "$ROOT/tests/apps/e2e_helpers.sh"  # fail, expect_error
# 64 x 64 images: 32 rows per rank, 16 after the first pool, 4 after the second.
SMALL=(--config examples/synthetic_spatial.toml --set data.synthetic_shape=[1,64,64]
       --set data.synthetic_samples=128 --set data.synthetic_test_samples=32
       --set parallel.allreduce=\"ring\" --quiet)

"$DTRAIN" train "${SMALL[@]}" --epochs 2 --out "$TMP/one"
"$DTRAIN" train "${SMALL[@]}" --epochs 2 --strategy spatial --workers 2 --out "$TMP/sp"
python3 - "$TMP/one" "$TMP/sp" <<'PY' || fail "the spatial run does not follow one worker"
import json, sys
one, sp = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
assert abs(sp["final_train_loss"] - one["final_train_loss"]) <= 1e-5 * abs(one["final_train_loss"]), (sp["final_train_loss"], one["final_train_loss"])
p = sp["parallel"]
assert p["strategy"] == "spatial" and p["ranks"] == 2 and p["rows_per_rank"] == 32, p
assert p["bytes_sent_per_step_per_rank"] == p["bytes_sent_per_step_per_rank_predicted"] > 0, p
PY
echo "ok: --strategy spatial --workers 2 follows one worker to 1e-5; bytes per step equal the formula"

"$DTRAIN" train "${SMALL[@]}" --epochs 1 --strategy spatial --workers 2 --out "$TMP/part"
"$DTRAIN" train --resume "$TMP/part" --epochs 2 --quiet
python3 - "$TMP/sp" "$TMP/part" <<'PY' || fail "the resumed spatial run differs"
import json, sys
a, b = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
assert a["final_train_loss"] == b["final_train_loss"] and a["final_test_accuracy"] == b["final_test_accuracy"], (a, b)
PY
echo "ok: a resumed spatial run ends bitwise where the uninterrupted one does"

# parallel.allreduce names the gradient allreduce; the bands' allgather has its one algorithm.
"$DTRAIN" train "${SMALL[@]}" --epochs 1 --strategy spatial --workers 2 \
  --set parallel.allreduce=\"tree\" --out "$TMP/tree" || fail "spatial with allreduce tree failed"
echo "ok: spatial trains with another allreduce algorithm (tree)"

if command -v mpirun > /dev/null; then
  MPIRUN=(mpirun --oversubscribe)
  [[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
  "${MPIRUN[@]}" -np 2 "$DTRAIN" train "${SMALL[@]}" --epochs 2 --strategy spatial \
    --out "$TMP/mpi" || fail "mpirun -np 2 spatial failed"
  python3 - "$TMP/sp" "$TMP/mpi" <<'PY' || fail "spatial under mpirun differs from threads"
import json, sys
a, b = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
assert b["parallel"]["transport"] == "mpi", b["parallel"]
assert a["final_train_loss"] == b["final_train_loss"], (a["final_train_loss"], b["final_train_loss"])
PY
  echo "ok: mpirun -np 2 --strategy spatial equals the threads' run"
fi

# The ResNet (width 2, one block per stage) on 32 x 32 images: split through its residual blocks,
# stride-2 convolutions and global pool, nothing gathered.
RESNET=(--config examples/synthetic_quick.toml --set data.synthetic_shape=[1,32,32]
        --set data.synthetic_samples=64 --set data.synthetic_test_samples=16
        --set model.name=resnet --set model.resnet_width=2 --set train.batch_size=16
        --set parallel.allreduce=\"ring\" --quiet)
"$DTRAIN" train "${RESNET[@]}" --epochs 1 --out "$TMP/res1"
"$DTRAIN" train "${RESNET[@]}" --epochs 1 --strategy spatial --workers 2 --out "$TMP/res2"
python3 - "$TMP/res1" "$TMP/res2" <<'PY' || fail "the spatial ResNet does not follow one worker"
import json, sys
one, sp = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
assert abs(sp["final_train_loss"] - one["final_train_loss"]) <= 1e-5 * abs(one["final_train_loss"]), (sp["final_train_loss"], one["final_train_loss"])
p = sp["parallel"]
assert p["gathered_before"] == "" and p["split_layers"] == 7, p
assert p["bytes_sent_per_step_per_rank"] == p["bytes_sent_per_step_per_rank_predicted"] > 0, p
assert all(r["gather_bytes_sent_per_step"] == 0 for r in p["per_spatial_rank"]), p
PY
echo "ok: the ResNet split through its blocks follows one worker; bytes equal the formula"
if command -v mpirun > /dev/null; then
  "${MPIRUN[@]}" -np 2 "$DTRAIN" train "${RESNET[@]}" --epochs 1 --strategy spatial \
    --out "$TMP/res_mpi" || fail "mpirun -np 2 spatial ResNet failed"
  python3 - "$TMP/res2" "$TMP/res_mpi" <<'PY' || fail "the spatial ResNet under mpirun differs"
import json, sys
a, b = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
assert a["final_train_loss"] == b["final_train_loss"], (a["final_train_loss"], b["final_train_loss"])
assert b["parallel"]["bytes_sent_per_step_per_rank"] == a["parallel"]["bytes_sent_per_step_per_rank"], b
PY
  echo "ok: mpirun -np 2 spatial ResNet equals the threads' run"
fi

# On the grid: --dp 2 --sp 2, 2 replicas of 8 images each split over 2 ranks (4 thread ranks),
# follows one worker accumulating 2 micro-batches of 8 (each replica's batch norms see its 8
# images); every rank's bytes equal the formula; the same under mpirun -np 4.
"$DTRAIN" train "${RESNET[@]}" --epochs 1 --set train.accumulate_steps=2 --out "$TMP/res1acc"
"$DTRAIN" train "${RESNET[@]}" --epochs 1 --dp 2 --sp 2 --out "$TMP/grid"
python3 - "$TMP/res1acc" "$TMP/grid" <<'PY' || fail "--dp 2 --sp 2 does not follow one worker"
import json, sys
one, g = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
assert abs(g["final_train_loss"] - one["final_train_loss"]) <= 1e-5 * abs(one["final_train_loss"]), (g["final_train_loss"], one["final_train_loss"])
p = g["parallel"]
assert p["strategy"] == "hybrid" and p["ranks"] == 4, p
assert p["grid"]["spatial_groups"] == [[0, 1], [2, 3]] and p["grid"]["data_groups"] == [[0, 2], [1, 3]], p["grid"]
for row in p["per_grid_rank"]:
    assert row["model_group_bytes_sent_per_step"] == row["model_group_bytes_predicted_per_step"] > 0, row
    assert row["data_group_bytes_sent_per_step"] == row["data_group_bytes_predicted_per_step"] > 0, row
PY
echo "ok: --dp 2 --sp 2 follows one worker accumulating 2 micro-batches; bytes equal the formula"
if command -v mpirun > /dev/null; then
  "${MPIRUN[@]}" -np 4 "$DTRAIN" train "${RESNET[@]}" --epochs 1 --dp 2 --sp 2 \
    --out "$TMP/grid_mpi" || fail "mpirun -np 4 --dp 2 --sp 2 failed"
  python3 - "$TMP/grid" "$TMP/grid_mpi" <<'PY' || fail "--dp 2 --sp 2 under mpirun differs"
import json, sys
a, b = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
assert b["parallel"]["transport"] == "mpi", b["parallel"]
assert a["final_train_loss"] == b["final_train_loss"], (a["final_train_loss"], b["final_train_loss"])
PY
  echo "ok: mpirun -np 4 --dp 2 --sp 2 equals the threads' run"
fi
expect_error "the grid hybrid.dp x sp x tp x pp = 2 x 2 x 1 x 1 = 4: the grid sets the number of ranks" \
  train "${RESNET[@]}" --dp 2 --sp 2 --workers 8 --out "$TMP/bad_grid"
expect_error "hybrid.sp = 2 with hybrid.tp = 2 and hybrid.pp = 1" train "${RESNET[@]}" --sp 2 --tp 2 \
  --out "$TMP/bad_grid2"
expect_error "on the grid the spatial groups' size is --sp S" train "${RESNET[@]}" --strategy spatial \
  --dp 2 --workers 4 --out "$TMP/bad_grid3"
expect_error "--sp 2 with --strategy data_parallel: --sp alone runs --strategy spatial" \
  train "${RESNET[@]}" --sp 2 --strategy data_parallel --out "$TMP/bad_sp_strategy"
echo "ok: bad spatial grids are one line, exit 2"

expect_error "images of 64 rows do not split evenly over 3 ranks" train "${SMALL[@]}" \
  --strategy spatial --workers 3 --out "$TMP/bad1"
expect_error "no convolution to split" train --config examples/synthetic_quick.toml --quiet \
  --strategy spatial --workers 2 --out "$TMP/bad2"
# 48 rows over 4 ranks: 12 each, 6 after the first pool: not a multiple of the second pool's 4.
expect_error "holds 6 rows here, not a multiple of the pool's 4" train "${SMALL[@]}" \
  --set data.synthetic_shape=[1,48,64] --strategy spatial --workers 4 --out "$TMP/bad3"
echo "ok: splits that cannot be done are one line, exit 2"

"$DTRAIN" bench spatial --resolutions 16 --ranks 1,2 --rounds 1 --iterations 1 --json \
  > "$TMP/bench.json"
python3 - "$TMP/bench.json" <<'PY' || fail "dtrain bench spatial rows"
import json, sys
rows = json.load(open(sys.argv[1]))
assert [r["ranks"] for r in rows] == [1, 2], rows
assert all(r["bench"] == "spatial" and r["forward_ms"] > 0 and r["backward_cpu_ms"] > 0 for r in rows), rows
assert rows[1]["halo_bytes_per_layer_per_neighbour"] == 4 * 4 * 16 * 16, rows
PY
"$DTRAIN" bench spatial --model resnet --resolutions 16 --ranks 1,2 --rounds 1 --iterations 1 \
  --batch 2 --channels 2 --layers 1 --json > "$TMP/bench_resnet.json"
python3 - "$TMP/bench_resnet.json" <<'PY' || fail "dtrain bench spatial --model resnet rows"
import json, sys
rows = json.load(open(sys.argv[1]))
assert [r["ranks"] for r in rows] == [1, 2], rows
# rank 0, forward: 4 B C W x (top rows) per convolution: conv1 (1 x 16) + 2 x (2 x 16) (stage 1)
# + 2 x 16 + 4 x 8 (stage 2; the 1x1 projection has no halo) + 4 x 8 + 8 x 4 (stage 3) = 208.
assert rows[1]["halo_bytes_forward_rank0"] == 4 * 2 * 208, rows
PY
expect_error "resolution 15 does not split evenly over 2 ranks" bench spatial --resolutions 15
echo "ok: dtrain bench spatial"
