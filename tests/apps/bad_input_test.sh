#!/usr/bin/env bash
# Bad input to `dtrain train`: each case must print exactly one line starting with "error:" on
# stderr and exit non-zero (1 for command-line usage, 2 for bad input), never crash or trace.
# Usage: bash bad_input_test.sh /path/to/dtrain     (run by ctest as apps.bad_input_test)
set -uo pipefail
DTRAIN=$(realpath "$1")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$ROOT"
failures=0

# expect_error NAME CODE PATTERN -- ARGS...: dtrain ARGS must exit with CODE and print one line,
# "error: ...", matching PATTERN (grep -E).
expect_error() {
  local name=$1 code=$2 pattern=$3
  shift 4
  "$DTRAIN" "$@" > "$TMP/out" 2> "$TMP/err"
  local rc=$?
  local lines
  lines=$(wc -l < "$TMP/err")
  if [[ $rc -ne $code ]]; then
    echo "FAIL $name: exit code $rc, expected $code"; cat "$TMP/err"; failures=$((failures + 1))
  elif [[ $lines -ne 1 ]] || ! head -1 "$TMP/err" | grep -q '^error: '; then
    echo "FAIL $name: stderr is not one 'error:' line:"; cat "$TMP/err"; failures=$((failures + 1))
  elif ! grep -Eq -- "$pattern" "$TMP/err"; then
    echo "FAIL $name: message does not match /$pattern/:"; cat "$TMP/err"; failures=$((failures + 1))
  else
    echo "ok $name: $(cat "$TMP/err")"
  fi
}

quick=examples/synthetic_quick.toml

expect_error missing-data-path 2 "/nonexistent/fmnist" -- \
  train --config examples/fashion_mlp.toml --set data.path=/nonexistent/fmnist --out "$TMP/r1"

printf '[optim]\nlrr = 0.1\n' > "$TMP/typo.toml"
expect_error unknown-key 2 "unknown config key 'optim.lrr' in .*typo.toml; accepted keys in \[optim\]: name, lr" -- \
  train --config "$TMP/typo.toml" --out "$TMP/r2"

printf '[optimizer]\nlr = 0.1\n' > "$TMP/section.toml"
expect_error unknown-section 2 "unknown config section '\[optimizer\]'" -- \
  train --config "$TMP/section.toml" --out "$TMP/r3"

expect_error out-of-range 2 "'optim.momentum' = 1.5 .* out of range; accepted: 0 <= value < 1" -- \
  train --config "$quick" --set optim.momentum=1.5 --out "$TMP/r4"

expect_error wrong-type 2 "'train.epochs' .* must be an integer" -- \
  train --config "$quick" --set train.epochs=many --out "$TMP/r5"

printf '[train]\nepochs = = 2\n' > "$TMP/syntax.toml"
expect_error malformed-toml 2 "cannot parse config .*syntax.toml at line 2" -- \
  train --config "$TMP/syntax.toml" --out "$TMP/r6"

expect_error missing-config 2 "cannot open config file $TMP/none.toml" -- \
  train --config "$TMP/none.toml"

expect_error infinite-lr 2 "'optim.lr' = inf .* out of range; accepted: value > 0 \(a finite number\)" -- \
  train --config "$quick" --set optim.lr=inf --out "$TMP/r9"

expect_error mnist-on-fashion-files 2 "data.dataset' = \"mnist\" .* reads data.path = .*fashion-mnist" -- \
  train --config "$quick" --set data.dataset=mnist --out "$TMP/r10"

expect_error shortcut-and-set 2 "--set train.epochs=2 and a shortcut flag giving train.epochs=1 both set train.epochs" -- \
  train --config "$quick" --epochs 1 --set train.epochs=2 --out "$TMP/r11"

# A sweep prints a progress line per finished point, then the one error line.
"$DTRAIN" sweep --config "$quick" --grid data.dataset=synthetic,cifar10 --set data.path=/nonexistent \
  --epochs 1 --out "$TMP/sweep" > /dev/null 2> "$TMP/err"
rc=$?
if [[ $rc -ne 2 ]] || ! tail -1 "$TMP/err" | grep -Eq "^error: sweep point data.dataset=cifar10: .*; the 1 finished point\(s\) are in $TMP/sweep/sweep.csv" ||
   [[ ! -f "$TMP/sweep/sweep.csv" ]]; then
  echo "FAIL sweep-point-fails (exit $rc):"; cat "$TMP/err"; failures=$((failures + 1))
else
  echo "ok sweep-point-fails: $(tail -1 "$TMP/err")"
fi

expect_error bench-gemm-repeats 1 "--repeats: 0 is below 1" -- bench gemm --repeats 0

# A corrupt checkpoint on --resume: flip one byte in the middle of the only checkpoint.
"$DTRAIN" train --config "$quick" --epochs 1 --quiet --out "$TMP/run" || { echo "FAIL setup run"; exit 1; }
python3 - "$TMP/run/checkpoints/epoch-1.ckpt" <<'PY'
import sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
data[len(data) // 2] ^= 0x55
open(path, "wb").write(data)
PY
cp "$TMP/run/resolved.toml" "$TMP/resolved-before"
expect_error corrupt-checkpoint 2 "checkpoint .*epoch-1.ckpt is corrupt: CRC-32" -- \
  train --resume "$TMP/run" --epochs 2
# A failed resume leaves the run folder as it was.
cmp -s "$TMP/run/resolved.toml" "$TMP/resolved-before" ||
  { echo "FAIL: a failed --resume rewrote resolved.toml"; failures=$((failures + 1)); }
head -c 100 "$TMP/run/checkpoints/epoch-1.ckpt" > "$TMP/cut" && mv "$TMP/cut" "$TMP/run/checkpoints/epoch-1.ckpt"
expect_error truncated-checkpoint 2 "epoch-1.ckpt is truncated" -- \
  train --resume "$TMP/run" --epochs 2
expect_error resume-other-key 2 "only train.epochs" -- \
  train --resume "$TMP/run" --set optim.lr=0.5
expect_error resume-not-a-run 2 "resolved.toml is missing" -- \
  train --resume "$TMP"

expect_error existing-run 2 "already holds a run" -- \
  train --config "$quick" --epochs 1 --quiet --out "$TMP/run"

expect_error unknown-flag 1 "see .dtrain train --help" -- train --config "$quick" --bogus
expect_error no-config 1 "--config FILE or --resume DIR" -- train
expect_error no-command 1 "needs a command: train, sweep, config, bench" --
expect_error unknown-command 1 "unknown command 'nosuchcmd' for .dtrain.: the commands are" -- nosuchcmd
expect_error unknown-bench 1 "unknown command 'nosuch' for .dtrain bench." -- bench nosuch
expect_error config-is-a-directory 2 "config file $TMP is a directory" -- train --config "$TMP"
expect_error zero-workers 1 "--workers: 0 is below 1, the smallest accepted value" -- \
  train --config "$quick" --workers 0
expect_error not-a-number 1 "--epochs: 'x' is not a whole number" -- train --config "$quick" --epochs x
expect_error straggler-rank 2 "slows rank 5, but this run has 2 worker rank\(s\), 0 to 1" -- \
  train --config "$quick" --workers 2 --straggler rank=5,slowdown=2 --out "$TMP/r7"
expect_error scaling-straggler 2 "slows rank 1, but this run has 1 worker rank" -- \
  bench scaling --config "$quick" --workers 1,2 --set 'parallel.straggler="rank=1,slowdown=2"'
expect_error sweep-straggler 2 "sweep point parallel.workers=2: .*slows rank 3" -- \
  sweep --config "$quick" --workers 4,2 --straggler rank=3,slowdown=2 --out "$TMP/sw"
expect_error nested-help-hint 1 "see .dtrain bench scaling --help." -- \
  bench scaling --config "$quick" --bogus
expect_error scaling-workers 2 "--workers 1,5000: each count must be in \[1, 1024\]" -- \
  bench scaling --config "$quick" --workers 1,5000
expect_error collective-ranks 2 "ranks 100000 is not in \[1, 1024\]" -- \
  bench collectives --op allreduce --ranks 100000 --sizes 4
expect_error collective-memory 2 "more than this machine's .* GiB; give smaller --sizes" -- \
  bench collectives --op allreduce --ranks 2 --sizes 99999G
expect_error gemm-threads 2 "--threads 0 is not >= 1" -- bench gemm --threads 0

# Layer lists (docs/MODELS.md): kinds and parameters when the file is read, shapes when the model is
# built from the data (under two workers too: still one line).
layers_head='[model]\nname = "layers"\n[data]\ndataset = "synthetic"\nsynthetic_shape = [1, 8, 8]\n'
printf "$layers_head"'[[model.layer]]\nkind = "dense"\n' > "$TMP/kind.toml"
expect_error layer-unknown-kind 2 "model.layer\[0\] in .*kind.toml: unknown kind 'dense'; accepted kinds: linear, conv2d" -- \
  train --config "$TMP/kind.toml" --out "$TMP/l1"
printf "$layers_head"'[[model.layer]]\nkind = "flatten"\n[[model.layer]]\nkind = "linear"\nunits = 10\n' > "$TMP/param.toml"
expect_error layer-unknown-parameter 2 "model.layer\[1\] \(linear\) in .*param.toml: unknown parameter 'units'; accepted parameters of linear: name, out_features" -- \
  train --config "$TMP/param.toml" --out "$TMP/l2"
printf "$layers_head"'[[model.layer]]\nkind = "linear"\nout_features = 32\n[[model.layer]]\nkind = "linear"\nout_features = "classes"\n' > "$TMP/misfit.toml"
expect_error layer-misfit 2 "model.layer\[0\] \(linear\) takes \[B, features\] or \[B, T, features\], got \[B, 1, 8, 8\]; put a flatten before it" -- \
  train --config "$TMP/misfit.toml" --workers 2 --out "$TMP/l3"
printf "$layers_head"'[[model.layer]]\nkind = "flatten"\n[[model.layer]]\nkind = "linear"\nout_features = 12\n' > "$TMP/classes.toml"
expect_error layer-classes 2 "model.layer\[1\] \(linear\), the last layer, gives \[B, 12\] but the loss needs \[B, 10\]" -- \
  train --config "$TMP/classes.toml" --out "$TMP/l4"
# Parameter-server keys under data_parallel: a warning, and the run goes on.
"$DTRAIN" train --config "$quick" --epochs 1 --quiet --consistency ssp --out "$TMP/r8" 2> "$TMP/err"
grep -q '\[parameter_server\] keys are ignored' "$TMP/err" ||
  { echo "FAIL: no warning for a ps key under allreduce:"; cat "$TMP/err"; failures=$((failures + 1)); }

"$DTRAIN" train --help > "$TMP/help" 2>&1 || { echo "FAIL: train --help exited non-zero"; failures=$((failures + 1)); }
for word in --config --set --out --resume --epochs --threads --quiet Examples summary.json metrics.jsonl; do
  grep -q -- "$word" "$TMP/help" || { echo "FAIL: train --help does not mention $word"; failures=$((failures + 1)); }
done
"$DTRAIN" --version | grep -Eq '^dtrain [0-9]+\.[0-9]+\.[0-9]+$' || { echo "FAIL: --version"; failures=$((failures + 1)); }

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "all bad-input cases passed"
