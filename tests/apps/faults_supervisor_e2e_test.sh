#!/usr/bin/env bash
# Faults only a signal from outside makes (issue 22): a training process frozen with SIGSTOP and a
# supervisor whose terminal went away (SIGHUP).
#   stopped: under --max-restarts a run of thread ranks is frozen (SIGSTOP); none of its ranks'
#            deadlines can fire, so the supervisor kills it past the deadline and restarts it,
#            naming the stop; the run then completes.
#   hup:     SIGHUP to the supervisor is a stop like SIGTERM: the child checkpoints, exit 129.
#   hup_plain: SIGHUP to a run without supervisor checkpoints too, exit 129.
#   nohup:   a run started with SIGHUP ignored (nohup) trains on through a SIGHUP.
#   memory_note: a run that fails says where its memory checkpoint stays and how to remove it.
#   mpi_stopped: one process of an mpirun job frozen: the other's deadline names it, the job ends.
#   mpi_supervised: kill -9 of an mpirun process: restarts.jsonl's rank is the dead one (mpirun's
#            line, which <run>/mpirun.stderr keeps); SIGTERM to the supervisor then ends it with
#            143, not mpirun's own 1.
# Each case ends with nothing of its run left running.
# Usage: bash faults_supervisor_e2e_test.sh /path/to/dtrain   (run by ctest as apps.faults_supervisor_e2e_test)
set -uo pipefail
DTRAIN=$(realpath "$1")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
cleanup() {
  # Whatever a failed case left (stopped processes first get SIGCONT so that SIGKILL reaps them).
  local pid
  for pid in $(pgrep -f -- "$TMP" || true); do
    kill -CONT "$pid" 2> /dev/null
    kill -9 "$pid" 2> /dev/null
  done
  rm -rf "$TMP"
}
trap cleanup EXIT
cd "$ROOT" || exit 1
failures=0
quick=examples/synthetic_quick.toml
# About 2 s of training (15 ms per step of rank 1), a 3-s deadline, disk checkpoints every 20 steps.
# shellcheck disable=SC2054  # the commas are --straggler's
RUN=(--config "$quick" --workers 2 --epochs 2 --straggler rank=1,delay_ms=15
     --set parallel.comm_timeout_seconds=3 --set train.checkpoint_every_steps=20 --quiet)

check() {  # check NAME CONDITION MESSAGE
  if eval "$2"; then
    echo "ok $1: $3"
  else
    echo "FAIL $1: $3"
    cat "$TMP/$1.err" 2> /dev/null
    failures=$((failures + 1))
  fi
}

now() { date +%s.%N; }
elapsed() { python3 -c "print(round($(now) - $1, 2))"; }
below() { python3 -c "import sys; sys.exit(0 if $1 < $2 else 1)"; }

# Waits (at most 30 s) until run folder $1 has logged a training step.
wait_for_step() {
  for _ in $(seq 600); do
    grep -q '"step"' "$1/metrics.jsonl" 2> /dev/null && return 0
    sleep 0.05
  done
  return 1
}

# The dtrain training process of run folder $1 that is not pid $2 (the supervisor).
child_of_run() {
  local candidate
  for candidate in $(pgrep -f -- "$1" || true); do
    [[ $candidate != "$2" && $(cat "/proc/$candidate/comm" 2> /dev/null) == dtrain ]] &&
      echo "$candidate" && return
  done
}

nothing_left() { [[ -z "$(pgrep -f -- "$1" || true)" ]]; }

# stopped: SIGSTOP the child; the supervisor kills it at the deadline and restarts it.
out="$TMP/stopped"
"$DTRAIN" train "${RUN[@]}" --out "$out" --max-restarts 2 --restart-backoff 0.1 \
  2> "$TMP/stopped.err" &
supervisor=$!
wait_for_step "$out"
child=$(child_of_run "$out" "$supervisor")
start=$(now)
kill -STOP "$child"
while ! grep -q "was stopped (SIGSTOP)" "$TMP/stopped.err" && kill -0 "$supervisor" 2> /dev/null; do
  sleep 0.05
done
detect=$(elapsed "$start")
timeout 60 tail --pid="$supervisor" -f /dev/null
wait "$supervisor"
rc=$?
check stopped '[[ $rc -eq 0 ]]' "the restarted run completes (exit $rc)"
check stopped 'below $detect 5' "the stop is seen within the deadline + 2 s (${detect} s, deadline 3 s)"
check stopped \
  'grep -q "^warn: supervisor: the training process $child was stopped (SIGSTOP) for 3\.[0-9] s, past parallel.comm_timeout_seconds = 3: killing it" "$TMP/stopped.err"' \
  "the supervisor names the stop"
check stopped \
  'python3 -c "import json,sys; r=json.loads(open(sys.argv[1]).readline()); assert \"was stopped (SIGSTOP)\" in r[\"cause\"] and r[\"ended\"].startswith(\"killed by signal 9\"), r" "$out/restarts.jsonl"' \
  "restarts.jsonl names the stop"
check stopped '[[ -f "$out/summary.json" ]] && nothing_left "$out"' "summary.json, nothing left running"

# A run into $TMP/NAME (dtrain train ARGS...), its stderr in $TMP/NAME.err, sent SIGHUP after its
# first step; sets rc to its exit status.
hup_run() {
  local name=$1 pid
  shift
  out="$TMP/$name"
  "$DTRAIN" train "${RUN[@]}" --out "$out" "$@" 2> "$TMP/$name.err" &
  pid=$!
  wait_for_step "$out"
  kill -HUP "$pid"
  timeout 60 tail --pid="$pid" -f /dev/null
  wait "$pid"
  rc=$?
}

# hup: SIGHUP to the supervisor (a closed terminal) stops the run as SIGTERM would.
hup_run hup --max-restarts 2
check hup '[[ $rc -eq 129 ]]' "exit 129 (128 + SIGHUP), got $rc"
check hup 'grep -q "warn: stopped by SIGHUP after step .*: checkpoint .*continue with" "$TMP/hup.err"' \
  "the child checkpoints and says how to continue"
check hup '[[ ! -f "$out/restarts.jsonl" ]] && nothing_left "$out"' "no restart, nothing left running"

# hup_plain: without a supervisor too, SIGHUP stops the run with a checkpoint.
hup_run hup_plain
check hup_plain '[[ $rc -eq 129 ]]' "exit 129, got $rc"
check hup_plain 'grep -q "warn: stopped by SIGHUP after step .*: checkpoint" "$TMP/hup_plain.err"' \
  "it checkpoints"

# nohup: a run started with SIGHUP ignored (nohup, `trap '' HUP`) trains on through SIGHUPs, to
# the supervisor and to its child (which inherits the ignored signal).
out="$TMP/nohup"
(
  trap '' HUP
  exec "$DTRAIN" train "${RUN[@]}" --out "$out" --max-restarts 2
) 2> "$TMP/nohup.err" &
supervisor=$!
wait_for_step "$out"
child=$(child_of_run "$out" "$supervisor")
kill -HUP "$supervisor" "$child"
timeout 60 tail --pid="$supervisor" -f /dev/null
wait "$supervisor"
rc=$?
check nohup '[[ -n $child && $rc -eq 0 ]]' "the run completes (exit $rc)"
check nohup \
  '[[ -f "$out/summary.json" && ! -f "$out/restarts.jsonl" ]] && ! grep -q "stopped by SIGHUP" "$TMP/nohup.err" && nothing_left "$out"' \
  "no stop, no restart, nothing left running"

# memory_note: a run that fails keeps its memory checkpoint for --resume and says where it is.
out="$TMP/memory_note"
mkdir -p "$TMP/shm"
"$DTRAIN" train --config "$quick" --workers 2 --quiet --out "$out" \
  --set 'parallel.inject_fault="rank=1,step=40"' --set train.memory_checkpoint_every_steps=1 \
  --set "train.memory_checkpoint_folder=\"$TMP/shm\"" 2> "$TMP/memory_note.err"
rc=$?
check memory_note '[[ $rc -eq 4 ]]' "exit 4, got $rc"
check memory_note \
  'grep -q "^warn: the run.s memory checkpoint stays in $TMP/shm/dtrain-.*MB of shared memory): .dtrain train --resume $out. continues from it; .rm $TMP/shm/dtrain-.*. frees the memory" "$TMP/memory_note.err"' \
  "the memory checkpoint is named, with how to resume and how to remove it"

# mpi_stopped: one process of a 2-process job frozen; the other's deadline names it.
if command -v mpirun > /dev/null; then
  MPIRUN=(mpirun --oversubscribe -np 2)
  [[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
  out="$TMP/mpi"
  "${MPIRUN[@]}" "$DTRAIN" train --config "$quick" --epochs 2 --straggler rank=1,delay_ms=15 \
    --set parallel.comm_timeout_seconds=3 --quiet --out "$out" 2> "$TMP/mpi_stopped.err" &
  launcher=$!
  wait_for_step "$out"
  victim=""
  for candidate in $(pgrep -f -- "$out" || true); do
    grep -qz '^OMPI_COMM_WORLD_RANK=1$' "/proc/$candidate/environ" 2> /dev/null && victim=$candidate
  done
  start=$(now)
  kill -STOP "$victim"
  timeout 30 tail --pid="$launcher" -f /dev/null
  detect=$(elapsed "$start")
  kill -CONT "$victim" 2> /dev/null
  wait "$launcher"
  rc=$?
  sleep 0.5
  check mpi_stopped '[[ -n $victim && $rc -ne 0 ]]' "the job fails (exit $rc)"
  # mpirun's teardown of the job takes its time on a loaded machine: the bound is loose.
  check mpi_stopped 'below $detect 15' "within the deadline + 12 s (${detect} s, deadline 3 s)"
  # The frozen rank is missing at a header check, or its message (to or from it) is at a transfer.
  check mpi_stopped \
    'grep -Eq "^error: process 0 of 2: .*(missing rank\(s\): 1|to rank 1|from rank 1)" "$TMP/mpi_stopped.err"' \
    "process 0's error names rank 1"
  check mpi_stopped 'nothing_left "$out"' "nothing left running"

  # mpi_supervised: kill -9 of process 1 of a supervised mpirun job: restarts.jsonl names rank 1
  # (mpirun's line); then SIGTERM to the supervisor: exit 143 whatever mpirun's own status.
  out="$TMP/mpi_supervised"
  "$DTRAIN" train --config "$quick" --epochs 3 --straggler rank=1,delay_ms=15 --quiet --out "$out" \
    --set parallel.comm_timeout_seconds=3 --max-restarts 1 --restart-backoff 0.1 \
    --mpirun "${MPIRUN[*]:1}" 2> "$TMP/mpi_supervised.err" &
  supervisor=$!
  wait_for_step "$out"
  for candidate in $(pgrep -f -- "$out" || true); do
    grep -qz '^OMPI_COMM_WORLD_RANK=1$' "/proc/$candidate/environ" 2> /dev/null && kill -9 "$candidate"
  done
  for _ in $(seq 600); do
    [[ -f "$out/restarts.jsonl" ]] && grep -q '"resuming\|"step"' "$out/metrics.jsonl" && break
    sleep 0.05
  done
  sleep 1  # the restarted job is training
  kill -TERM "$supervisor"
  timeout 60 tail --pid="$supervisor" -f /dev/null
  wait "$supervisor"
  rc=$?
  sleep 0.5
  check mpi_supervised \
    'python3 -c "import json,sys; r=json.loads(open(sys.argv[1]).readline()); assert r[\"rank\"] == 1 and \"process rank 1\" in r[\"cause\"], r" "$out/restarts.jsonl"' \
    "restarts.jsonl names rank 1, the process that died"
  check mpi_supervised \
    'grep -q "^=== dtrain supervisor, .*: attempt 2: mpirun" "$out/mpirun.stderr" && grep -q "process rank 1 .*exited on signal 9" "$out/mpirun.stderr" && grep -q "process rank 1 .*exited on signal 9" "$TMP/mpi_supervised.err"' \
    "mpirun's stderr is in mpirun.stderr (a header per attempt) and copied to the supervisor's"
  check mpi_supervised '[[ $rc -eq 143 ]]' "SIGTERM: exit 143, got $rc"
  check mpi_supervised 'nothing_left "$out"' "nothing left running"
else
  echo "skip mpi_stopped, mpi_supervised: no mpirun"
fi

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "all cases passed"
