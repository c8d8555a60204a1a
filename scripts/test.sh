#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to the whole test suite: installs what is missing,
# builds Release and runs every test (ctest: unit, layering, end-to-end training to the accuracy
# targets), installs the build into a temporary prefix and builds and runs examples/cpp against
# it, then builds the unit tests with AddressSanitizer + UndefinedBehaviorSanitizer and runs them,
# then the multi-threaded kernels' and the in-process collectives' tests under ThreadSanitizer.
# .ci/run runs exactly this. Set DTRAIN_SKIP_SANITIZERS=1 to skip the sanitizer builds.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
JOBS="$(nproc)"

echo "== tests (Release) ==" >&2
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" -LE install

# cmake --install into a temporary prefix, examples/cpp built against it with find_package(dtrain)
# and run: a model defined in code must train on two workers (docs/LIBRARY.md).
echo "== installed library: examples/cpp against cmake --install ==" >&2
bash "$ROOT/tests/apps/library_e2e_test.sh" "$BUILD_DIR/dtrain"

if [[ "${DTRAIN_SKIP_SANITIZERS:-0}" != "1" ]]; then
  echo "== unit tests under ASan + UBSan ==" >&2
  ASAN_DIR="${ASAN_BUILD_DIR:-$ROOT/build-asan}"
  cmake -S "$ROOT" -B "$ASAN_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DDTRAIN_SANITIZE=address -DDTRAIN_BUILD_BENCH=OFF >/dev/null
  UNIT_TARGETS=(dtrain_base_tests dtrain_tensor_tests dtrain_comm_tests dtrain_nn_tests
                dtrain_optim_tests dtrain_data_tests dtrain_parallel_tests dtrain_ps_tests
                dtrain_train_tests dtrain_experiments_tests)
  cmake --build "$ASAN_DIR" -j "$JOBS" --target "${UNIT_TARGETS[@]}"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir "$ASAN_DIR" --output-on-failure -j "$JOBS" -L unit

  echo "== threaded kernels and in-process collectives under TSan (2 compute threads) ==" >&2
  TSAN_DIR="${TSAN_BUILD_DIR:-$ROOT/build-tsan}"
  cmake -S "$ROOT" -B "$TSAN_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DDTRAIN_SANITIZE=thread -DDTRAIN_BUILD_BENCH=OFF >/dev/null
  TSAN_TARGETS=(dtrain_base_tests dtrain_tensor_tests dtrain_comm_tests dtrain_nn_tests
                dtrain_optim_tests dtrain_parallel_tests dtrain_ps_tests)
  cmake --build "$TSAN_DIR" -j "$JOBS" --target "${TSAN_TARGETS[@]}"
  for target in "${TSAN_TARGETS[@]}"; do
    # DTRAIN_TEST_QUICK trims the collective sweeps (TSan runs ~10x slower), not what they cover.
    DTRAIN_THREADS=2 DTRAIN_TEST_QUICK=1 TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
      "$TSAN_DIR/tests/$target"
  done
  # The strategies whose ranks are threads of one process: the pipeline's executors (stage
  # threads, point-to-point sends, PipeDream's stashes), the hybrid grid, the spatial and tensor
  # splits, local and decentralized SGD, federated averaging and the strategies' equivalence
  # (80 tests, about 25 s under TSan).
  cmake --build "$TSAN_DIR" -j "$JOBS" --target dtrain_train_tests
  DTRAIN_THREADS=2 DTRAIN_TEST_QUICK=1 TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    "$TSAN_DIR/tests/dtrain_train_tests" \
    --gtest_filter='Pipeline*:Hybrid*:Spatial*:TensorParallel*:LocalSgd*:Federated*:StrategyEquivalence*:Decentralized*'
fi
echo "== all tests passed ==" >&2
