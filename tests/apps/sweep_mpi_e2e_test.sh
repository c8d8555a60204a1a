#!/usr/bin/env bash
# End-to-end: `dtrain sweep --compression` under mpirun (2 processes, one rank each): every process
# runs every point, rank 0 alone prints the table and writes sweep.csv and step_time_model.json,
# and the step-time model measures the link between the processes (P = 2). This is how the model
# is asked across hosts (scripts/two_hosts.sh with COMMAND=sweep; docs/COMPRESSION.md).
# Usage: bash sweep_mpi_e2e_test.sh /path/to/dtrain   (run by ctest as apps.sweep_mpi_e2e_test)
set -euo pipefail
DTRAIN=$(realpath "$1")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$ROOT"
source "$ROOT/tests/apps/e2e_helpers.sh"  # fail
command -v mpirun > /dev/null || { echo "skipped: no mpirun"; exit 0; }
MPIRUN=(mpirun --oversubscribe -np 2)
[[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)

timeout 300 "${MPIRUN[@]}" "$DTRAIN" sweep --config examples/synthetic_quick.toml --workers 1 \
  --epochs 1 --compression none,fp16 --out "$TMP/sweep" > "$TMP/out.txt" 2> "$TMP/err.txt" ||
  { cat "$TMP/err.txt" >&2; fail "mpirun sweep failed"; }
[[ $(grep -c "^predicted step time" "$TMP/out.txt") -eq 1 ]] ||
  { cat "$TMP/out.txt" >&2; fail "expected one step-time table (rank 0's)"; }
[[ $(grep -c "^\[1/2\]" "$TMP/err.txt") -eq 1 ]] ||
  { cat "$TMP/err.txt" >&2; fail "expected one progress line per point (rank 0's)"; }
python3 - "$TMP/sweep" <<'PY' || fail "mpirun sweep results"
import json, sys
model = json.load(open(sys.argv[1] + "/step_time_model.json"))
rows = model["rows"]
assert [r["codec"] for r in rows] == ["none", "fp16"], rows
assert all(r["ranks"] == 2 and r["predicted_step_seconds"] > 0 and r["measured_step_seconds"] > 0 for r in rows), rows
assert model["beta_seconds_per_byte"] > 0 and model["alpha_seconds"] > 0, model
sweep = json.load(open(sys.argv[1] + "/sweep.json"))
assert all(r["ranks"] == 2 for r in sweep), sweep
PY
echo "ok: dtrain sweep under mpirun: rank 0 reports, the step-time model measures the link (P = 2)"
