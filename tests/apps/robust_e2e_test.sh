#!/usr/bin/env bash
# End-to-end Byzantine-robust aggregation (docs/ROBUST.md, "Using it"): with 4 workers the median
# learns as the mean does; with 1 attacking rank sending -10 x its gradient the mean diverges while
# the median and the trimmed mean still learn; label flipping on one rank's data costs the mean
# accuracy; robust runs send the allgather's bytes, (P-1) x 4N per rank and step (summary.json
# beside the formula); a sweep over aggregators; impossible settings (Krum with too many Byzantine
# ranks, an unknown aggregator, an attack without attackers) fail with one line, exit 2.
# Usage: bash robust_e2e_test.sh /path/to/dtrain   (run by ctest as apps.robust_e2e_test)
set -euo pipefail
DTRAIN=$(realpath "$1")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$ROOT"

source "$ROOT/tests/apps/e2e_helpers.sh"  # fail, expect_error
CONFIG=examples/synthetic_quick.toml
# Not --quiet: the banner (stderr) names the aggregator and the attackers.
QUICK=(--set data.synthetic_samples=2048 --epochs 2 --workers 4)

run() {  # run NAME ARGS...: one training run into $TMP/NAME
  local name=$1; shift
  "$DTRAIN" train --config $CONFIG "${QUICK[@]}" "$@" --out "$TMP/$name" 2> "$TMP/$name.err" ||
    fail "$name ($*): $(cat "$TMP/$name.err")"
}
run mean --aggregator mean
run median --aggregator median
run mean_attacked --aggregator mean --attack scale:-10 --byzantine 1
run median_attacked --aggregator median --attack scale:-10 --byzantine 1
run trimmed_attacked --aggregator trimmed:0.25 --attack scale:-10 --byzantine 1
run mean_labelflip --aggregator mean --attack labelflip --byzantine 1
python3 - "$TMP" <<'PY' || fail "robust runs"
import json, sys
runs = {n: json.load(open(f"{sys.argv[1]}/{n}/summary.json"))
        for n in ("mean", "median", "mean_attacked", "median_attacked", "trimmed_attacked",
                  "mean_labelflip")}
acc = {n: s["final_test_accuracy"] for n, s in runs.items()}
print("accuracy:", {n: round(a, 3) for n, a in acc.items()})
assert acc["mean"] > 0.5 and acc["median"] > 0.5, acc
assert acc["median"] > acc["mean"] - 0.1, acc
# One rank sending -10 g: the mean steps along -1.75 g, uphill.
assert acc["mean_attacked"] < 0.3, acc
assert acc["median_attacked"] > 0.5 and acc["trimmed_attacked"] > 0.5, acc
# Label flipping on rank 3's data: the plain allreduce, trained partly on wrong labels.
assert 0.3 < acc["mean_labelflip"] < acc["mean"], acc
assert runs["mean_labelflip"]["parallel"]["attack"] == "labelflip", runs["mean_labelflip"]["parallel"]
p = runs["median"]["parallel"]
assert p["aggregator"] == "median" and p["attack"] == "none" and p["byzantine"] == 0, p
assert runs["mean"]["parallel"]["bytes_sent_per_rank_and_step"] < \
       0.6 * p["bytes_sent_per_rank_and_step"], "the mean is the plain allreduce: 2 (P-1)/P x 4N at most"
for name in ("median", "mean_attacked", "median_attacked"):
    q = runs[name]["parallel"]
    measured, predicted = q["bytes_sent_per_rank_and_step"], q["predicted_bytes_sent_per_rank_and_step"]
    # The formula (P-1) x 4N against the counters; control messages add a kilobyte or two.
    assert predicted <= measured <= predicted + 2048, (name, measured, predicted)
    assert q["buckets"] == 1, q
    assert q["zero_stage"] == 0, q
PY
grep -q "gradients aggregated: median of the 4 ranks' gradients" "$TMP/median_attacked.err" ||
  fail "no banner line: $(cat "$TMP/median_attacked.err")"
grep -q "attack scale:-10 by rank 3" "$TMP/median_attacked.err" ||
  fail "the banner does not name the attacker: $(cat "$TMP/median_attacked.err")"
echo "ok: mean and median learn; with one rank sending -10 g the mean fails, median and trimmed learn"

"$DTRAIN" sweep --config $CONFIG --set data.synthetic_samples=1024 --epochs 1 --workers 4 \
  --aggregator mean,median --attack signflip --byzantine 1 --out "$TMP/sweep" > "$TMP/sweep.txt" 2>&1 ||
  fail "sweep --aggregator: $(cat "$TMP/sweep.txt")"
[[ $(grep -c "data_parallel.aggregator=" "$TMP/sweep/sweep.csv") -eq 2 ]] ||
  fail "sweep.csv lacks the two aggregators: $(cat "$TMP/sweep/sweep.csv")"
echo "ok: dtrain sweep --aggregator mean,median --attack signflip --byzantine 1"

# A --set that holds only with the axis's values (worker momentum needs a robust aggregator) is
# checked per point, not against the config file's aggregator (mean).
"$DTRAIN" sweep --config $CONFIG --set data.synthetic_samples=1024 --epochs 1 --workers 4 \
  --aggregator median --set data_parallel.worker_momentum=0.9 --set optim.momentum=0 \
  --out "$TMP/sweep_wm" > "$TMP/sweep_wm.txt" 2>&1 ||
  fail "sweep --aggregator median with worker momentum: $(cat "$TMP/sweep_wm.txt")"
expect_error "needs robust aggregation" sweep --config $CONFIG --epochs 1 --workers 4 \
  --aggregator median,mean --set data_parallel.worker_momentum=0.9 --set optim.momentum=0 \
  --out "$TMP/sweep_wm_mean"
echo "ok: sweep --aggregator median --set data_parallel.worker_momentum=0.9"

expect_error "n > 2f + 2 = 4" train --config $CONFIG --workers 4 --aggregator krum --byzantine 1 \
  --out "$TMP/bad1"
expect_error "data_parallel.aggregator.*mode" train --config $CONFIG --workers 4 --aggregator mode \
  --out "$TMP/bad2"
expect_error "byzantine >= 1" train --config $CONFIG --workers 4 --attack alie --out "$TMP/bad3"
expect_error "f < P = 4" train --config $CONFIG --workers 4 --attack signflip --byzantine 4 \
  --out "$TMP/bad4"
expect_error "do not go together" train --config $CONFIG --workers 4 --aggregator median \
  --compression fp16 --out "$TMP/bad5"
echo "ok: impossible settings are one-line errors"
