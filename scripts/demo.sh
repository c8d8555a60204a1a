#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to a trained model: installs what is missing, builds
# Release, and trains the Fashion-MNIST MLP (examples/fashion_mlp.toml), printing progress and the
# final test accuracy. Extra arguments go to `dtrain train` (e.g. --set train.epochs=2).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
exec "$BUILD_DIR/dtrain" train --config "$ROOT/examples/fashion_mlp.toml" "$@"
