#!/usr/bin/env bash
# Configures and builds GraphPipe into build/ (binaries in build/bin/).
# Environment: GP_CUDA=AUTO|ON|OFF (default AUTO), GP_BUILD_TYPE (default RelWithDebInfo),
# GP_SANITIZE=address|undefined, GP_JOBS (default: number of cores).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=${GP_JOBS:-$(nproc)}
cmake -S "$root" -B "$root/build" -G Ninja \
  -DCMAKE_BUILD_TYPE="${GP_BUILD_TYPE:-RelWithDebInfo}" \
  -DGP_CUDA="${GP_CUDA:-AUTO}" \
  -DGP_SANITIZE="${GP_SANITIZE:-}" \
  -DGP_WERROR=ON
cmake --build "$root/build" -j "$jobs"
