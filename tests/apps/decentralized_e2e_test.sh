#!/usr/bin/env bash
# End-to-end decentralized SGD: `dtrain train --strategy decentralized --topology ...` on 4 ranks
# as threads; one-peer exponential sends one model per step (the counters against the formula,
# 1 / (2 (P-1)/P) of a ring allreduce), reports the consensus distance and every replica's
# accuracy; --topology full follows synchronous training; a resume continues bitwise; the same
# under mpirun (2 processes); bad settings fail with one line, exit 2.
# Usage: bash decentralized_e2e_test.sh /path/to/dtrain   (run by ctest as apps.decentralized_e2e_test)
set -euo pipefail
DTRAIN=$(realpath "$1")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$ROOT"

source "$ROOT/tests/apps/e2e_helpers.sh"  # fail, expect_error
CONFIG=examples/synthetic_quick.toml
QUICK=(--set data.synthetic_samples=2048 --quiet)   # 32 steps per epoch of 64

"$DTRAIN" train --config $CONFIG "${QUICK[@]}" --epochs 2 --workers 4 --zero-stage 0 --out "$TMP/sync"
"$DTRAIN" train --config $CONFIG "${QUICK[@]}" --epochs 2 --workers 4 --strategy decentralized --topology full \
  --out "$TMP/full"
"$DTRAIN" train --config $CONFIG "${QUICK[@]}" --epochs 2 --workers 4 --strategy decentralized \
  --topology one-peer-exponential --out "$TMP/onepeer"
"$DTRAIN" train --config $CONFIG "${QUICK[@]}" --epochs 2 --workers 4 --strategy decentralized --topology ring \
  --set decentralized.overlap=true --out "$TMP/ring"
python3 - "$TMP/sync" "$TMP/full" "$TMP/onepeer" "$TMP/ring" <<'PY' || fail "decentralized runs do not fit together"
import json, sys
sync, full, onepeer, ring = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
assert abs(sync["final_train_loss"] - full["final_train_loss"]) <= 1e-4 * max(1, sync["final_train_loss"]), (sync, full)
assert abs(sync["final_test_accuracy"] - full["final_test_accuracy"]) <= 0.002, (sync, full)
assert full["parallel"]["final_consensus_distance"] < 1e-12, full["parallel"]
p, q = onepeer["parallel"], ring["parallel"]
assert p["strategy"] == "decentralized" and p["topology"] == "one-peer-exponential", p
assert p["gossip_bytes_sent_per_rank_and_step"] == p["gossip_bytes_sent_per_rank_and_step_predicted"], p
assert abs(p["gossip_to_ring_allreduce"] - 1 / (2 * 3 / 4)) < 1e-9, p   # one model against 1.5
assert q["gossip_bytes_sent_per_rank_and_step"] == 2 * p["gossip_bytes_sent_per_rank_and_step"], (p, q)
for s in (onepeer, ring):
    par = s["parallel"]
    assert len(par["replica_test_accuracy"]) == 4 and len(par["consensus_distance"]) == 2, par
    assert par["final_consensus_distance"] > 0, par
    assert s["final_test_accuracy"] > 0.5, s["final_test_accuracy"]
    assert all(a > 0.4 for a in par["replica_test_accuracy"]), par
PY
echo "ok: full follows synchronous training; one-peer exponential sends one model per step and learns"

# Resume: 1 epoch, then --resume to 2, ends where the uninterrupted run ends.
"$DTRAIN" train --config $CONFIG "${QUICK[@]}" --epochs 1 --workers 4 --strategy decentralized \
  --topology one-peer-exponential --out "$TMP/part"
"$DTRAIN" train --resume "$TMP/part" --epochs 2 --quiet
python3 - "$TMP/onepeer" "$TMP/part" <<'PY' || fail "the resumed decentralized run differs"
import json, sys
a, b = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
assert a["final_train_loss"] == b["final_train_loss"] and a["final_test_accuracy"] == b["final_test_accuracy"], (a, b)
assert a["parallel"]["replica_test_accuracy"] == b["parallel"]["replica_test_accuracy"], (a, b)
PY
echo "ok: a resumed decentralized run ends bitwise where the uninterrupted one does"

if command -v mpirun > /dev/null; then
  MPIRUN=(mpirun --oversubscribe)
  [[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
  "$DTRAIN" train --config $CONFIG "${QUICK[@]}" --epochs 2 --workers 2 --strategy decentralized \
    --topology ring --out "$TMP/threads2"
  "${MPIRUN[@]}" -np 2 "$DTRAIN" train --config $CONFIG "${QUICK[@]}" --epochs 2 --workers 1 \
    --strategy decentralized --topology ring --out "$TMP/mpi" || fail "mpirun -np 2 decentralized failed"
  python3 - "$TMP/threads2" "$TMP/mpi" <<'PY' || fail "decentralized under mpirun differs from threads"
import json, sys
a, b = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
assert b["parallel"]["transport"] != a["parallel"]["transport"], (a["parallel"], b["parallel"])
assert abs(a["final_train_loss"] - b["final_train_loss"]) <= 1e-4 * max(1, a["final_train_loss"]), (a, b)
assert len(b["parallel"]["replica_test_accuracy"]) == 2, b["parallel"]
PY
  echo "ok: mpirun -np 2 decentralized SGD follows the 2-thread run"
fi

# CHOCO-SGD's compressed gossip: fp16 differences on a ring, at out-degree x the codec's payload.
"$DTRAIN" train --config $CONFIG "${QUICK[@]}" --epochs 1 --workers 4 --strategy decentralized \
  --topology ring --compression fp16 --out "$TMP/choco"
python3 - "$TMP/choco" <<'PY' || fail "compressed gossip"
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json")); p = s["parallel"]
assert p["compression"] == "fp16" and p["consensus_step"] == 1.0, p
assert p["gossip_bytes_sent_per_rank_and_step"] == p["gossip_bytes_sent_per_rank_and_step_predicted"], p
assert s["final_test_accuracy"] > 0.5, s["final_test_accuracy"]
PY
expect_error "static topology" train --config $CONFIG --strategy decentralized --workers 4 \
  --compression fp16 --out "$TMP/bad_choco"
echo "ok: CHOCO-SGD gossips fp16 differences at the codec's bytes; one-peer-exponential is refused"

expect_error "'torus' on 7 ranks.*6 and 8" train --config $CONFIG --strategy decentralized \
  --topology torus --workers 7 --out "$TMP/bad1"
expect_error "decentralized.topology" train --config $CONFIG --strategy decentralized \
  --topology star --out "$TMP/bad2"
expect_error "decentralized.global_average_every" train --config $CONFIG \
  --strategy decentralized --set decentralized.global_average_every=-2 --out "$TMP/bad3"
expect_error "data_parallel.sync_batch_norm" train --config $CONFIG --strategy decentralized \
  --workers 2 --sync-bn --out "$TMP/bad4"
echo "ok: bad decentralized settings are named"
