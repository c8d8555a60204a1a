#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to the whole test suite: installs what is missing,
# builds Release and runs every test (ctest: unit, layering, end-to-end training to the accuracy
# targets), then builds the unit tests with AddressSanitizer + UndefinedBehaviorSanitizer and runs
# them. .ci/run runs exactly this. Set DTRAIN_SKIP_SANITIZERS=1 to skip the second build.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
JOBS="$(nproc)"

echo "== tests (Release) ==" >&2
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS"

if [[ "${DTRAIN_SKIP_SANITIZERS:-0}" != "1" ]]; then
  echo "== unit tests under ASan + UBSan ==" >&2
  ASAN_DIR="${ASAN_BUILD_DIR:-$ROOT/build-asan}"
  cmake -S "$ROOT" -B "$ASAN_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DDTRAIN_SANITIZE=address -DDTRAIN_BUILD_BENCH=OFF >/dev/null
  cmake --build "$ASAN_DIR" -j "$JOBS"
  # OpenBLAS's own threads are off (gemm.cc), so ASan sees only our code's allocations.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir "$ASAN_DIR" --output-on-failure -j "$JOBS" -L unit
fi
echo "== all tests passed ==" >&2
