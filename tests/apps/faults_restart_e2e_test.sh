#!/usr/bin/env bash
# End-to-end faults (docs/FAULTS.md): kill -9 at random moments of a supervised run
# (`dtrain train --max-restarts`, 2 ranks as threads, and 2 processes under mpirun) ends with the
# parameters of the uninterrupted run, bit for bit; SIGTERM checkpoints and exits 143, and --resume
# finishes the run bitwise; restarts by a warm standby and by a fork server's workers end bitwise
# too; a checkpoint of 2 ranks resumes on 1 (resharded, said in the banner);
# a run killed before its first checkpoint resumes from the beginning; bad input is not restarted.
# Usage: bash faults_restart_e2e_test.sh /path/to/dtrain   (ctest: apps.faults_restart_e2e_test)
set -euo pipefail
DTRAIN=$(realpath "$1")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'pkill -9 -f "$TMP" 2> /dev/null || true; rm -rf "$TMP"' EXIT
cd "$ROOT"
source "$ROOT/tests/apps/e2e_helpers.sh"  # fail, expect_error

# About 3 s on 2 cores: 3 epochs of 235 steps, a checkpoint every 20 steps.
BASE=(--config examples/fashion_mlp.toml --set data.limit_train=30000
     --set data.limit_test=1000 --set train.checkpoint_every_steps=20 --quiet)
RUN=("${BASE[@]}" --epochs 3)

# The parameters of a checkpoint file (checkpoint.h's layout), as bytes, for bitwise comparison.
same_params() {
  python3 - "$1" "$2" <<'PY'
import struct, sys
def params(path):
    b = open(path, "rb").read()
    at = 24 + 48
    def u32():
        global_at[0] += 4; return struct.unpack_from("<I", b, global_at[0] - 4)[0]
    def i64():
        global_at[0] += 8; return struct.unpack_from("<q", b, global_at[0] - 8)[0]
    def skip_str():
        n = u32(); global_at[0] += n
    global_at = [at]
    for _ in range(u32()):           # scalars
        skip_str(); global_at[0] += 8
    for _ in range(2):               # parameter and buffer tables
        for _ in range(u32()):
            skip_str(); nd = u32(); global_at[0] += 8 * nd + 8 + 8 + 1
    n = i64()
    return b[global_at[0]:global_at[0] + 4 * n]
a, b = params(sys.argv[1]), params(sys.argv[2])
assert len(a) > 1000 and a == b, f"{sys.argv[1]} and {sys.argv[2]} hold different parameters"
PY
}

"$DTRAIN" train "${RUN[@]}" --workers 2 --out "$TMP/ref"

# kill -9 the training process at KILLS (default 3; the issue's matrix: 20) random moments (when its
# newest checkpoint has passed that many random steps: moments tied to progress, not to this
# machine's speed); the supervisor restarts it each time.
KILLS=${KILLS:-3}
supervised_kills() {
  local out=$1; shift
  "$DTRAIN" train "${RUN[@]}" --out "$out" --max-restarts $((KILLS + 2)) --restart-backoff 0.1 "$@" \
    2> "$TMP/supervisor.err" &
  local supervisor=$! kills=0 target
  for target in $(python3 -c "import random; print(*sorted(random.sample(range(40, 690), $KILLS)))"); do
    while kill -0 "$supervisor" 2> /dev/null; do
      local latest step
      latest=$(cat "$out/checkpoints/latest" 2> /dev/null || true)
      step=$(sed -n 's/^epoch-[0-9]*-step-\([0-9]*\)\.ckpt$/\1/p' <<< "$latest")
      [[ -n "$step" && $step -ge $target ]] && break
      sleep 0.02
    done
    # The newest dtrain training process of this run (not the supervisor, not mpirun).
    local victim="" candidate
    for candidate in $(pgrep -f -- "$out" || true); do
      [[ $candidate != "$supervisor" && $(cat "/proc/$candidate/comm" 2> /dev/null) == dtrain ]] &&
        victim=$candidate
    done
    [[ -n "$victim" ]] || continue
    kill -9 "$victim" 2> /dev/null && kills=$((kills + 1)) || true
    sleep 0.3  # the restart begins before the next target is looked for
  done
  wait "$supervisor" || { cat "$TMP/supervisor.err" >&2; fail "the supervised run failed"; }
  [[ -f "$out/restarts.jsonl" ]] || fail "no restarts.jsonl after $kills kills"
  echo "ok: $(wc -l < "$out/restarts.jsonl") restart(s) after $kills kill(s) in $out"
  same_params "$TMP/ref/checkpoints/epoch-3.ckpt" "$out/checkpoints/epoch-3.ckpt" ||
    fail "the restarted run ($*) ends with other parameters than the uninterrupted one"
}
supervised_kills "$TMP/threads" --workers 2
python3 - "$TMP/threads/restarts.jsonl" <<'PY' || fail "restarts.jsonl lacks a field"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    assert r["ended"].startswith("killed by signal 9"), r
    for key in ("at", "cause", "checkpoint", "checkpoint_step", "steps_lost_at_least", "command"):
        assert key in r, (key, r)
PY
echo "ok: kill -9 under the supervisor (2 thread ranks): bitwise equal to the uninterrupted run"

# Tier 1: a memory checkpoint every step (train.memory_checkpoint_every_steps) besides the disk
# checkpoints every 20: the restarts resume from memory (at most a step lost), the run ends
# bitwise equal, and a finished run leaves nothing in the memory folder.
mkdir -p "$TMP/shm"
supervised_kills "$TMP/memory" --workers 2 --set train.memory_checkpoint_every_steps=1 \
  --set "train.memory_checkpoint_folder=\"$TMP/shm\""
python3 - "$TMP/memory/restarts.jsonl" <<'PY' || fail "the restarts did not resume from memory"
import json, sys
log = [json.loads(l) for l in open(sys.argv[1])]
assert any("#slot" in (r.get("checkpoint") or "") for r in log), log
assert all(r["steps_lost_at_least"] <= 1 for r in log if "#slot" in (r.get("checkpoint") or "")), log
PY
[[ -z "$(ls -A "$TMP/shm")" ]] || fail "a finished run left $(ls "$TMP/shm") in its memory folder"
echo "ok: memory checkpoints: restarts resume from memory, bitwise equal, nothing left behind"

# Warm standby (--warm-standby): once a standby waits (named dtrain-standby), kill -9 the running
# child; the standby takes over (restarts.jsonl says so), the run ends bitwise equal, and no
# standby outlives the supervisor.
"$DTRAIN" train "${RUN[@]}" --workers 2 --out "$TMP/warm" --max-restarts 3 --restart-backoff 0 \
  --warm-standby --set train.memory_checkpoint_every_steps=1 \
  --set "train.memory_checkpoint_folder=\"$TMP/shm\"" 2> "$TMP/warm.err" &
supervisor=$!
standby=""
while [[ -z "$standby" ]] && kill -0 "$supervisor" 2> /dev/null; do
  standby=$(pgrep -x dtrain-standby -P "$supervisor" || true)
  sleep 0.05
done
[[ -n "$standby" ]] || fail "no warm standby appeared before the run ended"
kill -9 "$(pgrep -x dtrain -P "$supervisor")"
wait "$supervisor" || { cat "$TMP/warm.err" >&2; fail "the run with a warm standby failed"; }
python3 - "$TMP/warm/restarts.jsonl" "$standby" <<'PY' || fail "the standby did not take over"
import json, sys
log = [json.loads(l) for l in open(sys.argv[1])]
assert len(log) == 1 and log[0]["warm_standby"] is True, log
PY
same_params "$TMP/ref/checkpoints/epoch-3.ckpt" "$TMP/warm/checkpoints/epoch-3.ckpt" ||
  fail "the run the warm standby finished ends with other parameters than the uninterrupted one"
[[ -z "$(pgrep -f -- "$TMP/warm" || true)" ]] || fail "a process of the run outlived its supervisor"
echo "ok: warm standby: it takes over after kill -9 and ends bitwise equal; nothing left running"

# Fork server (--fork-server): once a forked worker waits (the template and it are named
# dtrain-template), kill -9 the running child, twice; each restart is a forked worker
# (restarts.jsonl says so) and the run ends bitwise equal to the uninterrupted run, for one worker
# and for 2 ranks as threads. Then the template is killed: the supervisor says so and restarts by a
# new process, still bitwise. A strategy whose ranks are not each a Trainer (parameter servers):
# the template declines in one warning and restarts start processes.
# The steps sleep 3 ms each (a straggler on rank 0; the numbers do not change), so that the run
# lasts about 4 s: the template is ready about 1.5 s into it, and a second worker must wait
# before the run ends.
SLOW=("${RUN[@]}" --straggler rank=0,delay_ms=3)
"$DTRAIN" train "${SLOW[@]}" --out "$TMP/one"
# Waits until the supervisor $1 has a template and a worker waiting (two dtrain-template children
# other than those named in $2), or it ended.
wait_for_forked_worker() {
  local waiting
  while kill -0 "$1" 2> /dev/null; do
    waiting=$(pgrep -x dtrain-template -P "$1" | grep -vxF -f <(tr ' ' '\n' <<< "${2:-none}") | wc -l || true)
    [[ $waiting -ge 2 || ( -n "${2:-}" && $waiting -ge 1 ) ]] && return 0
    sleep 0.05
  done
  return 1
}
fork_run() {
  "$DTRAIN" train "${SLOW[@]}" --out "$TMP/$1" --max-restarts 3 --restart-backoff 0 --fork-server \
    --set train.memory_checkpoint_every_steps=1 --set "train.memory_checkpoint_folder=\"$TMP/shm\"" \
    "${@:2}" 2> "$TMP/$1.err" &
}
# Runs fork_run $1 (its options: the rest), kills its running child twice, each time once a
# forked worker waits, and checks that forked workers took over and that the run ends with the
# parameters of the uninterrupted run in $2.
fork_kills() {
  local name=$1 reference=$2 supervisor waiting="" kill
  fork_run "$name" "${@:3}"
  supervisor=$!
  for kill in 1 2; do
    wait_for_forked_worker "$supervisor" "$waiting" || fail "$name: no forked worker waited before kill $kill"
    waiting=$(pgrep -x dtrain-template -P "$supervisor" | tr '\n' ' ')
    kill -9 "$(pgrep -x dtrain -P "$supervisor")"
    sleep 0.3
  done
  wait "$supervisor" || { cat "$TMP/$name.err" >&2; fail "$name: the run with a fork server failed"; }
  python3 - "$TMP/$name/restarts.jsonl" <<'PY' || fail "$name: the forked workers did not take over"
import json, sys
log = [json.loads(l) for l in open(sys.argv[1])]
assert len(log) == 2 and all(r["fork_server"] is True for r in log), log
PY
  grep -q "by a worker of the fork server" "$TMP/$name.err" || fail "$name: the restart line does not say fork"
  same_params "$reference/checkpoints/epoch-3.ckpt" "$TMP/$name/checkpoints/epoch-3.ckpt" ||
    fail "$name: the run the forked workers finished ends with other parameters than the uninterrupted one"
  [[ -z "$(pgrep -f -- "$TMP/$name" || true)" ]] || fail "$name: a process of the run outlived its supervisor"
}
fork_kills fork "$TMP/one"
echo "ok: fork server: forked workers take over after kill -9 twice and end bitwise equal"
fork_kills fork-ranks "$TMP/ref" --workers 2
echo "ok: fork server, 2 ranks as threads: forked workers take over after kill -9 twice, bitwise"

fork_run fork-dead
supervisor=$!
wait_for_forked_worker "$supervisor" || fail "no forked worker waited"
kill -9 "$(pgrep -o -x dtrain-template -P "$supervisor")"  # the template (the older of the two)
sleep 0.5
kill -9 "$(pgrep -x dtrain -P "$supervisor")"
wait "$supervisor" || { cat "$TMP/fork-dead.err" >&2; fail "the run whose template died failed"; }
grep -q "the fork server ended with killed by signal 9 (SIGKILL) before it was needed; restarts start a new process" \
  "$TMP/fork-dead.err" || { cat "$TMP/fork-dead.err" >&2; fail "the template's death was not said"; }
python3 - "$TMP/fork-dead/restarts.jsonl" <<'PY' || fail "the restart was not a new process"
import json, sys
log = [json.loads(l) for l in open(sys.argv[1])]
assert len(log) == 1 and log[0]["fork_server"] is False, log
PY
same_params "$TMP/one/checkpoints/epoch-3.ckpt" "$TMP/fork-dead/checkpoints/epoch-3.ckpt" ||
  fail "the run restarted after its template died ends with other parameters"
[[ -z "$(pgrep -f -- "$TMP/fork-dead" || true)" ]] || fail "a process of the run outlived its supervisor"
echo "ok: fork server: a dead template is said, and the restart starts a new process, bitwise"

fork_run fork-ps --strategy parameter_server --workers 2 --servers 1
supervisor=$!
wait "$supervisor" || { cat "$TMP/fork-ps.err" >&2; fail "the parameter-server run with --fork-server failed"; }
grep -q 'fork server: it serves runs whose ranks are each a Trainer, and this one runs parallel.strategy = "parameter_server"; restarts start a new process' \
  "$TMP/fork-ps.err" || { cat "$TMP/fork-ps.err" >&2; fail "the template did not decline"; }
expect_error "cannot be combined with" train "${RUN[@]}" --out "$TMP/fork-bad" --max-restarts 1 \
  --fork-server --warm-standby
echo "ok: fork server: declined in one warning for parameter servers; refused with --warm-standby"

if command -v mpirun > /dev/null; then
  supervised_kills "$TMP/mpi" --mpirun "--oversubscribe --allow-run-as-root -np 2"
  echo "ok: kill -9 of one of 2 mpirun processes: the job restarts and ends bitwise equal"
fi

# Elastic: 3 thread ranks, rank 2 fails after step 40 (parallel.inject_fault): the supervisor
# continues on 2 (--min-workers 2, the checkpoint resharded), then grows back to 3 once --grow-when
# says a worker is available: it says no (the file is missing) until the first "not growing" line,
# then yes; DTRAIN_GROW_TO holds the count after the grow.
"$DTRAIN" train "${RUN[@]}" --workers 3 --out "$TMP/elastic" --max-restarts 2 --restart-backoff 0.1 \
  --min-workers 2 --grow-after 0.3 --set 'parallel.inject_fault="rank=2,step=40"' \
  --grow-when "test \"\$DTRAIN_GROW_TO\" = 3 && test -e $TMP/worker-available" 2> "$TMP/elastic.err" &
elastic_pid=$!
for _ in $(seq 600); do
  if grep -q "not growing to 3 workers yet" "$TMP/elastic.err" 2> /dev/null; then
    touch "$TMP/worker-available"
    break
  fi
  sleep 0.05
done
wait "$elastic_pid" || { cat "$TMP/elastic.err" >&2; fail "the elastic run failed"; }
[[ -e "$TMP/worker-available" ]] || { cat "$TMP/elastic.err" >&2; fail "elastic: --grow-when was never asked"; }
python3 - "$TMP/elastic" <<'PY' || { cat "$TMP/elastic.err" >&2; fail "elastic: shrink then grow expected"; }
import json, sys
log = [json.loads(l) for l in open(sys.argv[1] + "/restarts.jsonl")]
assert log[0]["rank"] == 2 and "injected fault" in log[0]["cause"], log[0]
assert log[0]["command"][-3:] == ["--workers", "2", "--quiet"], log[0]["command"]
assert log[1]["cause"].startswith("grow"), log[1]
assert log[1]["command"][-3:] == ["--workers", "3", "--quiet"], log[1]["command"]
s = json.load(open(sys.argv[1] + "/summary.json"))
assert s["steps"] == 705 and s["final_test_accuracy"] > 0.8, s
PY
echo "ok: elastic: 3 ranks, one fails, the run goes on with 2 and grows back to 3 when --grow-when says so"

# SIGTERM: a checkpoint after the current step, exit 143; --resume finishes the run bitwise.
"$DTRAIN" train "${RUN[@]}" --workers 2 --out "$TMP/term" 2> "$TMP/term.err" &
pid=$!
sleep 1
kill -TERM "$pid"
set +e; wait "$pid"; rc=$?; set -e
[[ $rc -eq 143 ]] || { cat "$TMP/term.err" >&2; fail "SIGTERM: expected exit 143, got $rc"; }
grep -q "stopped by SIGTERM after step .*checkpoint.*--resume" "$TMP/term.err" ||
  { cat "$TMP/term.err" >&2; fail "SIGTERM: no stop message"; }
"$DTRAIN" train --resume "$TMP/term" --quiet
same_params "$TMP/ref/checkpoints/epoch-3.ckpt" "$TMP/term/checkpoints/epoch-3.ckpt" ||
  fail "SIGTERM + --resume ends with other parameters"
echo "ok: SIGTERM checkpoints and exits 143; --resume ends bitwise equal"

# Another number of ranks: a 2-rank checkpoint resumes on 1, resharded and said so, and follows
# the 1-rank run. A short run (2 x 24 steps): over hundreds of steps at lr 0.1 the rounding of a
# sum over 2 ranks against 1 grows to 1% of the loss for uninterrupted runs as well.
SHORT=(--config examples/fashion_mlp.toml --set data.limit_train=3000 --set data.limit_test=500)
"$DTRAIN" train "${SHORT[@]}" --epochs 2 --quiet --out "$TMP/ref1"
"$DTRAIN" train "${SHORT[@]}" --epochs 1 --quiet --workers 2 --out "$TMP/reshard"
"$DTRAIN" train --resume "$TMP/reshard" --epochs 2 --workers 1 2> "$TMP/reshard.err"
grep -q "resharded: the checkpoint was written by 2 ranks, this run has 1" "$TMP/reshard.err" ||
  { cat "$TMP/reshard.err" >&2; fail "no resharding line in the banner"; }
python3 - "$TMP/ref1/summary.json" "$TMP/reshard/summary.json" <<'PY' || fail "2 -> 1 ranks diverged"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert abs(a["final_train_loss"] / b["final_train_loss"] - 1) < 1e-6, (a["final_train_loss"], b["final_train_loss"])
PY
echo "ok: a checkpoint of 2 ranks resumes on 1 and follows the 1-rank run"

# Killed before its first checkpoint: --resume trains it from the beginning. (Its steps sleep 5 ms,
# about 3.5 s in all, so that an idle machine does not finish the run before the kill.)
mkdir -p "$TMP/early"
"$DTRAIN" train "${RUN[@]}" --out "$TMP/early" --set train.checkpoint_every_steps=0 \
  --set train.checkpoint_every=0 --straggler rank=0,delay_ms=5 &
pid=$!
sleep 1.5
kill -9 "$pid" 2> /dev/null || true
wait "$pid" 2> /dev/null || true
if [[ -f "$TMP/early/resolved.toml" && ! -d "$TMP/early/checkpoints" ]]; then
  "$DTRAIN" train --resume "$TMP/early" --quiet 2> "$TMP/early.err"
  grep -q "holds no checkpoint yet" "$TMP/early.err" || fail "no 'holds no checkpoint yet' line"
  [[ -f "$TMP/early/summary.json" ]] || fail "the restarted run did not finish"
  echo "ok: a run killed before its first checkpoint resumes from the beginning"
else
  echo "skipped: the run was not between its banner and its first checkpoint after 1.5 s"
fi

# Bad input is not restarted: the child's exit 2 is the supervisor's, and nothing is retried.
set +e
"$DTRAIN" train "${RUN[@]}" --set data.path=/nonexistent --out "$TMP/bad" --max-restarts 3 \
  2> "$TMP/bad.err"
rc=$?
set -e
[[ $rc -eq 2 ]] || { cat "$TMP/bad.err" >&2; fail "bad input under the supervisor: exit $rc"; }
[[ ! -f "$TMP/bad/restarts.jsonl" ]] || fail "bad input was restarted"
echo "ok: bad input under the supervisor exits 2 without restarts"

# --grow-when belongs to elastic membership: without --min-workers / --max-workers, one line.
expect_error "give --min-workers / --max-workers with it" train "${RUN[@]}" --out "$TMP/grow-when" \
  --max-restarts 1 --grow-when true
echo "ok: --grow-when without elastic membership is refused in one line"
