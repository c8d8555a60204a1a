#!/usr/bin/env bash
# Installs the Debian packages dtrain needs (idempotent: apt-get runs only when one is missing) and
# builds dtrain in Release into build/. Sourced by scripts/demo.sh and scripts/test.sh; may be run
# alone. Needs root or sudo for apt-get.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# What each package is for: see README.md, "Dependencies".
PACKAGES=(
  build-essential cmake ninja-build pkg-config  # compiler and build
  libopenblas-dev                               # GEMM (cblas_sgemm)
  openmpi-bin libopenmpi-dev                    # processes and hosts (mpirun)
  libcli11-dev libtomlplusplus-dev nlohmann-json3-dev libfmt-dev  # CLI, config, JSON, formatting
  zlib1g-dev                                    # gzip-compressed IDX files
  libisal-dev                                   # CRC-32 of checkpoints (ISA-L)
  libgtest-dev libgmock-dev libbenchmark-dev    # tests and micro-benchmarks
  dataset-fashion-mnist                         # the demo's data set
  fortunes                                      # text for the byte-level GPT (examples/fortunes_gpt.toml)
  python3                                       # the end-to-end tests read summary.json with it
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  echo "setup: installing ${missing[*]}" >&2
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi

BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"
