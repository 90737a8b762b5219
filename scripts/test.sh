#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test (CTest). Exits non-zero on any failure.
# GPU tests are skipped (not passed) on machines without a GPU.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
cd "$root/build"
ctest --output-on-failure -j "${GP_JOBS:-$(nproc)}" --timeout 600
