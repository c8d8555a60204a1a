#!/usr/bin/env bash
# End-to-end: no good checkpoint is ever lost and a diagnostic file never costs the run
# (docs/FAULTS.md, "Checkpoints that are never lost").
#   always:          a corrupt newest checkpoint -> --resume falls back to the previous one, saying so;
#                    a resume with fewer --epochs than the run has done -> refused, nothing rewritten;
#                    a `latest` that cannot be written -> warnings, exit 0, --resume still finds the
#                    newest checkpoint
#   with a tmpfs:    trace.json on a full disk -> warning, exit 0, summary.json written;
#                    checkpoints that fill it -> the older removed to make room, one warning, exit 0;
#                    a checkpoint that does not fit -> exit 2 naming the file, the previous
#                    checkpoint intact, and --resume continues from it once there is room
# Mounting needs privileges (root in a container that allows it); without them the full-disk cases
# print "skipped: cannot mount tmpfs".
# Usage: bash faults_disk_e2e_test.sh /path/to/dtrain   (run by ctest as apps.faults_disk_e2e_test)
set -euo pipefail
DTRAIN=$(realpath "$1")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
MNT="$TMP/small"
cleanup() {
  if mountpoint -q "$MNT" 2>/dev/null; then umount "$MNT" || true; fi
  rm -rf "$TMP"
}
trap cleanup EXIT
cd "$ROOT"
source tests/apps/e2e_helpers.sh

# summary_value RUN_DIR KEY: a top-level field of summary.json.
summary_value() {
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1] + "/summary.json"))[sys.argv[2]])' "$1" "$2"
}

# A run of well under a second: synthetic data, small sets.
QUICK=(--config examples/synthetic_quick.toml --set data.synthetic_samples=512
       --set data.synthetic_test_samples=256 --quiet)

# run_dtrain EXPECTED_RC ARGS...: runs dtrain, stderr to $TMP/err.txt, checks the exit status.
run_dtrain() {
  local expected=$1; shift
  set +e
  "$DTRAIN" "$@" > "$TMP/out.txt" 2> "$TMP/err.txt"
  local rc=$?
  set -e
  [[ $rc -eq $expected ]] || { cat "$TMP/err.txt" >&2; fail "expected exit $expected from: $*, got $rc"; }
}

expect_stderr() {
  grep -q -- "$1" "$TMP/err.txt" || { cat "$TMP/err.txt" >&2; fail "expected '$1' on stderr"; }
}

no_temp_files() {
  if compgen -G "$1/*.tmp" > /dev/null; then ls -la "$1" >&2; fail "temp files left in $1"; fi
}

# --- A corrupt newest checkpoint: --resume falls back to the previous one and says so ----------
run="$TMP/corrupt"
run_dtrain 0 train "${QUICK[@]}" --epochs 2 --out "$run"
python3 - "$run/checkpoints/epoch-2.ckpt" <<'PY'
import sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
data[len(data) // 2] ^= 0x20
open(path, "wb").write(data)
PY
run_dtrain 0 train --resume "$run" --epochs 3 --quiet
expect_stderr "checkpoint $run/checkpoints/epoch-2.ckpt is corrupt: CRC-32"
expect_stderr "resuming from $run/checkpoints/epoch-1.ckpt instead"
[[ $(summary_value "$run" resumed_from_epoch) == 1 ]] || fail "did not resume from epoch 1"
[[ $(summary_value "$run" epochs) == 3 ]] || fail "resumed run did not train to epoch 3"
echo "ok: a corrupt epoch-2.ckpt falls back to epoch-1.ckpt with a warning"

# --- `latest` cannot be written: each save warns, the checkpoints stay reachable ---------------
run="$TMP/nolatest"
mkdir -p "$run/checkpoints/latest.tmp"  # a folder where the temp file of `latest` must go
run_dtrain 0 train "${QUICK[@]}" --epochs 2 --out "$run"
expect_stderr "cannot write $run/checkpoints/latest: creating .*: Is a directory"
expect_stderr "checkpoint $run/checkpoints/epoch-2.ckpt itself is complete"
[[ -f "$run/summary.json" && -f "$run/checkpoints/epoch-2.ckpt" ]] || fail "run folder incomplete"
rmdir "$run/checkpoints/latest.tmp"
run_dtrain 0 train --resume "$run" --epochs 3 --quiet
expect_stderr "latest is missing; resuming from $run/checkpoints/epoch-2.ckpt"
[[ $(summary_value "$run" resumed_from_epoch) == 2 ]] || fail "did not resume from epoch 2"
echo "ok: an unwritable latest costs nothing: exit 0, and --resume finds epoch-2.ckpt"

# --- A stopped run resumed with fewer --epochs than it has done: refused, nothing rewritten ------
run="$TMP/past"
run_dtrain 0 train "${QUICK[@]}" --epochs 5 --set train.checkpoint_every_steps=3 \
  --set train.keep_checkpoints=0 --out "$run"
# As a run stopped by SIGTERM inside epoch 5 (8 steps per epoch): its newest is epoch-4-step-36.
rm "$run/summary.json" "$run/checkpoints/epoch-4-step-39.ckpt" "$run/checkpoints/epoch-5.ckpt"
echo epoch-4-step-36.ckpt > "$run/checkpoints/latest"
cp "$run/resolved.toml" "$TMP/resolved.before"
cp "$run/metrics.jsonl" "$TMP/metrics.before"
run_dtrain 2 train --resume "$run" --epochs 2 --quiet
expect_stderr "error: --resume $run: the newest checkpoint $run/checkpoints/epoch-4-step-36.ckpt is past --epochs 2 (4 epochs done, then step 36 inside epoch 5); give --epochs 5 or more to continue it"
[[ ! -e "$run/summary.json" ]] || fail "a summary.json was written for a run past --epochs"
cmp -s "$run/resolved.toml" "$TMP/resolved.before" || fail "resolved.toml was rewritten"
cmp -s "$run/metrics.jsonl" "$TMP/metrics.before" || fail "metrics.jsonl was rewritten"
run_dtrain 0 train --resume "$run" --quiet
[[ $(summary_value "$run" epochs) == 5 && $(summary_value "$run" steps) == 40 ]] \
  || fail "the resume without --epochs did not finish the 5 epochs"
echo "ok: a resume with fewer --epochs than done is refused in one line and changes nothing"

# --- Full disks (a small tmpfs) -----------------------------------------------------------------
mkdir -p "$MNT"
if ! mount -t tmpfs -o size=1m tmpfs "$MNT" 2> /dev/null; then
  echo "skipped: cannot mount tmpfs (the full-disk cases need privileges to mount one)"
  exit 0
fi

# trace.json does not fit (about 150 kB of trace, 100 kB free; everything else needs about 70 kB).
avail=$(df -k --output=avail "$MNT" | tail -1)
head -c $(( (avail - 100) * 1024 )) /dev/zero > "$MNT/filler"
run="$MNT/trace"
run_dtrain 0 train "${QUICK[@]}" --epochs 1 --set data.synthetic_samples=16384 \
  --set parallel.trace_steps=100000 --out "$run"
expect_stderr "cannot write $run/trace.json: .*No space left on device.*the run goes on"
[[ -f "$run/summary.json" ]] || fail "no summary.json after a trace.json that did not fit"
[[ ! -e "$run/trace.json" ]] || fail "a trace.json was left on a full disk"
no_temp_files "$run"
echo "ok: trace.json on a full disk: one warning, exit 0, summary.json written"
rm -rf "$MNT/filler" "$run"

# The kept checkpoints fill the disk: 2 of 384 kB fit in 1 MB, a third not. Each save that finds
# no space removes the older one (never the newest complete) and writes its file; said once.
run="$MNT/keep"
run_dtrain 0 train "${QUICK[@]}" --epochs 2 --set 'model.hidden=[640]' \
  --set train.checkpoint_every_steps=3 --out "$run"
[[ $(grep -c "no space for" "$TMP/err.txt") == 1 ]] || { cat "$TMP/err.txt" >&2; fail "expected one warning"; }
expect_stderr "no space for epoch-1.ckpt in $run/checkpoints: removed epoch-0-step-3.ckpt (older than epoch-0-step-6.ckpt, the newest complete checkpoint, which is kept) and wrote it"
[[ $(cat "$run/checkpoints/latest") == epoch-2.ckpt && -f "$run/summary.json" ]] \
  || fail "the run did not end with its epoch-2.ckpt and summary.json"
no_temp_files "$run/checkpoints"
echo "ok: checkpoints that fill the disk: the older removed, every save written, exit 0"
rm -rf "$run"

# A checkpoint that does not fit: epoch-1.ckpt (615 kB) fits in 1 MB, epoch-2.ckpt next to it not.
run="$MNT/ckpt"
run_dtrain 2 train "${QUICK[@]}" --epochs 2 --set 'model.hidden=[1024]' --out "$run"
tail -1 "$TMP/err.txt" | grep -q "cannot write $run/checkpoints/epoch-2.ckpt: .*No space left on device" \
  || { cat "$TMP/err.txt" >&2; fail "the error does not name epoch-2.ckpt and the full disk"; }
no_temp_files "$run/checkpoints"
[[ $(cat "$run/checkpoints/latest") == epoch-1.ckpt ]] || fail "latest no longer names epoch-1.ckpt"
mount -o remount,size=4m "$MNT"
run_dtrain 0 train --resume "$run" --epochs 2 --quiet
[[ $(summary_value "$run" resumed_from_epoch) == 1 ]] || fail "did not resume from epoch-1.ckpt"
[[ -f "$run/checkpoints/epoch-2.ckpt" ]] || fail "epoch-2.ckpt not written once there was room"
echo "ok: a checkpoint on a full disk: exit 2 naming it, epoch-1.ckpt intact, --resume continues"
