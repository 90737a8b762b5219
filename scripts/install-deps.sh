#!/usr/bin/env bash
# Installs GraphPipe's build dependencies from Debian packages. Idempotent: installs only what
# is missing, and runs `apt-get update` only when something is. CUDA and NCCL are used when
# already installed (nvcc on PATH); they are not installed here.
set -euo pipefail

packages=(
  cmake ninja-build pkg-config g++
  protobuf-compiler libprotobuf-dev libgrpc++-dev protobuf-compiler-grpc
  libcli11-dev libspdlog-dev catch2
  libopenblas-dev libgloo-dev libonnx-dev
  libzip-dev  # the .npz export (zip64)
  python3 python3-numpy
  libssl-dev openssl  # TLS of the control plane: checking certificate files; the TLS e2e test
  clang libclang-rt-14-dev  # the fuzz targets (scripts/fuzz.sh): libFuzzer, ASan, UBSan
  openssh-server openssh-client  # e2e: ranks started over real ssh (test/e2e/multihost_test.sh)
  chromium-headless-shell  # the plan report's rendering test (report_render_test.sh)
  help2man  # man pages made from each program's --help (cmake --install)
)

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo_cmd=(sudo)
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
