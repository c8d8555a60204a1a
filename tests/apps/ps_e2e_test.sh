#!/usr/bin/env bash
# End-to-end parameter servers: `dtrain train --strategy parameter_server` as threads with bsp
# (the same final loss as allreduce training; the first run uses the old name `ps`, which warns), async and ssp (staleness histograms in summary.json, ssp within its
# bound), a backup worker under a straggler, the same under `mpirun -np 3` (2 worker processes, 1
# server process) and `mpirun -np 2 --colocate-servers` (each rank both worker and server),
# configuration mistakes named with exit code 2, and docs/PS.md's async example (6 workers, 2
# servers) training the Fashion-MNIST MLP without diverging.
# Usage: bash ps_e2e_test.sh /path/to/dtrain   (run by ctest as apps.ps_e2e_test)
set -euo pipefail
DTRAIN=$(realpath "$1")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$ROOT"

fail() { echo "FAIL: $*" >&2; exit 1; }
export DTRAIN_COMM_TIMEOUT_MS=20000
CONFIG=examples/synthetic_quick.toml

"$DTRAIN" train --config $CONFIG --quiet --workers 2 --out "$TMP/allreduce"
"$DTRAIN" train --config $CONFIG --quiet --workers 2 --strategy ps --servers 2 --out "$TMP/bsp" \
  2> "$TMP/bsp.err"
grep -q 'parallel.strategy = "ps" .* is the old name of "parameter_server"' "$TMP/bsp.err" ||
  fail "no warning for the old name ps: $(cat "$TMP/bsp.err")"
"$DTRAIN" train --config $CONFIG --quiet --workers 3 --strategy parameter_server --consistency async \
  --set optim.momentum=0.5 --out "$TMP/async"
"$DTRAIN" train --config $CONFIG --quiet --workers 3 --strategy parameter_server --consistency ssp \
  --staleness 2 \
  --set optim.momentum=0.5 --straggler rank=1,slowdown=3 --out "$TMP/ssp"
"$DTRAIN" train --config $CONFIG --quiet --workers 3 --strategy parameter_server --backup-workers 1 \
  --straggler rank=2,slowdown=4 --out "$TMP/backup"
python3 - "$TMP" <<'PY' || fail "parameter-server runs"
import json, sys
runs = {name: json.load(open(f"{sys.argv[1]}/{name}/summary.json"))
        for name in ("allreduce", "bsp", "async", "ssp", "backup")}
ar, bsp = runs["allreduce"], runs["bsp"]
assert abs(bsp["final_train_loss"] - ar["final_train_loss"]) <= 1e-4 * max(1, ar["final_train_loss"]), (bsp["final_train_loss"], ar["final_train_loss"])
assert bsp["parallel"]["strategy"] == "parameter_server" and bsp["parallel"]["servers"] == 2
for name in ("async", "ssp"):
    p = runs[name]["parallel"]
    assert p["consistency"] == name and sum(p["staleness_histogram"]) > 0, p
    assert runs[name]["final_test_accuracy"] > 0.5, runs[name]["final_test_accuracy"]
assert runs["ssp"]["parallel"]["max_staleness"] <= 2, runs["ssp"]["parallel"]["max_staleness"]
b = runs["backup"]["parallel"]
assert b["backup_workers"] == 1 and b["gradients_dropped"] > 0, b
PY
echo "ok: bsp follows allreduce; async and ssp train and report staleness; a backup worker drops late gradients"

if command -v mpirun > /dev/null; then
  MPIRUN=(mpirun --oversubscribe)
  [[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
  timeout 120 "${MPIRUN[@]}" -np 3 "$DTRAIN" train --config $CONFIG --quiet --strategy parameter_server \
    --out "$TMP/mpi_bsp" || fail "mpirun -np 3 --strategy parameter_server failed"
  timeout 120 "${MPIRUN[@]}" -np 3 "$DTRAIN" train --config $CONFIG --quiet --strategy parameter_server \
    --consistency async --set optim.momentum=0.5 --out "$TMP/mpi_async" || fail "mpirun async failed"
  timeout 120 "${MPIRUN[@]}" -np 2 "$DTRAIN" train --config $CONFIG --quiet --strategy parameter_server \
    --colocate-servers --servers 2 --out "$TMP/mpi_colocated" || fail "mpirun --colocate-servers failed"
  python3 - "$TMP" <<'PY' || fail "mpirun parameter-server runs"
import json, sys
ar = json.load(open(f"{sys.argv[1]}/allreduce/summary.json"))
bsp = json.load(open(f"{sys.argv[1]}/mpi_bsp/summary.json"))
asy = json.load(open(f"{sys.argv[1]}/mpi_async/summary.json"))
assert bsp["parallel"]["workers"] == 2 and bsp["parallel"]["servers"] == 1, bsp["parallel"]
assert abs(bsp["final_train_loss"] - ar["final_train_loss"]) <= 1e-4 * max(1, ar["final_train_loss"])
assert asy["parallel"]["consistency"] == "async" and asy["final_test_accuracy"] > 0.5
co = json.load(open(f"{sys.argv[1]}/mpi_colocated/summary.json"))
assert co["parallel"]["workers"] == 2 and co["parallel"]["servers"] == 2, co["parallel"]
assert abs(co["final_train_loss"] - ar["final_train_loss"]) <= 1e-4 * max(1, ar["final_train_loss"])
PY
  echo "ok: mpirun -np 3 runs 2 workers and 1 server (bsp follows allreduce; async trains);"
  echo "    mpirun -np 2 --colocate-servers: 2 ranks that are both worker and server"
  # An async worker asleep past the deadline is counted dead; it wakes after the servers have
  # finished and rank 0 has written the results (one epoch takes well under the 8-s sleep, even on
  # a loaded machine): its failed push is a warning, the job exits 0.
  timeout 120 env -u DTRAIN_COMM_TIMEOUT_MS "${MPIRUN[@]}" -np 3 "$DTRAIN" train --config $CONFIG \
    --quiet --strategy parameter_server --consistency async --set optim.momentum=0.5 --epochs 1 \
    --straggler rank=1,delay_ms=8000 --set parallel.comm_timeout_seconds=1 \
    --out "$TMP/mpi_evicted" > "$TMP/mpi_evicted.log" 2>&1 ||
    { cat "$TMP/mpi_evicted.log" >&2; fail "mpirun: a worker waking after the run failed the job"; }
  grep -q "after rank 0 had finished the run and written its results" "$TMP/mpi_evicted.log" ||
    { cat "$TMP/mpi_evicted.log" >&2; fail "mpirun: no warning from the worker that woke late"; }
  [[ -f "$TMP/mpi_evicted/summary.json" ]] || fail "mpirun: no summary.json"
  echo "ok: mpirun: an async worker counted dead that wakes after the run warns; the job exits 0"
fi

expect_error() {  # expect_error PATTERN ARGS...: exit code 2 and PATTERN on stderr
  local pattern=$1
  shift
  set +e
  "$DTRAIN" train --config $CONFIG --quiet --out "$TMP/bad" "$@" 2> "$TMP/err"
  local rc=$?
  set -e
  [[ $rc -eq 2 ]] || { cat "$TMP/err" >&2; fail "'$*' exited $rc, expected 2"; }
  grep -q -- "$pattern" "$TMP/err" || { cat "$TMP/err" >&2; fail "'$*' should say '$pattern'"; }
  rm -rf "$TMP/bad"
}
expect_error "needs parallel.strategy = \"parameter_server\"" --workers 3 --backup-workers 1
expect_error "must be below the 2 workers" --workers 2 --strategy parameter_server --backup-workers 2
expect_error "needs parameter_server.consistency = \"async\"" --workers 2 --strategy parameter_server --pull-every 3
expect_error "consistency" --workers 2 --strategy parameter_server --consistency eventual
expect_error "cannot each live on a worker" --workers 1 --strategy parameter_server --colocate-servers --servers 2
echo "ok: configuration mistakes are named"

# --- docs/PS.md's example: Downpour with 6 workers and 2 servers on Fashion-MNIST ------------------
# Each push is a 1/W share of a global batch; when every push was a full step, this diverged to NaN
# within the first epoch.
if [[ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]]; then
  echo "skipped: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)"
  exit 0
fi
"$DTRAIN" train --config examples/fashion_mlp_ps.toml --consistency async --servers 2 --workers 6 \
  --epochs 1 --quiet --out "$TMP/async6" || fail "async with 6 workers and 2 servers failed"
python3 - "$TMP/async6" <<'PY' || fail "async with 6 workers below 75% after one epoch"
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
assert s["parallel"]["workers"] == 6 and s["parallel"]["servers"] == 2, s["parallel"]
assert s["final_test_accuracy"] >= 0.75, s["final_test_accuracy"]
PY
echo "ok: async with 6 workers and 2 servers trains Fashion-MNIST"
