#!/usr/bin/env bash
# End-to-end language model: a small gpt on Debian's fortunes corpus (data.dataset = "text")
# learns (the held-out loss falls well below log 256 = 5.55 nats per byte), trains the same under
# data parallelism (2 ranks as threads, and ZeRO-1), resumes, and `dtrain generate` continues a
# prompt from the run's checkpoint, the same text for the same seed; bad input fails with one line.
# Usage: bash gpt_e2e_test.sh /path/to/dtrain   (run by ctest as apps.gpt_e2e_test)
set -euo pipefail
DTRAIN=$(realpath "$1")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$ROOT"

source "$ROOT/tests/apps/e2e_helpers.sh"  # fail, expect_error
CONFIG=examples/fortunes_gpt.toml
[[ -d /usr/share/games/fortunes ]] || fail "no /usr/share/games/fortunes: apt-get install fortunes"
# 1 block of width 32, context 32: 40 steps of 16 windows per epoch.
SMALL=(--set model.gpt_layers=1 --set model.gpt_dim=32 --set model.gpt_heads=2 --set data.block=32
       --set data.text_windows=640 --set data.text_test_windows=64 --set train.batch_size=16
       --set train.eval_every_steps=0 --set optim.lr=0.003)

"$DTRAIN" train --config $CONFIG "${SMALL[@]}" --epochs 2 --quiet --out "$TMP/one"
"$DTRAIN" train --config $CONFIG "${SMALL[@]}" --epochs 2 --quiet --workers 2 --zero-stage 0 \
  --out "$TMP/dp"
"$DTRAIN" train --config $CONFIG "${SMALL[@]}" --epochs 2 --quiet --workers 2 --out "$TMP/zero"
"$DTRAIN" train --config $CONFIG "${SMALL[@]}" --epochs 1 --quiet --out "$TMP/part"
"$DTRAIN" train --resume "$TMP/part" --epochs 2 --quiet
python3 - "$TMP" <<'PY' || fail "gpt runs"
import json, sys
runs = {n: json.load(open(f"{sys.argv[1]}/{n}/summary.json")) for n in ("one", "dp", "zero", "part")}
for name, s in runs.items():
    assert s["final_test_loss"] < 3.6, (name, s["final_test_loss"])  # log(256) = 5.55
# Two ranks follow one worker (the same global batch; sums in another order, which AdamW
# amplifies a little over 80 steps).
assert abs(runs["one"]["final_test_loss"] - runs["dp"]["final_test_loss"]) < 5e-3, runs
assert abs(runs["one"]["final_test_loss"] - runs["zero"]["final_test_loss"]) < 5e-3, runs
assert runs["part"]["final_test_loss"] == runs["one"]["final_test_loss"], "resume is bitwise"
PY
echo "ok: a small gpt learns fortunes alone, with 2 ranks (DDP and ZeRO-1), and resumes bitwise"

"$DTRAIN" generate --run "$TMP/one" --prompt "Q: " --bytes 40 --seed 3 > "$TMP/gen1"
"$DTRAIN" generate --run "$TMP/one" --prompt "Q: " --bytes 40 --seed 3 > "$TMP/gen2"
cmp -s "$TMP/gen1" "$TMP/gen2" || fail "generate is not reproducible for one seed"
[[ $(head -c 3 "$TMP/gen1") == "Q: " ]] || fail "generate does not start with the prompt"
(( $(wc -c < "$TMP/gen1") == 44 )) || fail "generate wrote $(wc -c < "$TMP/gen1") bytes, not 3 + 40 + newline"
echo "ok: dtrain generate"

expect_error "never occurs in the training text" generate --run "$TMP/one" --prompt $'\x01'
expect_error "resolved.toml is missing" generate --run "$TMP" --prompt "Q"
mkdir -p "$TMP/nockpt" && cp "$TMP/one/resolved.toml" "$TMP/nockpt/"
expect_error "no checkpoint to generate from: .*holds none yet; this run writes its first .*at the end of epoch" \
  generate --run "$TMP/nockpt" --prompt "Q"
"$DTRAIN" train --config examples/synthetic_quick.toml --epochs 1 --quiet --out "$TMP/mlp"
expect_error "dtrain generate samples text from gpt runs" generate --run "$TMP/mlp" --prompt "Q"
expect_error "does not divide 'model.gpt_dim'" train --config $CONFIG --set model.gpt_heads=3 \
  --out "$TMP/bad1"
expect_error "model \"gpt\" reads data set \"text\"" train --config $CONFIG \
  --set data.dataset=fashion-mnist --set data.path=/usr/share/datasets/fashion-mnist --out "$TMP/bad2"
printf 'short' > "$TMP/short.txt"
expect_error "has 5 bytes" train --config $CONFIG --set data.path="$TMP/short.txt" --out "$TMP/bad3"
mkdir -p "$TMP/empty"
expect_error "is empty" train --config $CONFIG --set data.path="$TMP/empty" --out "$TMP/bad4"
echo "ok: bad gpt input is one-line errors"
