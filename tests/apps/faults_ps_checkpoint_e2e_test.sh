#!/usr/bin/env bash
# End-to-end checkpoints of parameter-server and Hogwild! runs: `dtrain train` for 2 epochs against
# 1 epoch then `--resume --epochs 2`. bsp (2 workers, 2 servers, separate and colocated): the final
# checkpoints hold the same parameters and optimizer state bit for bit, and the loss lines agree.
# async: the resumed run loads, trains on and finishes. Hogwild! with one thread (sequential SGD):
# bitwise; with two racing threads: it resumes from the checkpoint and reaches a sane accuracy.
# Inside epochs (train.checkpoint_every_steps): Hogwild! with one thread resumes bitwise from a
# pause; async with top-k pushes writes every worker's residual and resumes to the end.
# Usage: bash faults_ps_checkpoint_e2e_test.sh /path/to/dtrain
#        (run by ctest as apps.faults_ps_checkpoint_e2e_test)
set -euo pipefail
DTRAIN=$(realpath "$1")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$ROOT"
source tests/apps/e2e_helpers.sh
export DTRAIN_COMM_TIMEOUT_MS=20000
QUICK=(--config examples/synthetic_quick.toml --quiet --set data.synthetic_samples=1024
       --set data.synthetic_test_samples=256)

# Compares two checkpoints' parameters and optimizer state (checkpoint.h's layout) within TOL.
compare() {
  python3 - "$1" "$2" "${3:-0}" <<'PY'
import struct, sys
def read(path):
    b = open(path, "rb").read()
    assert b[:8] == b"DTRAINCK", path
    at = 24
    def take(fmt):
        nonlocal at
        v = struct.unpack_from("<" + fmt, b, at); at += struct.calcsize("<" + fmt); return v
    def text():
        nonlocal at
        (n,) = take("I"); v = b[at:at + n].decode(); at += n; return v
    epoch, step, optimizer_steps = take("qqqQqq")[:3]
    for _ in range(take("I")[0]): text(); take("d")
    for _ in range(2):
        for _ in range(take("I")[0]):
            text(); (nd,) = take("I"); take("q" * nd); take("qqB")
    (n,) = take("q"); params = take("f" * n)
    (n,) = take("q"); take("f" * n)
    state = {}
    for _ in range(take("I")[0]):
        name = text(); (n,) = take("q"); state[name] = take("f" * n)
    return (epoch, step, optimizer_steps), params, state
(ka, pa, sa), (kb, pb, sb), tol = read(sys.argv[1]), read(sys.argv[2]), float(sys.argv[3])
assert ka == kb, f"epoch, step, optimizer steps: {ka} vs {kb}"
assert sorted(sa) == sorted(sb), f"optimizer state {sorted(sa)} vs {sorted(sb)}"
def gap(x, y):
    assert len(x) == len(y), (len(x), len(y))
    return max((abs(p - q) for p, q in zip(x, y)), default=0.0)
d = max([gap(pa, pb)] + [gap(sa[k], sb[k]) for k in sa])
assert d <= tol, f"max |difference| {d} > {tol}"
PY
}

# The epoch records' training and test losses (the loss lines of metrics.jsonl).
losses() {
  python3 -c '
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("kind") == "epoch": print(r["epoch"], r["train_loss"], r.get("test_loss"))
' "$1"
}

for mode in separate colocated; do
  extra=(--strategy parameter_server --workers 2 --servers 2)
  [[ $mode == colocated ]] && extra+=(--colocate-servers)
  "$DTRAIN" train "${QUICK[@]}" "${extra[@]}" --epochs 2 --out "$TMP/bsp-$mode-whole"
  "$DTRAIN" train "${QUICK[@]}" "${extra[@]}" --epochs 1 --out "$TMP/bsp-$mode-split"
  "$DTRAIN" train --resume "$TMP/bsp-$mode-split" --epochs 2 2> "$TMP/resume.err"
  grep -q "resuming at epoch 2" "$TMP/resume.err" || fail "bsp $mode: no resume line"
  compare "$TMP/bsp-$mode-whole/checkpoints/epoch-2.ckpt" \
    "$TMP/bsp-$mode-split/checkpoints/epoch-2.ckpt" || fail "bsp $mode: the resumed run differs"
  [[ $(losses "$TMP/bsp-$mode-whole/metrics.jsonl") == $(losses "$TMP/bsp-$mode-split/metrics.jsonl") ]] ||
    fail "bsp $mode: loss lines differ"
done
echo "ok: bsp parameter servers resume bitwise (2 workers, 2 servers, separate and colocated)"

"$DTRAIN" train "${QUICK[@]}" --strategy parameter_server --workers 3 --consistency async \
  --set optim.momentum=0.5 --epochs 1 --out "$TMP/async"
"$DTRAIN" train --resume "$TMP/async" --epochs 2 --quiet
python3 - "$TMP/async" <<'PY' || fail "async resume"
import json, sys
s = json.load(open(f"{sys.argv[1]}/summary.json"))
assert s["resumed_from_epoch"] == 1 and s["epochs"] == 2, s
assert s["final_test_accuracy"] > 0.5, s["final_test_accuracy"]
PY
[[ -f "$TMP/async/checkpoints/epoch-2.ckpt" ]] || fail "async: no epoch-2 checkpoint"
echo "ok: async parameter servers resume and train on"

HOGWILD=(--config examples/hogwild_sparse.toml --quiet --set data.synthetic_samples=20000
         --set data.synthetic_test_samples=2000 --set data.sparse_features=2000)
"$DTRAIN" train "${HOGWILD[@]}" --workers 1 --epochs 2 --out "$TMP/hogwild-whole"
"$DTRAIN" train "${HOGWILD[@]}" --workers 1 --epochs 1 --out "$TMP/hogwild-split"
"$DTRAIN" train --resume "$TMP/hogwild-split" --epochs 2 --quiet
compare "$TMP/hogwild-whole/checkpoints/epoch-2.ckpt" "$TMP/hogwild-split/checkpoints/epoch-2.ckpt" ||
  fail "hogwild, 1 thread: the resumed run differs"
"$DTRAIN" train "${HOGWILD[@]}" --workers 2 --epochs 1 --out "$TMP/hogwild-racing"
"$DTRAIN" train --resume "$TMP/hogwild-racing" --epochs 3 --quiet
python3 - "$TMP/hogwild-racing" <<'PY' || fail "hogwild, 2 threads: resume"
import json, sys
s = json.load(open(f"{sys.argv[1]}/summary.json"))
assert s["resumed_from_epoch"] == 1 and s["epochs"] == 3, s
assert s["final_test_accuracy"] > 0.7, s["final_test_accuracy"]
records = [json.loads(l) for l in open(f"{sys.argv[1]}/metrics.jsonl")]
assert [r["epoch"] for r in records if r.get("kind") == "epoch"] == [1, 2, 3], records
PY
echo "ok: hogwild resumes (1 thread bitwise; 2 threads from the checkpoint to a sane accuracy)"

# Keeps only checkpoint $2 of run $1 in a new run folder $3 (resolved.toml and metrics.jsonl too).
cut_at() {
  mkdir -p "$3/checkpoints"
  cp "$1/resolved.toml" "$1/metrics.jsonl" "$3/"
  cp "$1/checkpoints/$2" "$3/checkpoints/"
  echo "$2" > "$3/checkpoints/latest"
}
"$DTRAIN" train "${HOGWILD[@]}" --workers 1 --epochs 2 --set train.checkpoint_every_steps=7 \
  --set train.keep_checkpoints=0 --out "$TMP/hogwild-steps"
[[ -f "$TMP/hogwild-steps/checkpoints/epoch-1-step-28192.ckpt" ]] ||
  fail "hogwild: no checkpoint after thread 0's 28th step (the 8th of the 20 chunks of epoch 2)"
cut_at "$TMP/hogwild-steps" epoch-1-step-28192.ckpt "$TMP/hogwild-cut"
"$DTRAIN" train --resume "$TMP/hogwild-cut" --quiet
compare "$TMP/hogwild-whole/checkpoints/epoch-2.ckpt" "$TMP/hogwild-cut/checkpoints/epoch-2.ckpt" ||
  fail "hogwild, 1 thread: the run resumed inside epoch 2 differs"
"$DTRAIN" train "${QUICK[@]}" --strategy parameter_server --workers 2 --consistency async \
  --compression topk:0.1 --epochs 2 --set train.checkpoint_every_steps=5 \
  --set train.keep_checkpoints=0 --out "$TMP/async-steps"
python3 - "$TMP/async-steps/checkpoints/epoch-0-step-5.ckpt" <<'PY' || fail "async: step checkpoint"
import sys
b = open(sys.argv[1], "rb").read()
for name in (b"rank0/compression/residual", b"rank1/compression/residual", b"ps/residual_workers"):
    assert name in b, name
PY
cut_at "$TMP/async-steps" epoch-0-step-5.ckpt "$TMP/async-cut"
"$DTRAIN" train --resume "$TMP/async-cut" --quiet 2> "$TMP/async-cut.err"
[[ -f "$TMP/async-cut/checkpoints/epoch-2.ckpt" ]] || fail "async: the resume did not finish"
echo "ok: inside epochs, hogwild (1 thread) resumes bitwise and async keeps every residual"
