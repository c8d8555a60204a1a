#!/usr/bin/env bash
# Kill a peer: rank 1 of an `mpirun -np 3` job dies by SIGKILL in the middle of an allreduce
# (kill_peer.cc). Asserts that mpirun exits non-zero within LIMIT seconds (the survivors' deadline
# is 120 s, so it is mpirun that ends them, not a timeout) and that no rank is left running.
# Usage: kill_peer_test.sh MPIRUN PROGRAM [MPIRUN FLAGS...]
set -uo pipefail
MPIRUN="$1"
PROGRAM="$2"
shift 2
LIMIT=60
TOKEN="dtrain-kill-peer-$$-$RANDOM"

start=$(date +%s)
timeout --kill-after=10 "$LIMIT" "$MPIRUN" -np 3 "$@" "$PROGRAM" "$TOKEN"
status=$?
elapsed=$(( $(date +%s) - start ))
echo "mpirun exited with status $status after ${elapsed} s"

fail=0
if [[ $status -eq 0 ]]; then
  echo "FAIL: mpirun exited 0 although a rank was killed"; fail=1
fi
# (mpirun itself exits 137 = 128 + SIGKILL for a rank killed by SIGKILL, so the time tells a
# timeout apart.)
if [[ $elapsed -ge $LIMIT ]]; then
  echo "FAIL: mpirun was still running after ${LIMIT} s (timeout ended it)"; fail=1
fi
# No rank may outlive mpirun (give the process table a moment to settle).
for _ in $(seq 50); do
  pgrep -f "$TOKEN" >/dev/null || break
  sleep 0.1
done
left=$(pgrep -f "$TOKEN" || true)
if [[ -n "$left" ]]; then
  echo "FAIL: ranks still running after mpirun exited: $left"
  kill -9 $left 2>/dev/null || true
  fail=1
fi
[[ $fail -eq 0 ]] && echo "PASS: the job ended (status $status, ${elapsed} s) and no rank was left"
exit $fail
