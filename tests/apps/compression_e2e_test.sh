#!/usr/bin/env bash
# End-to-end gradient compression (docs/COMPRESSION.md): `dtrain train --compression CODEC` for
# each family (cast, gathered, low rank) learns, sends the bytes its formula predicts (the banner's
# and summary.json's), and sends far fewer than uncompressed training; a sweep over codecs; the same
# under mpirun (2 processes); bad codecs fail with one line, exit 2.
# Usage: bash compression_e2e_test.sh /path/to/dtrain   (run by ctest as apps.compression_e2e_test)
set -euo pipefail
DTRAIN=$(realpath "$1")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$ROOT"

source "$ROOT/tests/apps/e2e_helpers.sh"  # fail, expect_error
CONFIG=examples/synthetic_quick.toml
# --zero-stage 0: the uncompressed baseline is a plain allreduce, as every compressed run is.
# No checkpoints: a checkpoint allgathers every rank's error-feedback residual ((P-1) x 4N bytes
# per rank), which would count among the steps' bytes compared with the formula here.
QUICK=(--set data.synthetic_samples=2048 --epochs 2 --quiet --workers 2 --zero-stage 0
       --set train.checkpoint_every=0)

for codec in none fp16 topk:0.05 powersgd:2; do
  "$DTRAIN" train --config $CONFIG "${QUICK[@]}" --compression $codec --out "$TMP/${codec/:/_}" \
    2> "$TMP/${codec/:/_}.err" || fail "--compression $codec: $(cat "$TMP/${codec/:/_}.err")"
done
python3 - "$TMP" <<'PY' || fail "compressed runs"
import json, sys
runs = {c: json.load(open(f"{sys.argv[1]}/{c}/summary.json"))
        for c in ("none", "fp16", "topk_0.05", "powersgd_2")}
plain = runs["none"]["parallel"]["bytes_sent_per_rank_and_step"]
for name, s in runs.items():
    p = s["parallel"]
    assert p["compression"] == name.replace("_", ":"), p
    # The byte counters against the formula: control messages (per-bucket header checks, the
    # fused update's barrier) add up to a kilobyte or two.
    measured, predicted = p["bytes_sent_per_rank_and_step"], p["predicted_bytes_sent_per_rank_and_step"]
    assert predicted <= measured <= predicted + 2048, (name, measured, predicted)
    assert s["final_test_accuracy"] > 0.5, (name, s["final_test_accuracy"])
assert runs["fp16"]["parallel"]["bytes_sent_per_rank_and_step"] < 0.55 * plain
assert runs["topk_0.05"]["parallel"]["bytes_sent_per_rank_and_step"] < 0.15 * plain
assert runs["powersgd_2"]["parallel"]["bytes_sent_per_rank_and_step"] < 0.25 * plain
assert runs["topk_0.05"]["parallel"]["error_feedback"] is True
assert runs["fp16"]["parallel"]["error_feedback"] is False
PY
grep -q "gradients compressed: topk:0.05 by allgather, error feedback on" "$TMP/topk_0.05.err" ||
  grep -rq "topk" "$TMP/topk_0.05/summary.json" || fail "no banner line for topk"
echo "ok: none, fp16, topk:0.05 and powersgd:2 learn and send the bytes of their formulas"

# --compression with a --set that validates only together with it (DGC's momentum correction).
"$DTRAIN" train --config $CONFIG "${QUICK[@]}" --compression topk:0.05 \
  --set data_parallel.momentum_correction=0.9 --set optim.momentum=0 --out "$TMP/dgc" ||
  fail "--compression topk:0.05 with --set data_parallel.momentum_correction was refused"
echo "ok: --compression with momentum correction set by --set"

"$DTRAIN" sweep --config $CONFIG --set data.synthetic_samples=1024 --epochs 1 --workers 2 \
  --compression none,sign,qsgd:4 --out "$TMP/sweep" > "$TMP/sweep.txt" 2>&1 ||
  fail "sweep --compression: $(cat "$TMP/sweep.txt")"
[[ $(grep -c "data_parallel.compression=" "$TMP/sweep/sweep.csv") -eq 3 ]] ||
  fail "sweep.csv lacks the three codecs: $(cat "$TMP/sweep/sweep.csv")"
grep -q "predicted step time = compute + codec" "$TMP/sweep.txt" ||
  fail "sweep --compression printed no predicted step times: $(cat "$TMP/sweep.txt")"
python3 - "$TMP/sweep/step_time_model.json" <<'PY' || fail "step_time_model.json"
import json, sys
m = json.load(open(sys.argv[1]))
assert [r["codec"] for r in m["rows"]] == ["none", "sign", "qsgd:4"], m
assert m["alpha_seconds"] > 0 and m["beta_seconds_per_byte"] > 0, m
for r in m["rows"]:
    total = r["compute_seconds"] + r["codec_seconds"] + r["comm_seconds"]
    assert abs(r["predicted_step_seconds"] - total) < 1e-12, r
    assert r["measured_step_seconds"] > 0 and r["predicted_fp16_step_seconds"] > 0, r
    assert (r["codec_seconds"] == 0) == (r["codec"] == "none"), r
PY
echo "ok: dtrain sweep --compression none,sign,qsgd:4, with predicted step times"

# Parameter servers (docs/PS.md, "Compression"): pushes through the codec, pulls cast to fp16, for
# bsp, async and ssp over 2 servers; each push and pull carries exactly its formula's bytes.
for consistency in bsp async ssp; do
  "$DTRAIN" train --config $CONFIG --set data.synthetic_samples=2048 --epochs 2 \
    --strategy parameter_server --workers 2 --servers 2 --consistency $consistency \
    --compression topk:0.05 --set parameter_server.pull_compression=fp16 --out "$TMP/ps_$consistency" \
    > "$TMP/ps_$consistency.err" 2>&1 || fail "ps $consistency topk: $(cat "$TMP/ps_$consistency.err")"
done
"$DTRAIN" train --config $CONFIG --set data.synthetic_samples=2048 --epochs 2 --quiet \
  --strategy parameter_server --workers 2 --servers 2 --out "$TMP/ps_none" > "$TMP/ps_none.err" 2>&1 ||
  fail "ps uncompressed: $(cat "$TMP/ps_none.err")"
python3 - "$TMP" <<'PY' || fail "compressed parameter-server runs"
import json, sys
plain = json.load(open(f"{sys.argv[1]}/ps_none/summary.json"))["parallel"]
assert plain["bytes_per_push"] == plain["predicted_bytes_per_push"], plain
for c in ("bsp", "async", "ssp"):
    s = json.load(open(f"{sys.argv[1]}/ps_{c}/summary.json"))
    p = s["parallel"]
    assert p["compression"] == "topk:0.05" and p["pull_compression"] == "fp16", p
    assert p["error_feedback"] is True, p
    assert p["bytes_per_push"] == p["predicted_bytes_per_push"], (c, p)
    assert p["bytes_per_pull"] == p["predicted_bytes_per_pull"], (c, p)
    assert p["bytes_per_push"] < 0.15 * plain["bytes_per_push"], (c, p, plain)
    assert p["bytes_per_pull"] < 0.55 * plain["bytes_per_pull"], (c, p, plain)
    assert s["final_test_accuracy"] > 0.5, (c, s["final_test_accuracy"])
PY
grep -q "pushes compressed, topk:0.05 decoded by the servers, error feedback on" "$TMP/ps_bsp.err" ||
  fail "no banner line for compressed pushes: $(cat "$TMP/ps_bsp.err")"
expect_error "parameter_server.compression.*powersgd:2.*one worker's push" train --config $CONFIG \
  --strategy parameter_server --compression powersgd:2 --out "$TMP/bad_ps1"
expect_error "pull_compression.*topk" train --config $CONFIG --strategy parameter_server \
  --set parameter_server.pull_compression=topk:0.1 --out "$TMP/bad_ps2"
echo "ok: parameter servers push topk:0.05 and pull fp16 (bsp, async, ssp) at their formulas' bytes"

MPIRUN=(mpirun --oversubscribe)
[[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
if command -v mpirun > /dev/null; then
  timeout 120 "${MPIRUN[@]}" -np 2 "$DTRAIN" train --config $CONFIG --set data.synthetic_samples=1024 \
    --epochs 1 --quiet --compression topk:0.05 --out "$TMP/mpi" > "$TMP/mpi.txt" 2>&1 ||
    fail "mpirun -np 2 --compression topk:0.05: $(cat "$TMP/mpi.txt")"
  python3 -c "import json,sys; p=json.load(open(sys.argv[1]))['parallel']; assert p['ranks'] == 2 and p['compression'] == 'topk:0.05', p" \
    "$TMP/mpi/summary.json" || fail "mpirun summary"
  echo "ok: mpirun -np 2 --compression topk:0.05"
fi

expect_error "data_parallel.compression.*topk:0.*accepted\|ratio" train --config $CONFIG \
  --compression topk:0 --out "$TMP/bad1"
expect_error "data_parallel.compression.*zip" train --config $CONFIG --compression zip --out "$TMP/bad2"
expect_error "exchanged whole" train --config $CONFIG --workers 2 --compression fp16 --zero-stage 1 \
  --out "$TMP/bad3"
expect_error "does not compress.*taken by data_parallel, parameter_server, local_sgd" train \
  --config examples/hogwild_sparse.toml --strategy hogwild --compression topk:0.01 --out "$TMP/bad4"
expect_error "does not compress.*taken by data_parallel" train --config $CONFIG --strategy pipeline \
  --workers 2 --compression fp16 --out "$TMP/bad5"
echo "ok: bad codecs are one-line errors; strategies without codecs refuse --compression"

"$DTRAIN" bench compression --codecs fp16,topk:0.01,powersgd:2 --elements 4099 --repeats 1 --json \
  > "$TMP/bench.json" || fail "bench compression"
python3 - "$TMP/bench.json" <<'PY' || fail "bench compression rows"
import json, sys
rows = json.load(open(sys.argv[1]))
assert [r["codec"] for r in rows] == ["memcpy", "fp16", "topk:0.01", "powersgd:2"], rows
assert all(r["encode_ms"] > 0 for r in rows), rows
assert rows[1]["payload_bytes"] == 2 * 4099 and rows[2]["payload_bytes"] == 8 * 41, rows
PY
expect_error "compression 'topk:0'" bench compression --codecs topk:0
echo "ok: dtrain bench compression"
