#!/usr/bin/env bash
# Measures dtrain against its peers on this machine in one run, for docs/PERFORMANCE.md:
#   - OpenBLAS's own sgemm at 1024^3 (../shared/peers/src/sgemm_bench.c) vs `dtrain bench gemm`;
#   - PyTorch 1.13 training samples/s (../shared/peers/scripts/train_fmnist.py, 1 epoch, MLP and
#     LeNet-5, 1 and 2 threads) vs `dtrain bench train`.
# Rounds alternate peer and dtrain runs so that machine noise hits both; the summary gives medians.
# Usage: scripts/compare_peers.sh [ROUNDS]   (default 3; needs python3-torch, built dtrain in build/)
# Raw outputs go to $OUT (default /tmp/dtrain-peers).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PEERS="${PEERS:-$ROOT/../shared/peers}"
DTRAIN="${DTRAIN:-$ROOT/build/dtrain}"
OUT="${OUT:-/tmp/dtrain-peers}"
ROUNDS="${1:-3}"
mkdir -p "$OUT"
[[ -x "$DTRAIN" ]] || { echo "error: $DTRAIN not built; run scripts/setup.sh" >&2; exit 1; }
[[ -d "$PEERS" ]] || { echo "error: peers folder $PEERS not found; set PEERS=" >&2; exit 1; }

gcc -O2 -march=native -o "$OUT/sgemm_bench" "$PEERS/src/sgemm_bench.c" -lopenblas
: > "$OUT/results.jsonl"
for round in $(seq "$ROUNDS"); do
  echo "round $round/$ROUNDS" >&2
  for t in 1 2; do
    OPENBLAS_NUM_THREADS=$t "$OUT/sgemm_bench" "$t" 1024 50 \
      | sed "s/^/{\"who\":\"openblas\",\"threads\":$t,\"raw\":\"/; s/$/\"}/" >> "$OUT/results.jsonl"
  done
  "$DTRAIN" bench gemm --json --threads 1,2 | python3 -c '
import json, sys
for r in json.load(sys.stdin): print(json.dumps({"who": "dtrain-gemm", **r}))' >> "$OUT/results.jsonl"
  for model in mlp lenet; do
    for t in 1 2; do
      env OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=1 /usr/bin/python3 "$PEERS/scripts/train_fmnist.py" \
        --model "$model" --threads "$t" --seed "$round" --epochs 1 --max-epochs 1 2>/dev/null \
        | python3 -c '
import json, sys
r = json.loads(sys.stdin.readline())
print(json.dumps({"who": "pytorch", "model": r["model"], "threads": r["threads"],
                  "samples_per_second": r["samples_per_s_epoch1"]}))' >> "$OUT/results.jsonl"
    done
  done
  "$DTRAIN" bench train --json --models mlp,lenet5 --threads 1,2 --steps 100 --repeats 7 \
    | python3 -c '
import json, sys
for r in json.load(sys.stdin):
    print(json.dumps({"who": "dtrain", "model": r["model"].replace("lenet5", "lenet"),
                      "threads": r["threads"], "samples_per_second": r["samples_per_second"]}))' \
    >> "$OUT/results.jsonl"
done

python3 - "$OUT/results.jsonl" <<'PY'
import json, re, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(xs): return statistics.median(xs) if xs else float("nan")
print("| model | threads | PyTorch 1.13 samples/s | dtrain samples/s | dtrain / PyTorch |")
print("|---|---|---|---|---|")
for model in ("mlp", "lenet"):
    for t in (1, 2):
        p = med([r["samples_per_second"] for r in rows if r["who"] == "pytorch" and r["model"] == model and r["threads"] == t])
        d = med([r["samples_per_second"] for r in rows if r["who"] == "dtrain" and r["model"] == model and r["threads"] == t])
        print(f"| {model} | {t} | {p:,.0f} | {d:,.0f} | {d / p:.2f} |")
for model in ("mlp", "lenet"):
    d1 = med([r["samples_per_second"] for r in rows if r["who"] == "dtrain" and r["model"] == model and r["threads"] == 1])
    d2 = med([r["samples_per_second"] for r in rows if r["who"] == "dtrain" and r["model"] == model and r["threads"] == 2])
    print(f"\n{model}: dtrain 2 threads / 1 thread = {d2 / d1:.2f}")
print("\n| GEMM 1024^3 | threads | OpenBLAS sgemm_bench GFLOP/s | dtrain gemm GFLOP/s | ratio |")
print("|---|---|---|---|---|")
for t in (1, 2):
    ob = []
    for r in rows:
        if r["who"] == "openblas" and r["threads"] == t:
            m = re.findall(r"GFLOPs_median=([0-9.]+)", r["raw"])
            if m: ob.append(float(m[-1]))
    d = med([r["gflops"] for r in rows if r["who"] == "dtrain-gemm" and r["threads"] == t and r["m"] == 1024])
    o = med(ob)
    print(f"| 1024x1024x1024 | {t} | {o:.1f} | {d:.1f} | {d / o:.2f} |")
PY
