#!/usr/bin/env bash
# Goodput and restart time under injected failures (docs/FAULTS.md, "Figures"): the fortunes GPT
# (120 steps, 2 compute threads) uninterrupted, then under `dtrain train --max-restarts` with a
# kill -9 of the training process every 20 step-times; prints the goodput (uninterrupted wall /
# wall with failures), the time from each kill to the first step after the restart, the steps each
# restart lost, and whether the final parameters equal the uninterrupted run's.
# Goodput is given against both references: the same run without failures (what the failures
# cost) and the run without failures and without checkpoints (what fault tolerance costs in all).
# MODE kill (default): kill -9 of the training process every 20 step-times, restarted by the
# supervisor; MODE inject: the rank fails after every 20th step (parallel.inject_fault
# "rank=0,every=20") and restarts inside the process (train.in_process_restarts).
# MODE standby: as kill, with --warm-standby (the supervisor wakes a ready process instead of
# starting one; the killer's `pgrep -x dtrain` does not see the standby, named dtrain-standby).
# MODE fork: as kill, with --fork-server (the supervisor wakes a worker forked from a template
# process; the template and the waiting worker are named dtrain-template).
# WORKERS=N (default 1) runs N ranks as threads (--workers N), each with the 2 compute threads.
# Usage: scripts/fault_goodput.sh [DISK_EVERY_STEPS=1] [MEMORY_EVERY_STEPS=0] [MODE=kill]
#   (train.checkpoint_every_steps and train.memory_checkpoint_every_steps; build/dtrain must exist,
#   or DTRAIN=path names the binary). With DTRAIN_TIMELINE=FILE set, the killer appends a line
#   "<time> <pid> kill -9" to FILE before each kill of the goodput pass, beside the processes' own
#   lines (base/timeline.h; docs/FAULTS.md, "Where a restart's time goes"; read it with
#   scripts/restart_timeline.py FILE).
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
D="${DTRAIN:-$ROOT/build/dtrain}"
# The killer finds the training process by its name, which is the binary's (a forked worker names
# itself dtrain): another name would kill nothing and measure a run without failures.
if [[ $(basename "$D") != dtrain ]]; then
  echo "fault_goodput.sh: the binary must be named dtrain (DTRAIN=some/folder/dtrain), not $(basename "$D")" >&2
  exit 2
fi
CK=${1:-1}
MEM=${2:-0}
MODE=${3:-kill}
SUPERVISOR=(--max-restarts 100 --restart-backoff 0)
[[ $MODE == standby ]] && SUPERVISOR+=(--warm-standby)
[[ $MODE == fork ]] && SUPERVISOR+=(--fork-server)
TIMELINE=${DTRAIN_TIMELINE:-}  # for the goodput pass alone
unset DTRAIN_TIMELINE
OUT=$(mktemp -d)
trap 'pkill -9 -f "$OUT" 2> /dev/null; rm -rf "$OUT"' EXIT
cd "$ROOT"
BARE=(--config examples/fortunes_gpt.toml --set data.text_windows=3840 --set train.eval_every_steps=0
      --set train.log_every=1 --threads 2 --workers "${WORKERS:-1}" --quiet)
RUN=("${BARE[@]}" --set train.checkpoint_every_steps="$CK"
     --set train.memory_checkpoint_every_steps="$MEM")
/usr/bin/time -f "%e" -o "$OUT/bare.time" "$D" train "${BARE[@]}" --out "$OUT/bare"
bare=$(cat "$OUT/bare.time")
/usr/bin/time -f "%e" -o "$OUT/ref.time" "$D" train "${RUN[@]}" --out "$OUT/ref"
ref=$(cat "$OUT/ref.time")
echo "without checkpoints: $bare s; with them (disk every $CK steps, memory every $MEM): $ref s"
step=$(python3 -c "import json; print(json.load(open('$OUT/bare/summary.json'))['step_seconds_median'])")
every=$(python3 -c "print(20 * $step)")
echo "uninterrupted: $ref s; median step $step s; a kill every 20 step-times = $every s"
if [[ $MODE == inject ]]; then
  /usr/bin/time -f "%e" -o "$OUT/f.time" "$D" train "${RUN[@]}" --out "$OUT/f" \
    --set 'parallel.inject_fault="rank=0,every=20"' --set train.in_process_restarts=1000 \
    2> "$OUT/f.err" || echo "the run failed: $(tail -1 "$OUT/f.err")"
  wall=$(cat "$OUT/f.time")
  echo "with a failure after every 20th step: $wall s, $(wc -l < "$OUT/f/restarts.jsonl")" \
    "in-process restarts; goodput $(python3 -c "print(round($ref / $wall, 3))") against the same" \
    "run without failures, $(python3 -c "print(round($bare / $wall, 3))") against the run" \
    "without checkpoints"
else
# Goodput: a kill -9 every 20 step-times and nothing else running (the watcher of the latency
# pass below polls files, which costs a 2-core machine's training CPU while it restarts).
start=$(date +%s.%N)
DTRAIN_TIMELINE="$TIMELINE" "$D" train "${RUN[@]}" --out "$OUT/f" "${SUPERVISOR[@]}" \
  2> "$OUT/f.err" &
supervisor=$!
# The killer runs beside the supervisor, so that the wall clock stops when the run ends (not
# when the killer's sleep does).
(
  while kill -0 "$supervisor" 2> /dev/null; do
    sleep "$every"
    victim=$(pgrep -P "$supervisor" -x dtrain || true)
    [[ -n "$victim" && -n "$TIMELINE" ]] && echo "$(date +%s.%N) $victim kill -9" >> "$TIMELINE"
    [[ -n "$victim" ]] && kill -9 "$victim" 2> /dev/null && echo kill >> "$OUT/kills"
  done
) &
killer=$!
wait "$supervisor" || echo "the supervised run failed: $(tail -1 "$OUT/f.err")"
wall=$(python3 -c "print(round($(date +%s.%N) - $start, 2))")
kill "$killer" 2> /dev/null
kills=$(cat "$OUT/kills" 2> /dev/null | wc -l)
echo "with failures: $wall s, $kills kills; goodput $(python3 -c "print(round($ref / $wall, 3))")" \
  "against the same run without failures, $(python3 -c "print(round($bare / $wall, 3))") against" \
  "the run without checkpoints"
# Restart latency: 3 kills of another run, each followed by a watch for the first step after it
# (LATENCY=0 skips it: a DTRAIN_TIMELINE file of the goodput pass holds the same and more).
if [[ ${LATENCY:-1} != 0 ]]; then
"$D" train "${RUN[@]}" --out "$OUT/l" "${SUPERVISOR[@]}" 2> "$OUT/l.err" &
supervisor=$!
restarts=()
while kill -0 "$supervisor" 2> /dev/null && [[ ${#restarts[@]} -lt 3 ]]; do
  sleep "$every"
  victim=$(pgrep -P "$supervisor" -x dtrain || true)
  [[ -n "$victim" ]] || continue
  inode=$(stat -c %i "$OUT/l/metrics.jsonl")
  t0=$(date +%s.%N)
  kill -9 "$victim" 2> /dev/null || continue
  # Until the supervisor has logged the restart and the new run has logged a step after the
  # checkpoint it resumed from (in metrics.jsonl as the new run rewrote it: another inode).
  python3 - "$OUT/l" "${#restarts[@]}" "$supervisor" "$inode" <<'PY'
import json, os, sys, time
run, done, supervisor, inode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def alive():
    try:
        os.kill(supervisor, 0); return True
    except OSError:
        return False
while alive():
    try:
        log = [json.loads(l) for l in open(run + "/restarts.jsonl")]
    except (OSError, ValueError):
        log = []
    if len(log) > done:
        resumed = log[done].get("checkpoint_step") or 0
        try:
            steps = [json.loads(l).get("step", -1) for l in open(run + "/metrics.jsonl")
                     if '"kind":"step"' in l]
        except (OSError, ValueError):
            steps = []
        try:
            rewritten = os.stat(run + "/metrics.jsonl").st_ino != inode
        except OSError:
            rewritten = False
        if rewritten and steps and steps[-1] > resumed:
            break
    time.sleep(0.005)
PY
  restarts+=("$(python3 -c "print(round($(date +%s.%N) - $t0, 3))")")
done
kill "$supervisor" 2> /dev/null; wait "$supervisor" 2> /dev/null
echo "kill -> first step after the restart (s): ${restarts[*]}"
fi
fi
python3 - "$OUT" <<'PY'
import json, struct, sys
out = sys.argv[1]
lost = [json.loads(l).get("steps_lost_at_least") for l in open(out + "/f/restarts.jsonl")]
if any(n is not None for n in lost):  # the supervisor's records (in-process ones do not count)
    print("steps lost per restart (at least):", lost)
def params(path):  # checkpoint.h's layout
    b = open(path, "rb").read(); at = [72]
    def take(fmt):
        v = struct.unpack_from(fmt, b, at[0])[0]; at[0] += struct.calcsize(fmt); return v
    for _ in range(take("<I")):
        skip = take("<I") + 8; at[0] += skip                # scalar: name, f64
    for _ in range(2):                                      # parameter and buffer tables
        for _ in range(take("<I")):
            skip = take("<I"); at[0] += skip                # name
            skip = 8 * take("<I") + 17; at[0] += skip       # dims, offset, numel, weight decay
    n = take("<q"); return b[at[0]:at[0] + 4 * n]
same = params(out + "/ref/checkpoints/epoch-1.ckpt") == params(out + "/f/checkpoints/epoch-1.ckpt")
print("final parameters", "bitwise equal" if same else "DIFFER")
PY
