#!/usr/bin/env bash
# The installed library end to end (docs/LIBRARY.md): `cmake --install` of the build that holds
# dtrain into a temporary prefix, examples/cpp configured and built against it with
# find_package(dtrain), and its program run: a model defined in code trained on two workers
# (threads), whose loss must fall and whose test accuracy must beat chance by far.
# Usage: bash library_e2e_test.sh /path/to/build/dtrain   (the build folder is the binary's; run
# by ctest as apps.library_e2e_test, and by scripts/test.sh as its own step)
set -euo pipefail
DTRAIN=$(realpath "$1")
BUILD=$(dirname "$DTRAIN")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
source "$ROOT/tests/apps/e2e_helpers.sh"  # fail

PREFIX="$TMP/prefix"
cmake --install "$BUILD" --prefix "$PREFIX" > "$TMP/install.log" || { cat "$TMP/install.log" >&2; fail "cmake --install $BUILD"; }
for file in bin/dtrain include/dtrain/train/trainer.h include/dtrain/nn/linear.h \
            lib/cmake/dtrain/dtrainConfig.cmake lib/cmake/dtrain/dtrainConfigVersion.cmake \
            lib/cmake/dtrain/dtrainTargets.cmake lib/libdtrain_train.a; do
  [[ -f "$PREFIX/$file" ]] || fail "the install lacks $file"
done
[[ ! -e "$PREFIX/include/dtrain/apps" ]] || fail "the install holds the command's sources"
"$PREFIX/bin/dtrain" --version > /dev/null || fail "the installed dtrain does not run"
echo "ok: cmake --install put the libraries, headers, command and package config under the prefix"

# Another project: only the prefix is known to it. The compiler and ccache of the build are reused.
GENERATOR=()
command -v ninja > /dev/null && GENERATOR=(-G Ninja)
LAUNCHER=()
command -v ccache > /dev/null && LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$ROOT/examples/cpp" -B "$TMP/example" "${GENERATOR[@]}" "${LAUNCHER[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PREFIX" > "$TMP/configure.log" 2>&1 \
  || { cat "$TMP/configure.log" >&2; fail "examples/cpp does not configure against the installed package"; }
cmake --build "$TMP/example" > "$TMP/build.log" 2>&1 \
  || { cat "$TMP/build.log" >&2; fail "examples/cpp does not build against the installed package"; }
echo "ok: examples/cpp configured with find_package(dtrain) and built against the prefix"

# 2 epochs of 100 steps (Fashion-MNIST, or synthetic data when it is absent), 2 ranks.
timeout 300 "$TMP/example/custom_model" "$TMP/run" 2> "$TMP/train.log" \
  || { cat "$TMP/train.log" >&2; fail "the example program failed"; }
python3 - "$TMP/run" <<'PY' || { cat "$TMP/train.log" >&2; fail "the example's model did not train"; }
import json, sys
run = sys.argv[1]
summary = json.load(open(run + "/summary.json"))
steps = [r for r in map(json.loads, open(run + "/metrics.jsonl")) if r["kind"] == "step"]
first, last = steps[0]["loss"], steps[-1]["loss"]
print(f"custom model, 2 workers: loss {first:.3f} at step {steps[0]['step']} -> {last:.3f} at "
      f"step {steps[-1]['step']}, test accuracy {100 * summary['final_test_accuracy']:.2f}%")
assert summary["model"] == "custom", summary["model"]
assert summary["parallel"]["ranks"] == 2, summary["parallel"]
assert summary["steps"] == 200, summary["steps"]
assert last < 0.5 * first, (first, last)
assert summary["final_test_accuracy"] > 0.7, summary["final_test_accuracy"]
PY
echo "ok: the program built against the installed library trains its own model on two workers"
