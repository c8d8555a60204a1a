#!/usr/bin/env bash
# `dtrain bench train|scaling|gemm|collectives --json` print JSON rows with the documented
# fields and plausible values (a smoke test of the command, not a timing: speed is measured by
# running the benchmark, see docs/PERFORMANCE.md). Usage: bash bench_test.sh /path/to/dtrain
set -euo pipefail
DTRAIN=$(realpath "$1")
fail() { echo "FAIL: $*" >&2; exit 1; }

"$DTRAIN" bench train --json --models mlp,lenet5 --threads 1,2 --steps 2 --warmup 1 --repeats 1 \
  | python3 -c '
import json, sys
rows = json.load(sys.stdin)
assert [(r["model"], r["threads"]) for r in rows] == [("mlp", 1), ("mlp", 2), ("lenet5", 1), ("lenet5", 2)], rows
for r in rows:
    assert r["batch"] == 128 and r["samples_per_second"] > 0, r
    assert r["samples_per_second_min"] <= r["samples_per_second"] <= r["samples_per_second_max"], r
assert rows[0]["parameters"] == 269322 and rows[2]["parameters"] == 61706, rows
' || fail "bench train --json rows"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
"$DTRAIN" bench scaling --json --config "$ROOT/examples/fashion_mlp.toml" --workers 1,2 \
  --rounds 2 --steps 3 --warmup 1 --set data.dataset=synthetic 2> /dev/null | python3 -c '
import json, sys
rows = json.load(sys.stdin)
assert [(r["strategy"], r["workers"]) for r in rows] == [("data_parallel", 1), ("data_parallel", 2)], rows
assert rows[0]["speedup"] == rows[0]["speedup_min"] == rows[0]["speedup_max"] == 1.0, rows
for r in rows:
    assert r["rate_unit"] == "samples/s" and r["samples_per_phase"] == 3 * 128, r
    assert 0 < r["rate_min"] <= r["rate"] <= r["rate_max"], r
' || fail "bench scaling --json rows (allreduce)"
"$DTRAIN" bench scaling --json --config "$ROOT/examples/hogwild_sparse.toml" --workers 1,2 \
  --rounds 2 --set data.synthetic_samples=5000 --set data.sparse_features=1000 2> /dev/null \
  | python3 -c '
import json, sys
rows = json.load(sys.stdin)
assert [(r["strategy"], r["workers"], r["rate_unit"]) for r in rows] == \
    [("hogwild", 1, "updates/s"), ("hogwild", 2, "updates/s")], rows
assert all(r["samples_per_phase"] == 5000 and r["rate"] > 0 for r in rows), rows
' || fail "bench scaling --json rows (hogwild)"

"$DTRAIN" bench gemm --json --threads 1 --repeats 1 | python3 -c '
import json, sys
rows = json.load(sys.stdin)
assert any(r["m"] == r["n"] == r["k"] == 1024 for r in rows), rows
assert all(r["gflops"] > 0 for r in rows), rows
' || fail "bench gemm --json rows"

"$DTRAIN" bench collectives --json --ranks 2 --sizes 4,1K,64K --iters 2 --warmup 1 | python3 -c '
import json, sys
rows = json.load(sys.stdin)
ops = {"allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "scatter", "gather",
       "alltoall"}
assert {r["op"] for r in rows} == ops, rows
algorithms = {r["algorithm"] for r in rows if r["op"] == "allreduce"}
# Every registered allreduce algorithm but native (inproc has none), three sizes each.
assert algorithms >= {"ring", "parameter-server", "sharded-ps", "tree", "halving-doubling",
                      "double-binary-tree", "hierarchical", "auto"}, algorithms
assert "native" not in algorithms
assert len(rows) == (len(algorithms) + 7) * 3, len(rows)
factor = {"allreduce": 1.0, "broadcast": 1.0, "reduce": 1.0, "allgather": 0.5,
          "reduce_scatter": 0.5, "scatter": 0.5, "gather": 0.5, "alltoall": 0.5}
for r in rows:
    for key in ("op", "algorithm", "transport", "ranks", "size", "count", "dtype", "time_us",
                "algbw", "busbw", "correct"):
        assert key in r, (key, r)
    assert r["correct"] is True, r
    assert r["transport"] == "inproc" and r["ranks"] == 2 and r["dtype"] == "f32", r
    assert r["size"] in (4, 8, 1024, 65536) and r["size"] == 4 * r["count"], r
    assert r["time_us"] > 0 and abs(r["busbw"] - factor[r["op"]] * r["algbw"]) <= 1e-9 * r["algbw"] + 1e-12, r
' || fail "bench collectives --json rows"
"$DTRAIN" bench collectives --op allreduce --algorithm ring --ranks 2 --sizes 4K --iters 2 \
  | grep -q 'alpha' || fail "bench collectives table has no alpha-beta fit"

# Bad values are one-line errors with a non-zero exit.
ERR=$(mktemp)
trap 'rm -f "$ERR"' EXIT
if "$DTRAIN" bench train --steps 0 2> "$ERR"; then fail "--steps 0 accepted"; fi
[[ $(wc -l < "$ERR") -eq 1 ]] && grep -q '^error: .*steps' "$ERR" \
  || fail "no one-line error for --steps 0: $(cat "$ERR")"
if "$DTRAIN" bench collectives --algorithm butterfly 2> "$ERR"; then fail "--algorithm butterfly accepted"; fi
[[ $(wc -l < "$ERR") -eq 1 ]] && grep -q '^error: .*butterfly.*ring' "$ERR" \
  || fail "no one-line error for --algorithm butterfly: $(cat "$ERR")"
if "$DTRAIN" bench scaling --config "$ROOT/examples/fashion_mlp_ps.toml" 2> "$ERR"; then
  fail "bench scaling of a ps config accepted"
fi
[[ $(wc -l < "$ERR") -eq 1 ]] && grep -q '^error: .*"parameter_server".*sweep --modes' "$ERR" \
  || fail "no one-line error for bench scaling of a ps config: $(cat "$ERR")"
echo "ok: bench train/scaling/gemm/collectives JSON"
