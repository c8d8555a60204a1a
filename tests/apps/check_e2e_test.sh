#!/usr/bin/env bash
# End-to-end of `dtrain check`: 2 ranks as threads and 2 processes under mpirun are ready (exit 0,
# a link table, `verdict: ready`); under mpirun, a process that never starts ends the check at
# --timeout; a --config whose data path is missing names it (exit 2).
# Usage: bash check_e2e_test.sh /path/to/dtrain   (run by ctest as apps.check_e2e_test)
set -euo pipefail
DTRAIN=$(realpath "$1")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$ROOT"
source tests/apps/e2e_helpers.sh

# Ready, or (on a machine loaded by other tests: ctest -j) a slow link and nothing else: the
# measurement is honest, so a busy core can make one direction look slow.
ready_or_only_slow_links() {
  grep -q "^verdict: ready$" "$1" && return 0
  local verdict
  verdict=$(grep "^verdict: " "$1" || true)
  grep -Eq "^verdict: [0-9]+ problems?: slow link" <<< "$verdict" &&
    ! grep -q "data:\|clock\|unreachable\|missing" <<< "$verdict" &&
    { echo "note: $verdict (machine busy)"; return 0; }
  return 1
}
set +e
timeout 60 "$DTRAIN" check --workers 2 > "$TMP/threads.txt"
set -e
ready_or_only_slow_links "$TMP/threads.txt" || { cat "$TMP/threads.txt"; fail "check --workers 2 should be ready"; }
grep -Eq "^ +0 +1 +[0-9.]+ +[0-9.]+$" "$TMP/threads.txt" || { cat "$TMP/threads.txt"; fail "no 0 -> 1 link row"; }
echo "ok: dtrain check --workers 2 is ready"

command -v mpirun > /dev/null || fail "mpirun not found (apt-get install openmpi-bin)"
MPIRUN=(mpirun --oversubscribe)
[[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
set +e
timeout 60 "${MPIRUN[@]}" -np 2 "$DTRAIN" check > "$TMP/mpi.txt" 2> /dev/null
set -e
ready_or_only_slow_links "$TMP/mpi.txt" || { cat "$TMP/mpi.txt"; fail "mpirun -np 2 dtrain check should be ready"; }
grep -q "one process each (mpi transport)" "$TMP/mpi.txt" || fail "mpirun check should say mpi transport"
[[ $(grep -c "^verdict: " "$TMP/mpi.txt") -eq 1 ]] || fail "rank 0 alone should print the verdict"
echo "ok: mpirun -np 2 dtrain check is ready"

# A process of the job that never starts: --timeout is MPI_Init's start-up deadline too (it used
# to be the watchdog's 60-s default), and the line says where the deadline came from.
set +e
start=$(date +%s)
timeout 60 "${MPIRUN[@]}" -np 1 "$DTRAIN" check --timeout 2 : -np 1 sleep 60 > "$TMP/start.txt" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
set -e
[[ $rc -ne 0 ]] || { cat "$TMP/start.txt"; fail "a job whose other process never starts should fail"; }
(( took < 20 )) || { cat "$TMP/start.txt"; fail "the start-up watchdog took ${took} s, not --timeout 2"; }
grep -q "^error: process 0 of 2 (host .*MPI_Init has not returned after 2 s: .*(the deadline is dtrain check --timeout)$" \
  "$TMP/start.txt" || { cat "$TMP/start.txt"; fail "the watchdog should name --timeout as its deadline"; }
echo "ok: mpirun check --timeout 2 with a process that never starts ends in ${took} s naming --timeout"

set +e
timeout 60 "$DTRAIN" check --workers 2 --config examples/fashion_mlp.toml \
  --set data.path=/nonexistent/fmnist > "$TMP/bad.txt" 2>&1
rc=$?
set -e
[[ $rc -eq 2 ]] || { cat "$TMP/bad.txt"; fail "a missing data path should exit 2, got $rc"; }
grep -q "^verdict: 1 problem: ranks 0 (.*), 1 (.*): data: .*/nonexistent/fmnist" "$TMP/bad.txt" \
  || { cat "$TMP/bad.txt"; fail "the verdict should name the missing data path on both ranks"; }
echo "ok: a missing data path is named by the verdict, exit 2"
