#!/usr/bin/env bash
# End-to-end federated averaging: `dtrain train --strategy federated` with 40 simulated clients on
# 2 ranks as threads (Dirichlet partition, injected client failures): the run folder holds
# partition.json and one round record per round, bytes match participants x 4N, failed clients are
# counted, the model learns; 1 rank trains what 2 ranks train; the same under mpirun (2 processes);
# bad settings fail with one line, exit 2.
# Usage: bash federated_e2e_test.sh /path/to/dtrain   (run by ctest as apps.federated_e2e_test)
set -euo pipefail
DTRAIN=$(realpath "$1")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$ROOT"

source "$ROOT/tests/apps/e2e_helpers.sh"  # fail, expect_error
CONFIG=examples/synthetic_quick.toml
COMMON=(--strategy federated --quiet --set data.synthetic_samples=2000 --clients 40
        --client-fraction 0.25 --local-epochs 2 --partition dirichlet:0.5
        --set train.batch_size=10 --set optim.momentum=0)
FED=("${COMMON[@]}" --rounds 8)

"$DTRAIN" train --config $CONFIG "${FED[@]}" --workers 2 --set federated.client_failure=0.2 \
  --out "$TMP/two"
"$DTRAIN" train --config $CONFIG "${FED[@]}" --workers 1 --set federated.client_failure=0.2 \
  --out "$TMP/one"
python3 - "$TMP/two" "$TMP/one" <<'PY' || fail "federated runs do not report what they should"
import json, sys
two, one = sys.argv[1:]
s = json.load(open(two + "/summary.json"))
p = s["parallel"]
n = p["model_values"]
assert p["strategy"] == "federated" and p["clients"] == 40 and p["clients_per_round"] == 10, p
assert p["partition"] == "dirichlet:0.5" and p["ranks"] == 2, p
assert p["bytes_down"] == 8 * 10 * 4 * n == p["bytes_down_predicted"], p
assert p["bytes_up"] == p["completed_clients"] * 4 * n, p
assert p["failed_clients"] > 0 and p["failed_clients"] + p["completed_clients"] == 80, p
rounds = [json.loads(line) for line in open(two + "/metrics.jsonl")]
assert [r["round"] for r in rounds] == list(range(1, 9)), rounds
assert all(r["bytes_down"] == 10 * 4 * n and r["bytes_up"] == r["completed"] * 4 * n for r in rounds)
assert sum(r["failed"] for r in rounds) == p["failed_clients"], rounds
assert s["final_test_accuracy"] > 0.6, s["final_test_accuracy"]
part = json.load(open(two + "/partition.json"))
assert len(part["sizes"]) == 40 and sum(part["sizes"]) == 2000, part["sizes"]
assert [sum(row) for row in part["label_histogram"]] == part["sizes"]
o = json.load(open(one + "/summary.json"))
assert abs(o["final_test_loss"] - s["final_test_loss"]) < 1e-5, (o["final_test_loss"], s["final_test_loss"])
assert o["parallel"]["failed_clients"] == p["failed_clients"]
PY
echo "ok: 40 clients on 2 ranks: round records, bytes = participants x 4N, failures dropped and counted"

if command -v mpirun > /dev/null; then
  MPIRUN=(mpirun --oversubscribe)
  [[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
  "${MPIRUN[@]}" -np 2 "$DTRAIN" train --config $CONFIG "${FED[@]}" --workers 1 \
    --set federated.client_failure=0.2 --out "$TMP/mpi" || fail "mpirun -np 2 federated failed"
  python3 - "$TMP/two" "$TMP/mpi" <<'PY' || fail "federated under mpirun differs from threads"
import json, sys
a, b = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
assert abs(a["final_test_loss"] - b["final_test_loss"]) < 1e-5, (a["final_test_loss"], b["final_test_loss"])
assert b["parallel"]["ranks"] == 2, b["parallel"]
PY
  echo "ok: mpirun -np 2 federated averaging trains what 2 threads train"
fi

# Compressed uploads and downloads: fp16 both ways, bytes = the codec's sizes.
"$DTRAIN" train --config $CONFIG "${FED[@]}" --workers 2 --compression fp16 \
  --set federated.compress_download=true --out "$TMP/fp16"
python3 - "$TMP/fp16" <<'PY' || fail "compressed federated averaging"
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json")); p = s["parallel"]
n = s["parameters"]
assert p["compression"] == "fp16" and p["compress_download"], p
assert p["upload_bytes_per_client"] == p["download_bytes_per_client"] == 2 * n, p
assert p["bytes_up"] == p["completed_clients"] * 2 * n and p["bytes_down"] == p["bytes_down_predicted"], p
assert s["final_test_accuracy"] > 0.6, s["final_test_accuracy"]
PY
echo "ok: federated uploads and downloads through fp16 at 2N bytes each"

# Checkpoints: the 8 rounds run as 5, then --resume --rounds 8 on 1 rank: the model the
# uninterrupted 2-rank run ended with (to f64 rounding: another rank count), one record per round.
"$DTRAIN" train --config $CONFIG "${COMMON[@]}" --rounds 5 --workers 2 \
  --set federated.client_failure=0.2 --out "$TMP/cut"
"$DTRAIN" train --resume "$TMP/cut" --rounds 8 --workers 1 --quiet
python3 - "$TMP/two" "$TMP/cut" <<'PY' || fail "a resumed federated run differs from the whole one"
import json, sys
whole, cut = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
assert cut["resumed_from_epoch"] == 5 and cut["parallel"]["rounds"] == 8, cut
for key in ("bytes_down", "bytes_up", "completed_clients", "failed_clients"):
    assert cut["parallel"][key] == whole["parallel"][key], key
assert abs(cut["final_test_accuracy"] - whole["final_test_accuracy"]) < 1e-3
rounds = [json.loads(line)["round"] for line in open(sys.argv[2] + "/metrics.jsonl")]
assert rounds == list(range(1, 9)), rounds
PY
expect_error "nothing left to train; pass --rounds N with N > 8" train --resume "$TMP/cut"
echo "ok: a federated run resumes from its checkpoint on another number of ranks"

expect_error "federated.client_fraction' = 1.5.*0 < value <= 1" train --config $CONFIG \
  --strategy federated --client-fraction 1.5 --out "$TMP/bad1"
expect_error "federated.client_fraction' = 0.0 in" train --config $CONFIG --strategy federated \
  --client-fraction 0 --out "$TMP/bad1b"
expect_error "alpha = 0 must be > 0" train --config $CONFIG --strategy federated \
  --partition dirichlet:0 --out "$TMP/bad2"
expect_error "alpha = -1 must be > 0" train --config $CONFIG --strategy federated \
  --set federated.partition=dirichlet:-1 --out "$TMP/bad2b"
expect_error "federated.clients = 3 is fewer than the 4 ranks" train --config $CONFIG \
  --strategy federated --clients 3 --workers 4 --out "$TMP/bad3"
expect_error "5000 clients but the training set has 4096 samples" train --config $CONFIG \
  --strategy federated --set federated.clients=5000 --out "$TMP/bad4"
expect_error "federated.compress_download' = true .*'federated.compression' = \"none\"" train \
  --config $CONFIG --strategy federated --set federated.compress_download=true --out "$TMP/bad5"
echo "ok: bad federated settings fail with one line"
