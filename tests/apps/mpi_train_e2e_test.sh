#!/usr/bin/env bash
# End-to-end under mpirun: `mpirun -np 2 dtrain train` (one rank per process, MPI transport) and
# `mpirun -np 2 dtrain train --workers 2` (2 x 2 ranks, threads and processes, with the
# hierarchical allreduce) follow the one-worker run, and so does `mpirun -np 2 dtrain train
# --workers 2 --zero-stage 1` (the optimizer sharded over 4 ranks, threads and processes); a
# process that fails stops the whole job at once with its error, not after a deadline.
# Usage: bash mpi_train_e2e_test.sh /path/to/dtrain   (run by ctest as apps.mpi_train_e2e_test)
set -euo pipefail
DTRAIN=$(realpath "$1")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$ROOT"

fail() { echo "FAIL: $*" >&2; exit 1; }
command -v mpirun > /dev/null || fail "mpirun not found (apt-get install openmpi-bin)"
MPIRUN=(mpirun --oversubscribe)
[[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
export DTRAIN_COMM_TIMEOUT_MS=20000

"$DTRAIN" train --config examples/synthetic_quick.toml --quiet --out "$TMP/one"
timeout 120 "${MPIRUN[@]}" -np 2 "$DTRAIN" train --config examples/synthetic_quick.toml --quiet \
  --allreduce halving-doubling --out "$TMP/procs" || fail "mpirun -np 2 failed"
timeout 120 "${MPIRUN[@]}" -np 2 "$DTRAIN" train --config examples/synthetic_quick.toml --quiet \
  --workers 2 --allreduce hierarchical --out "$TMP/hybrid" || fail "mpirun -np 2 --workers 2 failed"
timeout 120 "${MPIRUN[@]}" -np 2 "$DTRAIN" train --config examples/synthetic_quick.toml --quiet \
  --workers 2 --zero-stage 1 --out "$TMP/zero" || fail "mpirun -np 2 --workers 2 --zero-stage 1 failed"
python3 - "$TMP/one" "$TMP/procs" "$TMP/hybrid" "$TMP/zero" <<'PY' || fail "MPI runs differ from the 1-worker run"
import json, sys
one, procs, hybrid, zero = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
for run, ranks, transport in ((procs, 2, "mpi"), (hybrid, 4, "hybrid"), (zero, 4, "hybrid")):
    p = run["parallel"]
    assert p["ranks"] == ranks and p["transport"] == transport, p
    assert abs(run["final_train_loss"] - one["final_train_loss"]) <= 1e-4 * max(1, one["final_train_loss"]), (run["final_train_loss"], one["final_train_loss"])
    assert abs(run["final_test_accuracy"] - one["final_test_accuracy"]) <= 0.002
PY
echo "ok: mpirun -np 2 (mpi), -np 2 --workers 2 (hybrid) and the same with ZeRO-1 follow the 1-worker run"

# A process that fails (its data path does not exist on "its host") stops the job promptly.
start=$(date +%s)
set +e
timeout 60 "${MPIRUN[@]}" -np 2 bash -c \
  'if [[ $OMPI_COMM_WORLD_RANK == 1 ]]; then extra=(--set data.path=/nonexistent); fi
   exec "$0" train --config examples/fashion_mlp.toml --quiet --out "$1" "${extra[@]}"' \
  "$DTRAIN" "$TMP/bad" > "$TMP/bad.out" 2> "$TMP/bad.err"
rc=$?
set -e
elapsed=$(( $(date +%s) - start ))
[[ $rc -ne 0 && $rc -ne 124 ]] || { cat "$TMP/bad.err" >&2; fail "a failing process should fail the job (rc $rc)"; }
(( elapsed < 30 )) || fail "the job took ${elapsed}s to stop; expected well before the deadline"
grep -q "error: process 1 of 2" "$TMP/bad.err" || { cat "$TMP/bad.err" >&2; fail "the error should name process 1"; }
echo "ok: a failing process stops the job in ${elapsed}s, naming itself"
